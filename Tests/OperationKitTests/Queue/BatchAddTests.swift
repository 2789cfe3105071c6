import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// `addOperations(_:waitUntilFinished:)` is all-or-nothing (issue 13, item 1), and a cancelled
/// operation never closes a dependency cycle (item 12).
@Suite("Batch adds: all or nothing; a cancelled member breaks a cycle", .offThePool)
struct BatchAddTests {
    /// Calls `addOperations(operations, waitUntilFinished: wait)` on a thread of its own and
    /// returns what it threw, or `nil` if the call did not return within the test timeout (a hang
    /// becomes a failure, not a stuck run).
    static func addReturning(
        _ operations: [ConcurrentOperation], to queue: ConcurrentOperationQueue, waitUntilFinished wait: Bool
    ) -> Result<Void, OperationError>? {
        let returned = Latch()
        let outcome = Recorder<Result<Void, OperationError>>()
        onThreadOfItsOwn {
            do throws(OperationError) {
                try queue.addOperations(operations, waitUntilFinished: wait)
                outcome.record(.success(()))
            } catch {
                outcome.record(.failure(error))
            }
            returned.countDown()
        }
        guard returned.wait(timeout: operationTestTimeout) else { return nil }
        return outcome.values.first
    }

    static func refusal(_ result: Result<Void, OperationError>?, sourceLocation: SourceLocation = #_sourceLocation) -> OperationError? {
        guard let result else {
            Issue.record("addOperations did not return", sourceLocation: sourceLocation)
            return nil
        }
        guard case .failure(let error) = result else {
            Issue.record("addOperations did not throw", sourceLocation: sourceLocation)
            return nil
        }
        return error
    }

    @Test("issue 13 item 1: a batch whose last member closes a cycle, waitUntilFinished: true, throws at once and enqueues nothing")
    func cycleInBatchWaiting() throws {
        let queue = ConcurrentOperationQueue(name: "batch cycle wait")
        let runs = AtomicCounter()
        let a = ClosureOperation(name: "a") { runs.increment() }
        let b = ClosureOperation(name: "b") { runs.increment() }
        try a.addDependency(b)
        try b.addDependency(a)
        let error = try #require(Self.refusal(Self.addReturning([a, b], to: queue, waitUntilFinished: true)))
        #expect(error.code == .dependencyCycle)
        #expect(Set(error.operationNames) == ["a", "b"])
        #expect(queue.operationCount == 0)
        #expect(runs.value == 0)
        // Neither was claimed: with the cycle broken, both can be added and run.
        a.removeDependency(b)
        try queue.addOperations([a, b], waitUntilFinished: true)
        #expect(runs.value == 2)
    }

