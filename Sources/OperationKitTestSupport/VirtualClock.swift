// A clock whose time moves only when a test moves it: delays, timeouts and back-off waits of the
// library fire exactly when `advance(by:)` passes their deadline, on the test's thread.
// (Its state is behind a `Locked`, an `NSLock`: the thread sanitizer on Linux reports
// `Synchronization.Mutex` used from two threads as a race; see Documentation/Architecture.md.)
import OperationKit

/// An `OperationClock` whose time stands still until the test moves it.
///
/// Give it to the types that take a clock (or to a queue, so that its operations use it), then
/// move time with ``advance(by:)``: each timer whose deadline is passed fires, in deadline order
/// (in the order scheduled for equal deadlines), on the calling thread, with ``now`` set to its
/// deadline. A timer scheduled by a firing action fires in the same call if its deadline is
/// within the move. A test of a 30-second timeout takes microseconds.
///
/// ```swift
/// let clock = VirtualClock()
/// let fired = Latch()
/// clock.schedule(after: .seconds(30)) { fired.countDown() }
/// clock.advance(by: .seconds(29))   // nothing yet
/// clock.advance(by: .seconds(1))    // fires, on this thread
/// ```
public final class VirtualClock: OperationClock, Sendable {
    private struct Pending {
        let deadline: ContinuousClock.Instant
        let sequence: UInt64
        let timer: OperationTimer
        let action: @Sendable () -> Void
    }

    private struct State {
        var now: ContinuousClock.Instant
        var sequence: UInt64 = 0
        var pending: [Pending] = []
    }

    private let state: Locked<State>

    /// Creates a clock whose time starts at `start`.
    ///
    /// - Parameter start: The first value of ``now``; the real current instant by default.
    public init(start: ContinuousClock.Instant = .now) {
        state = Locked(State(now: start))
    }

    /// The current virtual instant.
    public var now: ContinuousClock.Instant { state.withLock { $0.now } }

    /// Keeps `action` until time reaches `deadline`. A deadline already passed fires at the next
    /// ``advance(by:)`` (``advance(by:)`` with `.zero` will do).
    ///
    /// - Parameters:
    ///   - deadline: When to call `action`.
    ///   - action: The work; it runs on the thread that moves time.
    /// - Returns: A timer that can cancel the call.
    @discardableResult
    public func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> OperationTimer {
        let timer = OperationTimer()
        state.withLock { state in
            state.sequence += 1
            state.pending.append(Pending(deadline: deadline, sequence: state.sequence, timer: timer, action: action))
        }
        return timer
    }

    /// How many timers wait, not counting cancelled ones.
    public var pendingTimerCount: Int {
        state.withLock { $0.pending.count(where: { !$0.timer.isCancelled }) }
    }

    /// The earliest deadline of a timer that waits, if any.
    public var nextDeadline: ContinuousClock.Instant? {
        state.withLock { $0.pending.filter { !$0.timer.isCancelled }.map(\.deadline).min() }
    }

    /// Moves time forward by `duration`, firing every timer due on the way.
    ///
    /// - Parameter duration: How far to move; a negative duration counts as zero.
    /// - Returns: How many timers fired.
    @discardableResult
    public func advance(by duration: Duration) -> Int {
        advance(to: now.advanced(by: max(duration, .zero)))
    }

    /// Moves time forward to `instant` (never back), firing every timer due on the way.
    ///
    /// - Parameter instant: Where to move; an instant in the past fires what is due and leaves
    ///   time where it is.
    /// - Returns: How many timers fired.
    @discardableResult
    public func advance(to instant: ContinuousClock.Instant) -> Int {
        var fired = 0
        while let next = takeNext(dueBy: instant) {
            if !next.timer.isCancelled {
                next.action()
                fired += 1
            }
        }
        state.withLock { state in
            if instant > state.now { state.now = instant }
        }
        return fired
    }

    /// Moves time to each pending deadline in turn until no timer waits (timers that schedule
    /// timers keep it going, up to `limit` firings).
    ///
    /// - Parameter limit: The most timers to fire, so that a timer that always schedules another
    ///   cannot loop forever.
    /// - Returns: How many timers fired.
    @discardableResult
    public func runAllTimers(limit: Int = 10_000) -> Int {
        var fired = 0
        while fired < limit, let deadline = nextDeadline {
            fired += advance(to: deadline)
        }
        return fired
    }

    /// Removes and returns the earliest pending timer due by `instant`, with `now` set to its
    /// deadline (never moved back).
    private func takeNext(dueBy instant: ContinuousClock.Instant) -> Pending? {
        state.withLock { state in
            state.pending.removeAll { $0.timer.isCancelled }
            guard
                let index = state.pending.indices.min(by: {
                    (state.pending[$0].deadline, state.pending[$0].sequence)
                        < (state.pending[$1].deadline, state.pending[$1].sequence)
                }),
                state.pending[index].deadline <= instant
            else { return nil }
            let next = state.pending.remove(at: index)
            if next.deadline > state.now { state.now = next.deadline }
            return next
        }
    }
}
