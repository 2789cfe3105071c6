// The clock the library's timers come from: delays, timeouts, and the waits of retries and repeats.
// Real time by default; a test injects a virtual clock (OperationKitTestSupport's `VirtualClock`).
import Dispatch
import Synchronization

/// Where the library's timers come from: ``DelayProcedure``-style waits, ``TimeoutObserver``,
/// and the waits between the attempts of ``RetryOperation`` and repeats.
///
/// The library asks a clock for the current instant and for a callback at a deadline, never for
/// a blocked thread. ``SystemOperationClock`` (the default) uses real time and Dispatch timers; a
/// test injects a virtual clock instead, so that a 30-second timeout takes microseconds and
/// fires exactly when the test moves time past it.
///
/// ```swift
/// struct LoggingClock: OperationClock {
///     let base = SystemOperationClock()
///     var now: ContinuousClock.Instant { base.now }
///     func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> OperationTimer {
///         print("timer at \(deadline)")
///         return base.schedule(at: deadline, action)
///     }
/// }
/// ```
public protocol OperationClock: Sendable {
    /// The current instant on this clock.
    var now: ContinuousClock.Instant { get }

    /// Calls `action` once, on a thread of the clock's choosing, when `deadline` has passed
    /// (soon, if it already has), unless the returned timer is cancelled first.
    ///
    /// - Parameters:
    ///   - deadline: When to call `action`.
    ///   - action: The work; it must not block for long.
    /// - Returns: A timer whose ``OperationTimer/cancel()`` stops the call if it has not begun.
    @discardableResult
    func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> OperationTimer
}

extension OperationClock {
    /// Calls `action` once `delay` has passed from ``now`` (soon, if `delay` is not positive).
    ///
    /// - Parameters:
    ///   - delay: How long to wait.
    ///   - action: The work.
    /// - Returns: A timer that can cancel the call.
    @discardableResult
    public func schedule(after delay: Duration, _ action: @escaping @Sendable () -> Void) -> OperationTimer {
        schedule(at: now.advanced(by: max(delay, .zero)), action)
    }
}

/// A pending call of an ``OperationClock``: cancel it to stop the call.
///
/// Clocks make one per ``OperationClock/schedule(at:_:)`` and check ``isCancelled`` just before
/// they call the action; a cancel that comes after the action has begun changes nothing.
public final class OperationTimer: Sendable {
    private let cancelled = Atomic<Bool>(false)

    /// Creates a timer that is not cancelled (for clocks of your own).
    public init() {}

    /// Stops the call if it has not begun. Cancelling twice is harmless.
    public func cancel() { cancelled.store(true, ordering: .releasing) }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }
}

/// Real time: `ContinuousClock` for the current instant, Dispatch timers on a global queue for
/// the calls. No thread waits.
public struct SystemOperationClock: OperationClock {
    /// The quality of service of the queue that runs the actions.
    public let qualityOfService: DispatchQoS.QoSClass

    /// Creates the clock.
    ///
    /// - Parameter qualityOfService: The quality of service of the global queue that runs the
    ///   actions; `.default` by default.
    public init(qualityOfService: DispatchQoS.QoSClass = .default) {
        self.qualityOfService = qualityOfService
    }

    /// `ContinuousClock.now`.
    public var now: ContinuousClock.Instant { ContinuousClock.now }

    /// Calls `action` on a global dispatch queue once `deadline` has passed.
    ///
    /// - Parameters:
    ///   - deadline: When to call `action`.
    ///   - action: The work.
    /// - Returns: A timer that can cancel the call.
    @discardableResult
    public func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> OperationTimer {
        let timer = OperationTimer()
        let delay = max(deadline - ContinuousClock.now, .zero)
        DispatchQueue.global(qos: qualityOfService).asyncAfter(deadline: .now() + delay.dispatchInterval) {
            if !timer.isCancelled { action() }
        }
        return timer
    }
}

extension OperationClock where Self == SystemOperationClock {
    /// Real time (``SystemOperationClock``), the default of every type that takes a clock.
    public static var system: SystemOperationClock { SystemOperationClock() }
}
