// Tests of the queue part of issue 16: several execution blocks on a ClosureOperation
// (Foundation's BlockOperation.addExecutionBlock).
import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

@Suite("Queue part: execution blocks of ClosureOperation", .offThePool)
struct QueueExecutionBlocksTests {
    @Test("added blocks run after the first, in order, and the operation finishes after them all")
    func blocksRunInOrder() async throws {
        let log = Recorder<String>()
        let operation = ClosureOperation { log.record("first") }
        try operation.addExecutionBlock { log.record("second") }
        try operation.addExecutionBlock { log.record("third") }
        let completionSaw = Recorder<[String]>()
        operation.completionBlock = { completionSaw.record(log.values) }
        let queue = ConcurrentOperationQueue(name: "blocks")
        try queue.addOperation(operation)
        #expect(await queue.empties())
        #expect(log.values == ["first", "second", "third"])
        #expect(completionSaw.values == [["first", "second", "third"]])
        #expect(operation.isFinished)
    }

    @Test("blocks can be added while the operation waits in a queue, and each runs once")
    func blocksAddedWhileQueued() async throws {
        let queue = ConcurrentOperationQueue(name: "blocks-queued")
        queue.isSuspended = true
        let count = AtomicCounter()
        let operation = ClosureOperation { count.increment() }
        try queue.addOperation(operation)
        for _ in 0..<99 { try operation.addExecutionBlock { count.increment() } }
        queue.isSuspended = false
        #expect(await queue.empties())
        #expect(count.value == 100)
    }

    @Test("blocks run when the operation is started by hand")
    func blocksOnStart() throws {
        let log = Recorder<Int>()
        let operation = ClosureOperation { log.record(1) }
        try operation.addExecutionBlock { log.record(2) }
        try operation.start()
        #expect(operation.isFinished)
        #expect(log.values == [1, 2])
    }

    @Test("adding a block once the operation started or finished throws, and the block never runs")
    func tooLate() async throws {
        let entered = Latch()
        let release = Gate()
        let ran = AtomicCounter()
        let operation = ClosureOperation {
            entered.countDown()
            _ = release.wait(timeout: operationTestTimeout)
        }
        let queue = ConcurrentOperationQueue(name: "blocks-late")
        try queue.addOperation(operation)
        #expect(await opened(entered))
        let whileRunning = caughtOperationError { try operation.addExecutionBlock { ran.increment() } }
        #expect(whileRunning?.code == .alreadyStarted)
        release.open()
        #expect(await queue.empties())
        let afterFinish = caughtOperationError { try operation.addExecutionBlock { ran.increment() } }
        #expect(afterFinish?.code == .alreadyFinished)
        #expect(ran.value == 0)
    }

    @Test("an asynchronous ClosureOperation refuses execution blocks")
    func asynchronousRefuses() async throws {
        let operation = ClosureOperation(asynchronous: { $0.finish() })
        let error = caughtOperationError { try operation.addExecutionBlock {} }
        #expect(error?.code == .asynchronousClosure)
        try operation.start()
        #expect(operation.isFinished)
    }

    @Test("a cancelled operation runs none of its blocks")
    func cancelledRunsNone() async throws {
        let count = AtomicCounter()
        let operation = ClosureOperation { count.increment() }
        try operation.addExecutionBlock { count.increment() }
        operation.cancel()
        try operation.addExecutionBlock { count.increment() }  // allowed: it has not started
        let queue = ConcurrentOperationQueue(name: "blocks-cancelled")
        try queue.addOperation(operation)
        #expect(await queue.empties())
        #expect(operation.isCancelled)
        #expect(count.value == 0)
    }
}
