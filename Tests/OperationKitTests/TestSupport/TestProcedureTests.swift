// Tests of the test kit's TestProcedure, Gate and Latch: each way of finishing, cancellation
// before and while it runs, a produced operation, and the counters.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("TestSupport: TestProcedure, gates and latches", .offThePool)
struct TestProcedureTests {
    static func queue(_ name: String) throws -> ConcurrentOperationQueue {
        try ConcurrentOperationQueue(name: "kit-\(name)", maxConcurrentOperationCount: 2)
    }

    @Test("finishes at once with its value or its error, counting each hook once")
    func atOnce() async throws {
        let queue = try Self.queue("test-procedure")
        let value = TestProcedure(name: "value", output: "hello")
        let error = TestProcedure(name: "error", output: "hello", error: TestError(1))
        try queue.addOperations([value, error], waitUntilFinished: false)
        await expectValue(value, equals: "hello")
        await expectFinished(error, errors: .equal(to: [TestError(1)]))
        #expect(error.output == nil)
        #expect(await value.didFinishHookRan.opened(within: .seconds(30)))
        #expect(value.executeCount == 1 && value.cancelCount == 0)
        #expect(value.willFinishCount == 1 && value.didFinishCount == 1)
    }

    @Test("held by a gate: executes, waits for the gate, then finishes; a shut gate times out")
    func gated() async throws {
        let queue = try Self.queue("gated")
        let gate = Gate()
        let held = TestProcedure(name: "held", output: 3, finishing: .whenOpened(gate))
        let forgotten = TestProcedure(name: "forgotten", output: 3, finishing: .whenOpened(Gate(), timeout: .milliseconds(10)))
        try queue.addOperations([held, forgotten], waitUntilFinished: false)
        #expect(await held.executing.opened(within: .seconds(30)))
        #expect(held.isExecuting && !gate.isOpen)
        gate.open()
        #expect(gate.isOpen)
        await expectValue(held, equals: 3)
        await expectFinished(forgotten, errors: .codes([.timedOut]))
        #expect((forgotten.errors.first as? OperationError)?.operationNames == ["forgotten"])
    }

    @Test("finished by the test; cancelled while executing, and before")
    func byTestAndCancelled() async throws {
        let queue = try Self.queue("by-test")
        let manual = TestProcedure(name: "manual", output: 0, finishing: .byTest)
        let cancelledWhileRunning = TestProcedure(name: "running", finishing: .byTest)
        let cancelledBefore = TestProcedure(name: "before")
        cancelledBefore.cancel()
        try queue.addOperations([manual, cancelledWhileRunning, cancelledBefore], waitUntilFinished: false)
        #expect(await manual.executing.opened(within: .seconds(30)))
        #expect(manual.finish(withValue: 9))
        await expectValue(manual, equals: 9)
        #expect(await cancelledWhileRunning.executing.opened(within: .seconds(30)))
        cancelledWhileRunning.cancel()
        #expect(cancelledWhileRunning.isExecuting, "a cancel does not finish an executing procedure")
        cancelledWhileRunning.finish()
        await expectCancelled(cancelledWhileRunning, errors: .empty)
        await expectCancelled(cancelledBefore)
        #expect(cancelledWhileRunning.executeCount == 1 && cancelledWhileRunning.cancelCount == 1)
        #expect(cancelledBefore.executeCount == 0 && cancelledBefore.cancelCount == 1)
        #expect(await cancelledBefore.didFinishHookRan.opened(within: .seconds(30)))
        #expect(cancelledBefore.didFinishCount == 1)
    }

    @Test("produces its operation before finishing; a refused produce finishes it with the error")
    func produces() async throws {
        let queue = try Self.queue("produces")
        let child = ClosureOperation(name: "child") {}
        let parent = TestProcedure(name: "parent", produces: child)
        let observer = RecordingObserver()
        try parent.addObserver(observer)
        let alreadyQueued = ClosureOperation(name: "queued") {}
        let refused = TestProcedure(name: "refused", produces: alreadyQueued)
        try queue.addOperations([parent, alreadyQueued, refused], waitUntilFinished: false)
        await expectFinished(parent)
        await expectFinished(child)
        observer.expectOrder([.willExecute, .didProduce, .willFinish, .didFinish])
        await expectFinished(refused, errors: .count(1))
    }

    @Test("latches count down, stay open and time out; gates open once")
    func latchesAndGates() async {
        let latch = Latch(count: 2)
        #expect(latch.count == 2)
        #expect(await latch.opened(within: .milliseconds(10)) == false)
        latch.countDown()
        latch.countDown()
        latch.countDown()
        #expect(latch.count == 0)
        #expect(latch.wait(timeout: .seconds(1)))
        #expect(await latch.opened(within: .seconds(1)))
        #expect(await Latch(count: 0).opened(within: .seconds(1)))
        let gate = Gate()
        #expect(gate.wait(timeout: .milliseconds(10)) == false)
        gate.open()
        gate.open()
        #expect(await gate.opened(within: .seconds(1)))
    }
}
