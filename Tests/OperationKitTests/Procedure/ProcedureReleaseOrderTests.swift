import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// When a procedure lets go of its conditions and observers, whichever thread tells did finish:
// the did-finish hook and observers see the counts at 0, and no wait for the finish returns
// before they are let go. (The completion block runs before did finish is told; when did finish
// is queued behind another event, it still sees the counts of before.)
@Suite("Procedure: conditions and observers let go before did finish", .offThePool)
struct ProcedureReleaseOrderTests {
    @Test("did finish queued behind the did cancel that finished it: the counts read 0 in did finish, and waits return after")
    func queuedDidFinish() async throws {
        let queue = ConcurrentOperationQueue(name: "release-order")
        let executing = Latch()
        let seenInDidFinish = Locked<(conditions: Int, observers: Int)?>(nil)
        let procedure = ClosureProcedure<Void>(name: "queued-finish", asynchronous: { _ in executing.countDown() })
        try procedure.addCondition(ClosureCondition { _ in .satisfied })
        // Finishing inside did cancel: will finish and did finish are raised while this thread
        // delivers an event of the procedure, so they are queued for its delivery loop.
        try procedure.addObserver(ClosureObserver(
            didCancel: { cancelled, _ in cancelled.finish() },
            didFinish: { finished, _ in
                seenInDidFinish.withLock { $0 = (finished.conditionCount, finished.observerCount) }
            }))
        try queue.addOperation(procedure)
        #expect(await executing.opens())
        #expect(procedure.conditionCount == 1 && procedure.observerCount == 1)
        procedure.cancel()
        #expect(await procedure.finishes())
        #expect(procedure.conditionCount == 0 && procedure.observerCount == 0)
        let seen = seenInDidFinish.withLock { $0 }
        #expect(seen?.conditions == 0 && seen?.observers == 0, "did finish saw \(String(describing: seen))")
    }

    @Test("did finish queued, an observer told on a blocked dispatch queue: the finish completes only after that observer's did finish")
    func queuedDidFinishWaitsForEventQueue() async throws {
        let queue = ConcurrentOperationQueue(name: "release-order-event-queue")
        let executing = Latch()
        let observerQueue = DispatchQueue(label: "release-order.observer")
        let holdObserverQueue = Gate()
        let told = Recorder<String>()
        observerQueue.async { _ = holdObserverQueue.wait(timeout: procedureTimeout) }
        let procedure = ClosureProcedure<Void>(name: "queued-event-queue", asynchronous: { _ in executing.countDown() })
        try procedure.addObserver(ClosureObserver(didCancel: { cancelled, _ in cancelled.finish() }))
        try procedure.addObserver(ClosureObserver(didFinish: { _, _ in told.record("didFinish") }).on(observerQueue))
        try queue.addOperation(procedure)
        #expect(await executing.opens())
        procedure.cancel()  // finishes inside did cancel: did finish is queued for this thread
        #expect(procedure.isFinished)
        // The observer's did finish waits behind the held job: the queue must still hold the
        // procedure (the rest of the finish waits for that observer).
        #expect(queue.operationCount == 1, "the finish completed before the event-queue observer was told did finish")
        #expect(told.values.isEmpty)
        holdObserverQueue.open()
        #expect(await procedure.finishes())
        #expect(told.values == ["didFinish"], "the wait returned before did finish reached the observer")
        #expect(await queue.empties())
    }

    @Test("did finish told at once: the same order")
    func directDidFinish() async throws {
        let queue = ConcurrentOperationQueue(name: "release-order-direct")
        let seenInDidFinish = Locked<(conditions: Int, observers: Int)?>(nil)
        let procedure = ClosureProcedure<Void>(name: "direct-finish") {}
        try procedure.addCondition(ClosureCondition { _ in .satisfied })
        try procedure.addObserver(ClosureObserver(didFinish: { finished, _ in
            seenInDidFinish.withLock { $0 = (finished.conditionCount, finished.observerCount) }
        }))
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(procedure.conditionCount == 0 && procedure.observerCount == 0)
        let seen = seenInDidFinish.withLock { $0 }
        #expect(seen?.conditions == 0 && seen?.observers == 0, "did finish saw \(String(describing: seen))")
    }
}
