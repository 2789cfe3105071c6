// DelayProcedureTests: a delay finishes after its duration or at its deadline on a virtual
// clock (given, or its queue's), at once when there is nothing to wait for, and at once when cancelled.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("DelayProcedure", .offThePool)
struct DelayProcedureTests {
    @Test("default names say the delay")
    func names() {
        #expect(DelayProcedure(by: .seconds(1)).name == "Delay by \(Duration.seconds(1))")
        let deadline = ContinuousClock.now
        #expect(DelayProcedure(until: deadline).name == "Delay until \(deadline)")
        #expect(DelayProcedure(name: "pause", by: .seconds(1)).name == "pause")
    }

    @Test("a delay of 30 s finishes when the queue's clock passes 30 s, not before")
    func finishesAfterDuration() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-duration", clock: clock)
        let delay = DelayProcedure(by: .seconds(30))
        let log = ProcedureEventLog()
        try delay.addObserver(log.observer)
        try queue.addOperation(delay)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(29))
        #expect(!delay.isFinished)
        clock.advance(by: .seconds(1))
        #expect(await log.finishes())
        #expect(!delay.isCancelled && delay.errors.isEmpty)
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("a delay until a deadline finishes when the clock reaches it; a given clock wins over the queue's")
    func finishesAtDeadline() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-deadline")  // real time: not used
        let delay = DelayProcedure(until: clock.now + .seconds(3_600), clock: clock)
        try queue.addOperation(delay)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(3_599))
        #expect(!delay.isFinished)
        clock.advance(to: clock.now + .seconds(1))
        #expect(await delay.finishes())
        #expect(!delay.isCancelled)
    }

    @Test("a duration that is not positive, or a deadline passed, finishes at once without a timer",
          arguments: [DelayProcedure.Delay.by(.zero), .by(.seconds(-9_000_000)), .until(.now - .seconds(60))])
    func nothingToWaitFor(_ wait: DelayProcedure.Delay) async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-none", clock: clock)
        let delay = DelayProcedure(delay: wait)
        try queue.addOperation(delay)
        #expect(await delay.finishes())
        #expect(clock.pendingTimerCount == 0)
        #expect(!delay.isCancelled && delay.errors.isEmpty)
    }

    @Test("cancelled before it runs: finishes cancelled, never starting a timer")
    func cancelledBeforeRunning() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-cancel-before", clock: clock)
        let delay = DelayProcedure(by: .seconds(10))
        delay.cancel()
        try queue.addOperation(delay)
        #expect(await delay.finishes())
        #expect(delay.isCancelled)
        #expect(clock.pendingTimerCount == 0)
    }

    @Test("cancelled while it waits (from its did-execute observer): finishes at once, the timer stopped")
    func cancelledWhileWaiting() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-cancel-during", clock: clock)
        let delay = DelayProcedure(by: .seconds(10))
        let finishes = AtomicCounter()
        try delay.addObserver(ClosureObserver(didExecute: { $0.cancel() }, didFinish: { _, _ in finishes.increment() }))
        try queue.addOperation(delay)
        #expect(await delay.finishes())  // no time moved
        #expect(delay.isCancelled && delay.errors.isEmpty)
        #expect(clock.pendingTimerCount == 0)
        clock.advance(by: .seconds(60))  // a timer that fired now would change nothing
        #expect(finishes.value == 1)
    }

    @Test("cancelled with an error while it waits: finishes with that error")
    func cancelledWithError() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-cancel-error", clock: clock)
        let delay = DelayProcedure(by: .seconds(10))
        try queue.addOperation(delay)
        #expect(await pendingTimers(clock, 1))
        delay.cancel(with: ProcedureTestError(7))
        #expect(await delay.finishes())
        #expect(errorIDs(delay.errors) == [7])
        #expect(clock.pendingTimerCount == 0)
    }

    @Test("the delay can be injected from a procedure's result")
    func injectedDelay() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-injected", clock: clock)
        let backOff = ClosureProcedure<Duration> { .seconds(5) }
        let delay = DelayProcedure(by: .zero)
        try delay.injectResult(from: backOff) { delay, wait in delay.delay = .by(wait) }
        try queue.addOperations([backOff, delay], waitUntilFinished: false)
        #expect(await pendingTimers(clock, 1))
        #expect(clock.nextDeadline == clock.now + .seconds(5))
        clock.advance(by: .seconds(5))
        #expect(await delay.finishes())
        #expect(delay.delay == .by(.seconds(5)))
    }

    @Test("a waiting delay holds no concurrency slot: the queue's only slot runs other work meanwhile")
    func holdsNoSlot() async throws {
        let clock = VirtualClock()
        let queue = try ConcurrentOperationQueue(name: "delay-slot", maxConcurrentOperationCount: 1, clock: clock)
        let delay = DelayProcedure(by: .seconds(30))
        try queue.addOperation(delay)
        #expect(await pendingTimers(clock, 1))
        let other = ClosureOperation(name: "other") {}
        try queue.addOperation(other)
        #expect(await other.finishes())
        #expect(!delay.isFinished)
        clock.advance(by: .seconds(30))
        #expect(await delay.finishes())
    }

    @Test("a dependent of a delay waits for it")
    func dependentWaits() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "delay-dependent", clock: clock)
        let delay = DelayProcedure(by: .seconds(2))
        let ran = Latch()
        let after = ClosureProcedure<Void> { ran.countDown() }
        try after.addDependency(delay)
        try queue.addOperations([delay, after], waitUntilFinished: false)
        #expect(await pendingTimers(clock, 1))
        #expect(ran.count == 1)
        clock.advance(by: .seconds(2))
        #expect(await opened(ran))
    }
}
