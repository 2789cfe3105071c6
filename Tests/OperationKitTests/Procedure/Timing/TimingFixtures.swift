// TimingFixtures: a virtual clock that also records the waits asked of it, for the tests of
// delays, timeouts, retries and repeats.
import OperationKit
import OperationKitTestSupport

/// A ``VirtualClock`` that records the wait of each timer scheduled on it (deadline minus now).
final class RecordingClock: OperationClock, Sendable {
    let base = VirtualClock()
    let waits = Recorder<Duration>()

    var now: ContinuousClock.Instant { base.now }

    @discardableResult
    func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> OperationTimer {
        let timer = base.schedule(at: deadline, action)
        waits.record(deadline - base.now)
        return timer
    }

    /// Waits (bounded) until `count` timers were scheduled.
    func scheduled(_ count: Int) async -> Bool {
        await eventually { waits.values.count >= count }
    }

    /// Waits until timer number `count` is scheduled, then moves time by its wait.
    func advanceThroughTimer(_ count: Int) async -> Bool {
        guard await scheduled(count) else { return false }
        base.advance(by: waits.values[count - 1])
        return true
    }
}

/// Waits (bounded) until `clock` has `count` timers pending.
func pendingTimers(_ clock: VirtualClock, _ count: Int) async -> Bool {
    await eventually { clock.pendingTimerCount == count }
}

/// A ``VirtualClock`` that calls `whenScheduling` on the scheduling thread once each timer is
/// scheduled, before `schedule` returns: a test does something exactly while its caller sets up
/// a wait.
final class SchedulingHookClock: OperationClock, Sendable {
    let base = VirtualClock()
    private let hook = Locked<(@Sendable () -> Void)?>(nil)

    var now: ContinuousClock.Instant { base.now }

    /// Called after each `schedule`, on its thread, with no lock of the clock held.
    var whenScheduling: (@Sendable () -> Void)? {
        get { hook.withLock { $0 } }
        set { hook.withLock { $0 = newValue } }
    }

    @discardableResult
    func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> OperationTimer {
        let timer = base.schedule(at: deadline, action)
        whenScheduling?()
        return timer
    }
}
