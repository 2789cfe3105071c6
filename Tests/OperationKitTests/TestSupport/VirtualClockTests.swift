// Tests of the test kit's VirtualClock: timers fire only when time is moved, in deadline order,
// on the caller's thread, and a cancelled timer never fires.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("VirtualClock", .offThePool)
struct VirtualClockTests {
    @Test("a timer fires only when time passes its deadline")
    func firesAtDeadline() {
        let clock = VirtualClock()
        let fired = Recorder<Int>()
        clock.schedule(after: .seconds(30)) { fired.record(1) }
        #expect(clock.advance(by: .seconds(29)) == 0)
        #expect(fired.values.isEmpty)
        #expect(clock.advance(by: .seconds(1)) == 1)
        #expect(fired.values == [1])
        #expect(clock.pendingTimerCount == 0)
    }

    @Test("timers fire in deadline order, equal deadlines in the order scheduled, with now at their deadline")
    func order() {
        let clock = VirtualClock()
        let start = clock.now
        let fired = Recorder<(String, Duration)>()
        for (name, seconds) in [("c", 3), ("a", 1), ("b1", 2), ("b2", 2)] {
            clock.schedule(after: .seconds(seconds)) { fired.record((name, clock.now - start)) }
        }
        #expect(clock.advance(by: .seconds(10)) == 4)
        #expect(fired.values.map(\.0) == ["a", "b1", "b2", "c"])
        #expect(fired.values.map(\.1) == [.seconds(1), .seconds(2), .seconds(2), .seconds(3)])
        #expect(clock.now - start == .seconds(10))
    }

    @Test("a cancelled timer never fires")
    func cancelled() {
        let clock = VirtualClock()
        let fired = Recorder<Int>()
        let timer = clock.schedule(after: .seconds(1)) { fired.record(1) }
        timer.cancel()
        #expect(clock.pendingTimerCount == 0)
        #expect(clock.advance(by: .seconds(5)) == 0)
        #expect(fired.values.isEmpty)
    }

    @Test("a timer scheduled by a firing timer fires in the same move when due within it")
    func chained() {
        let clock = VirtualClock()
        let fired = Recorder<Int>()
        clock.schedule(after: .seconds(1)) {
            fired.record(1)
            clock.schedule(after: .seconds(1)) { fired.record(2) }
            clock.schedule(after: .seconds(10)) { fired.record(3) }
        }
        #expect(clock.advance(by: .seconds(3)) == 2)
        #expect(fired.values == [1, 2])
        #expect(clock.nextDeadline != nil)
        #expect(clock.runAllTimers() == 1)
        #expect(fired.values == [1, 2, 3])
    }

    @Test("a deadline already passed fires at the next move, even by zero; time never goes back")
    func pastDeadline() {
        let clock = VirtualClock()
        let start = clock.now
        let fired = Recorder<Int>()
        clock.schedule(at: start.advanced(by: .seconds(-5))) { fired.record(1) }
        #expect(fired.values.isEmpty)
        #expect(clock.advance(by: .zero) == 1)
        #expect(clock.now == start)
        clock.advance(to: start.advanced(by: .seconds(-1)))
        #expect(clock.now == start)
    }

    @Test("runAllTimers stops at its limit when timers keep scheduling timers")
    func limit() {
        let clock = VirtualClock()
        @Sendable func again() { clock.schedule(after: .seconds(1), again) }
        again()
        #expect(clock.runAllTimers(limit: 50) == 50)
        #expect(clock.pendingTimerCount == 1)
    }

    @Test("the system clock calls back once its deadline passed, and not when cancelled")
    func systemClock() {
        let clock: any OperationClock = SystemOperationClock()
        let fired = Latch()
        let cancelled = Recorder<Int>()
        clock.schedule(after: .milliseconds(1)) { fired.countDown() }
        // Cancelled well before its deadline: a deadline of zero could pass (and the call begin,
        // which a cancel does not stop) before the cancel, as it once did in a CI run.
        clock.schedule(after: .milliseconds(300)) { cancelled.record(1) }.cancel()
        #expect(fired.wait(timeout: .seconds(30)))
        // A later timer shows the cancelled one had its turn.
        let after = Latch()
        clock.schedule(after: .milliseconds(600)) { after.countDown() }
        #expect(after.wait(timeout: .seconds(30)))
        #expect(cancelled.values.isEmpty)
    }
}
