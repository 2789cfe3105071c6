// ProgressCoalescer: the pure decision of when one progress subscriber gets an update (at most
// one per interval, the latest value, the final one at once). No lock, no clock, no callbacks.

/// When one subscriber of a ``ProgressBroadcaster`` gets an update. A value type: the broadcaster
/// calls it under its lock with the time, and performs the action it returns.
///
/// Versions number the broadcaster's values (each change makes the next version). The coalescer
/// remembers the last version sent, when it was sent, and whether a timer is armed; so however
/// changes and timer firings interleave, a version is sent at most once, and a version that is
/// not sent at once is sent by the timer unless a later one was sent first.
struct ProgressCoalescer {
    enum Action: Equatable {
        /// Send the current value now.
        case send
        /// Arm a timer for this instant, then call ``timerFired(version:now:)``.
        case schedule(at: ContinuousClock.Instant)
        /// Nothing to do now (a timer is armed, or the version was sent).
        case nothing
    }

    /// At most one update per interval; `nil`: every change.
    let interval: Duration?
    private(set) var lastSent: ContinuousClock.Instant?
    private(set) var sentVersion: UInt64 = 0
    private(set) var timerArmed = false

    init(interval: Duration?) {
        self.interval = interval
    }

    /// The subscriber has just subscribed: it gets the current value at once.
    mutating func subscribed(version: UInt64, now: ContinuousClock.Instant) -> Action {
        sent(version, at: now)
        return .send
    }

    /// The value changed to `version`; `isFinal` if it says the work is complete (sent at once).
    mutating func changed(version: UInt64, isFinal: Bool, now: ContinuousClock.Instant) -> Action {
        guard version > sentVersion else { return .nothing }
        guard let interval, !isFinal, let lastSent, now - lastSent < interval else {
            sent(version, at: now)
            return .send
        }
        if timerArmed { return .nothing }
        timerArmed = true
        return .schedule(at: lastSent + interval)
    }

    /// The armed timer fired; `version` is the current one.
    mutating func timerFired(version: UInt64, now: ContinuousClock.Instant) -> Action {
        precondition(timerArmed, "Internal inconsistency: a progress timer fired that was not armed")
        timerArmed = false
        guard version > sentVersion else { return .nothing }
        sent(version, at: now)
        return .send
    }

    private mutating func sent(_ version: UInt64, at now: ContinuousClock.Instant) {
        sentVersion = version
        lastSent = now
    }
}