    @Test("issue 13 item 1: a refused batch without waiting leaves none of its members in the queue")
    func cycleInBatchNotWaiting() throws {
        let queue = ConcurrentOperationQueue(name: "batch cycle")
        queue.isSuspended = true
        let runs = AtomicCounter()
        let a = ClosureOperation(name: "a") { runs.increment() }
        let b = ClosureOperation(name: "b") { runs.increment() }
        try a.addDependency(b)
        try b.addDependency(a)
        let error = try #require(caughtOperationError { try queue.addOperations([a, b], waitUntilFinished: false) })
        #expect(error.code == .dependencyCycle)
        #expect(queue.operationCount == 0)
        #expect(queue.operations.isEmpty)
        #expect(a.isReady == false)  // it still waits for b: nothing was registered for it
        queue.isSuspended = false
        MisuseTests.expectStillWorks(queue)
        #expect(runs.value == 0)
        b.removeDependency(a)
        try queue.addOperations([a, b], waitUntilFinished: true)
        #expect(runs.value == 2)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("issue 13 item 1: a finished, a duplicated or another queue's member refuses the whole batch")
    func otherRefusalsRefuseTheBatch() throws {
        let queue = ConcurrentOperationQueue(name: "batch refusals")
        let other = ConcurrentOperationQueue(name: "other")
        other.isSuspended = true
        let runs = AtomicCounter()
        let good = (0..<3).map { index in ClosureOperation(name: "good\(index)") { runs.increment() } }
        let finished = ClosureOperation(name: "done") {}
        try finished.start()
        let elsewhere = ClosureOperation(name: "elsewhere") {}
        try other.addOperation(elsewhere)

        let cases: [([ConcurrentOperation], OperationError.Code, [String])] = [
            ([good[0], finished, good[1]], .alreadyFinished, ["done"]),
            ([good[0], good[1], good[0]], .alreadyEnqueued, ["good0"]),
            ([good[2], elsewhere, good[1]], .enqueuedInAnotherQueue, ["elsewhere"]),
        ]
        for (batch, code, names) in cases {
            let error = try #require(Self.refusal(Self.addReturning(batch, to: queue, waitUntilFinished: true)))
            #expect(error.code == code)
            #expect(error.operationNames == names)
            #expect(queue.operationCount == 0)
        }
        #expect(runs.value == 0)
        #expect(other.operationCount == 1)
        // The good ones were never claimed.
        try queue.addOperations(good, waitUntilFinished: true)
        #expect(runs.value == 3)
        other.isSuspended = false
        #expect(other.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("issue 13 item 1: a batch member that closes a cycle with an operation already queued refuses the batch")
    func cycleWithQueuedOperation() throws {
        let queue = ConcurrentOperationQueue(name: "batch vs queued")
        queue.isSuspended = true
        let log = Recorder<String>()
        let queued = ClosureOperation(name: "queued") { log.record("queued") }
        let fresh = ClosureOperation(name: "fresh") { log.record("fresh") }
        let closing = ClosureOperation(name: "closing") { log.record("closing") }
        try queued.addDependency(closing)
        try queue.addOperation(queued)
        try closing.addDependency(queued)
        let error = try #require(caughtOperationError { try queue.addOperations([fresh, closing], waitUntilFinished: false) })
        #expect(error.code == .dependencyCycle)
        #expect(queue.operations.map(\.displayName) == ["queued"])
        closing.removeDependency(queued)
        try queue.addOperations([fresh, closing], waitUntilFinished: false)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values.sorted() == ["closing", "fresh", "queued"])
        #expect(log.values.firstIndex(of: "closing")! < log.values.firstIndex(of: "queued")!)
    }

    @Test("issue 13 item 1: the barrier a refused batch would have waited for is not left among its dependencies")
    func barrierRolledBack() throws {
        let queue = ConcurrentOperationQueue(name: "batch barrier")
        queue.isSuspended = true
        queue.addBarrierBlock {}
        let a = ClosureOperation(name: "a") {}
        let b = ClosureOperation(name: "b") {}
        try a.addDependency(b)
        try b.addDependency(a)
        #expect(caughtOperationError { try queue.addOperations([a, b], waitUntilFinished: false) }?.code == .dependencyCycle)
        #expect(a.dependencies.map(\.displayName) == ["b"])
        #expect(b.dependencies.map(\.displayName) == ["a"])
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("issue 13 item 1: a refused procedure's condition dependencies are neither queued nor kept")
    func producedDependenciesOfRefusedBatch() throws {
        let queue = ConcurrentOperationQueue(name: "batch produced")
        let producedRuns = AtomicCounter()
        let produced = Recorder<ConcurrentOperation>()
        let evaluations = Recorder<String>()
        let procedure = ClosureProcedure(name: "procedure") {}
        try procedure.addCondition(ProducingCondition("c", evaluations, produced: produced) {
            ClosureOperation(name: "made") { producedRuns.increment() }
        })
        let partner = ClosureOperation(name: "partner") {}
        try procedure.addDependency(partner)
        try partner.addDependency(procedure)
        let error = try #require(caughtOperationError { try queue.addOperations([partner, procedure], waitUntilFinished: false) })
        #expect(error.code == .dependencyCycle)
        #expect(queue.operationCount == 0)
        #expect(procedure.dependencies.map(\.displayName) == ["partner"])
        // Re-added once the cycle is broken, its condition makes its dependency once more, and
        // only that one runs.
        partner.removeDependency(procedure)
        try queue.addOperations([partner, procedure], waitUntilFinished: false)
        #expect(procedure.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(producedRuns.value == 1)
        #expect(evaluations.values == ["c"])
    }

    @Test("issue 13 item 1: a single add whose produced dependency cannot be queued is refused, and nothing runs")
    func singleAddRefusedKeepsNothing() throws {
        let queue = ConcurrentOperationQueue(name: "single produced")
        queue.isSuspended = true
        let producedRuns = AtomicCounter()
        let evaluations = Recorder<String>()
        let procedure = ClosureProcedure(name: "procedure") {}
        try procedure.addCondition(ProducingCondition("c", evaluations) {
            ClosureOperation(name: "made") { producedRuns.increment() }
        })
        let blocker = ClosureOperation(name: "blocker") {}
        try blocker.addDependency(procedure)
        try queue.addOperation(blocker)
        try procedure.addDependency(blocker)
        #expect(caughtOperationError { try queue.addOperation(procedure) }?.code == .dependencyCycle)
        #expect(queue.operations.map(\.displayName) == ["blocker"])
        queue.isSuspended = false
        procedure.removeDependency(blocker)
        blocker.cancel()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(producedRuns.value == 0)
        try queue.addOperation(procedure)
        #expect(procedure.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(producedRuns.value == 1)
        #expect(evaluations.values == ["c"])
    }

    // MARK: Item 12

    @Test("issue 13 item 12: cancelling a member breaks a cycle: the batch is accepted and both finish")
    func cancelledMemberBreaksCycle() throws {
        let queue = ConcurrentOperationQueue(name: "cancel breaks cycle")
        let log = Recorder<String>()
        let a = ClosureOperation(name: "a") { log.record("a") }
        let b = ClosureOperation(name: "b") { log.record("b") }
        try a.addDependency(b)
        try b.addDependency(a)
        a.cancel()
        let result = Self.addReturning([a, b], to: queue, waitUntilFinished: true)
        #expect(result.map { (try? $0.get()) != nil } == true)
        #expect(a.isFinished && b.isFinished)
        #expect(log.values == ["b"])
    }

    @Test("issue 13 item 12: an enqueued member cancelled later no longer closes a cycle")
    func cancelledQueuedMemberBreaksCycle() throws {
        let queue = ConcurrentOperationQueue(name: "cancel queued")
        queue.isSuspended = true
        let log = Recorder<String>()
        let a = ClosureOperation(name: "a") { log.record("a") }
        let b = ClosureOperation(name: "b") { log.record("b") }
        try a.addDependency(b)
        try queue.addOperation(a)
        try b.addDependency(a)
        #expect(caughtOperationError { try queue.addOperation(b) }?.code == .dependencyCycle)
        a.cancel()
        try queue.addOperation(b)
        // An edge added to an enqueued, cancelled operation cannot close a cycle either.
        let c = ClosureOperation(name: "c") { log.record("c") }
        try c.addDependency(a)
        try queue.addOperation(c)
        try a.addDependency(c)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values.sorted() == ["b", "c"])
    }
}
