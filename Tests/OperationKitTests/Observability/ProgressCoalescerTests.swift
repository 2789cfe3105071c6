@testable import OperationKit
import OperationKitTestSupport
import Testing

/// `ProgressCoalescer`: when one subscriber gets an update. Pure: instants are made up, no clock,
/// no threads.
@Suite("Observability: progress coalescing (pure)", .offThePool)
struct ProgressCoalescerTests {
    typealias Action = ProgressCoalescer.Action

    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    @Test("every change: each new version is sent at once, an old one never")
    func everyChange() {
        var coalescer = ProgressCoalescer(interval: nil)
        #expect(coalescer.subscribed(version: 1, now: at(0)) == .send)
        for version in 2...50 as ClosedRange<UInt64> {
            #expect(coalescer.changed(version: version, isFinal: false, now: at(0)) == .send)
        }
        #expect(coalescer.changed(version: 50, isFinal: false, now: at(0)) == .nothing)
        #expect(!coalescer.timerArmed)
    }

    /// One row: an event (a change or a timer firing) at a time, and the action expected.
    struct Step: Sendable, CustomStringConvertible {
        enum Event: Sendable { case change(UInt64, final: Bool), timer(UInt64) }
        let event: Event
        let atMilliseconds: Int
        let expected: Action
        var description: String { "\(event) at \(atMilliseconds) ms → \(expected)" }
    }

    static let interval: Duration = .milliseconds(100)

    /// Interval 100 ms, subscribed at 0 with version 1.
    static let coalescedScript: [Step] = [
        // Within the interval: one timer for the end of it, then nothing more until it fires.
        Step(event: .change(2, final: false), atMilliseconds: 10, expected: .schedule(at: ContinuousClock.now)),
        Step(event: .change(3, final: false), atMilliseconds: 20, expected: .nothing),
        Step(event: .change(4, final: false), atMilliseconds: 30, expected: .nothing),
        // The timer sends the latest.
        Step(event: .timer(4), atMilliseconds: 100, expected: .send),
        // After the interval: at once.
        Step(event: .change(5, final: false), atMilliseconds: 250, expected: .send),
        // Within it again: a timer; then the final value comes at once all the same.
        Step(event: .change(6, final: false), atMilliseconds: 260, expected: .schedule(at: ContinuousClock.now)),
        Step(event: .change(7, final: true), atMilliseconds: 270, expected: .send),
        // The timer finds nothing newer than what was sent.
        Step(event: .timer(7), atMilliseconds: 350, expected: .nothing),
    ]

    @Test("coalesced: at most one update per interval, the latest by timer, the final one at once")
    func coalesced() {
        var coalescer = ProgressCoalescer(interval: Self.interval)
        #expect(coalescer.subscribed(version: 1, now: at(0)) == .send)
        for step in Self.coalescedScript {
            let now = at(step.atMilliseconds)
            let action: Action
            switch step.event {
            case .change(let version, let final): action = coalescer.changed(version: version, isFinal: final, now: now)
            case .timer(let version): action = coalescer.timerFired(version: version, now: now)
            }
            switch (action, step.expected) {
            case (.schedule(let instant), .schedule):
                // Armed for the end of the interval that began with the last send.
                #expect(instant == coalescer.lastSent! + Self.interval, "\(step)")
            default:
                #expect(action == step.expected, "\(step)")
            }
        }
        #expect(coalescer.sentVersion == 7)
        #expect(!coalescer.timerArmed)
    }

    @Test("a zero interval means every change")
    func zeroInterval() {
        #expect(ProgressUpdatePolicy.coalesced(every: .zero).interval == nil)
        #expect(ProgressUpdatePolicy.everyChange.interval == nil)
        #expect(ProgressUpdatePolicy.default.interval == .milliseconds(100))
    }
}
