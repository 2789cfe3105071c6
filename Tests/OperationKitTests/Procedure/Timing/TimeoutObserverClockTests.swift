// TimeoutObserverClockTests: a TimeoutObserver's timer on a virtual clock (given, or the queue's),
// and TimeoutObserver(until:) with a deadline ahead or already passed.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("TimeoutObserver clocks and deadlines", .offThePool)
struct TimeoutObserverClockTests {
    /// Work whose reply never comes: it executes until someone finishes it.
    static func lostReply(_ name: String, ran: Latch = Latch()) -> ClosureProcedure<Int> {
        ClosureProcedure<Int>(name: name, asynchronous: { _ in ran.countDown() })
    }

    @Test("a 30 s timeout on the queue's virtual clock: nothing at 29 s, timed out at 30 s")
    func timeoutOnQueueClock() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "timeout-queue-clock", clock: clock)
        let ran = Latch()
        let work = Self.lostReply("lost", ran: ran)
        try work.addObserver(TimeoutObserver(timeout: .seconds(30)))
        try queue.addOperation(work)
        #expect(await opened(ran))
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(29))
        #expect(!work.isFinished)
        clock.advance(by: .seconds(1))
        #expect(await work.finishes())
        #expect(work.isCancelled && errorCodes(work.errors) == [.timedOut])
    }

    @Test("a given clock wins over the queue's")
    func givenClock() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "timeout-given-clock")  // real time: not used
        let work = Self.lostReply("lost")
        try work.addObserver(TimeoutObserver(timeout: .seconds(3_600), clock: clock))
        try queue.addOperation(work)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(3_600))
        #expect(await work.finishes())
        #expect(errorCodes(work.errors) == [.timedOut])
    }

    @Test("until a deadline: ends the work when the clock reaches it, with a deadline message")
    func deadlineAhead() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "timeout-deadline", clock: clock)
        let work = Self.lostReply("lost")
        let observer = TimeoutObserver(until: clock.now + .seconds(5))
        #expect(observer.deadline == clock.now + .seconds(5) && observer.timeout == .zero)
        try work.addObserver(observer)
        try queue.addOperation(work)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(4))
        #expect(!work.isFinished)
        clock.advance(by: .seconds(1))
        #expect(await work.finishes())
        let error = try #require(work.errors.first as? OperationError)
        #expect(error.code == .timedOut && "\(error)".contains("deadline"))
    }

    @Test("a deadline already passed at will-execute times out at once: the work never runs")
    func deadlinePassed() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "timeout-deadline-passed", clock: clock)
        let ran = AtomicCounter()
        let work = ClosureProcedure<Int>(name: "late") {
            ran.increment()
            return 1
        }
        try work.addObserver(TimeoutObserver(until: clock.now - .seconds(1)))
        try queue.addOperation(work)
        #expect(await work.finishes())  // no time moved
        #expect(ran.value == 0 && work.output == nil)
        #expect(work.isCancelled && errorCodes(work.errors) == [.timedOut])
        #expect(clock.pendingTimerCount == 0)
    }

    @Test("cancelOnly with a deadline: only cancels; the work finishes itself (here: finishesWhenCancelled)")
    func deadlineCancelOnly() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "timeout-deadline-cancel-only", clock: clock)
        let work = Self.lostReply("cooperative")
        work.finishesWhenCancelled = true
        try work.addObserver(TimeoutObserver(until: clock.now + .seconds(1), action: .cancelOnly))
        try queue.addOperation(work)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(1))
        #expect(await work.finishes())
        #expect(work.isCancelled && errorCodes(work.errors) == [.timedOut])
    }

    @Test("work that finishes before its deadline is left alone when time passes it")
    func finishedFirst() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "timeout-finished-first", clock: clock)
        let work = ClosureProcedure<Int>(name: "quick") { 5 }
        try work.addObserver(TimeoutObserver(until: clock.now + .seconds(10)))
        try work.addObserver(TimeoutObserver(timeout: .seconds(10)))
        try queue.addOperation(work)
        #expect(await work.finishes())
        clock.advance(by: .seconds(20))
        #expect(work.output == 5 && work.errors.isEmpty && !work.isCancelled)
    }

    @Test("Testing.md's virtual-time example, as written there")
    func lostReplyTimesOut() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "test", clock: clock) // every timer of its procedures
        let work = ClosureProcedure<Int>(asynchronous: { _ in })         // its reply never comes
        try work.addObserver(TimeoutObserver(timeout: .seconds(30)))
        try queue.addOperation(work)

        let timerSet = await outcome(within: .seconds(10)) {             // set at will-execute, on a queue thread
            var pause = PollPause()
            while clock.pendingTimerCount == 0 { await pause.next() }
        }
        #expect(timerSet != nil)
        clock.advance(by: .seconds(29))
        #expect(!work.isFinished)
        clock.advance(by: .seconds(1))                                   // fires, on this thread
        #expect(await outcome(within: .seconds(10)) { await work.waitUntilFinished() } != nil)
        #expect(work.isCancelled)                                        // errors: [timedOut]
    }
}
