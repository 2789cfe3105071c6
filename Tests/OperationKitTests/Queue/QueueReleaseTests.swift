import OperationKit
import OperationKitTestSupport
import Testing

/// When a queue lets go of the operations it finished. A worker parks them (see "Memory" in
/// Documentation/Architecture.md) for the adding thread to release, but never for long: a worker
/// that runs out of work releases them, and so does the finish that empties the queue.
@Suite("N. Queue: releasing finished operations", .offThePool)
struct QueueReleaseTests {
    /// A weak reference to an operation, readable from any thread.
    final class WeakOperation: @unchecked Sendable {  // written once, in init; weak loads are thread-safe
        weak var operation: ConcurrentOperation?
        init(_ operation: ConcurrentOperation) { self.operation = operation }
    }

    @Test("a finished operation is released once its worker runs out of work, while the queue still holds another")
    func releasedWhenTheWorkerLeaves() async throws {
        let queue = ConcurrentOperationQueue(name: "release.worker-leaves")
        let gate = Gate()
        let started = Latch()
        // Keeps the queue from emptying (and no add follows): only the worker's leaving can
        // release the parked operation.
        let holding = ClosureOperation(name: "holding") {
            started.countDown()
            _ = gate.wait()
        }
        try queue.addOperation(holding)
        #expect(await started.opens())
        let finished = Latch()
        let reference: WeakOperation
        do {
            let parked = ClosureOperation(name: "parked") {}
            parked.completionBlock = { finished.countDown() }
            reference = WeakOperation(parked)
            try queue.addOperation(parked)
        }
        #expect(await finished.opens())
        #expect(await eventually { reference.operation == nil }, "the finished operation is still alive")
        #expect(queue.operationCount == 1)
        gate.open()
        #expect(await queue.empties())
    }

    @Test("a worker that made way for other work holds no finished operation: the next add releases them all")
    func releasedAcrossWorkerTurns() async throws {
        // One worker (limit 1) runs 64 operations a turn, then hands the next one to a new
        // Dispatch job; the last operation holds the worker in its third turn.
        let queue = try ConcurrentOperationQueue(name: "release.turns", maxConcurrentOperationCount: 1)
        queue.isSuspended = true
        let count = 200
        let gate = Gate()
        let started = Latch()
        var references: [WeakOperation] = []
        do {
            let operations = (0..<count).map { index in
                ClosureOperation(name: "op\(index)") {
                    guard index == count - 1 else { return }
                    started.countDown()
                    _ = gate.wait(timeout: procedureTimeout)
                }
            }
            references = operations.map(WeakOperation.init)
            try queue.addOperations(operations, waitUntilFinished: false)
        }
        queue.isSuspended = false
        #expect(await started.opens())
        // An add releases every finished operation the queue still holds (see `finished`).
        try queue.addOperation(ClosureOperation(name: "late") {})
        let alive = references.dropLast().indices.filter { references[$0].operation != nil }
        #expect(alive.isEmpty, "finished operations still alive while the last one runs: \(alive.prefix(10))")
        gate.open()
        #expect(await queue.empties())
    }

    @Test("every finished operation but the one its worker still holds is released before the queue's wait returns")
    func releasedBeforeTheWaitReturns() async throws {
        let queue = try ConcurrentOperationQueue(name: "release.wait", maxConcurrentOperationCount: 1)
        queue.isSuspended = true
        let count = 200
        var references: [WeakOperation] = []
        do {
            let operations = (0..<count).map { index in ClosureOperation(name: "op\(index)") {} }
            references = operations.map(WeakOperation.init)
            try queue.addOperations(operations, waitUntilFinished: false)
        }
        queue.isSuspended = false
        await queue.waitUntilAllOperationsAreFinished()
        // In order on one worker, which may still hold the last one it ran.
        let alive = references.dropLast().indices.filter { references[$0].operation != nil }
        #expect(alive.isEmpty, "finished operations still alive after the wait: \(alive.prefix(10))")
    }
}
