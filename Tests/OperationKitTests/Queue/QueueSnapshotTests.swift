import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 15 §1: `queue.snapshot()` names, for every operation that does not run, why. Each test
/// builds the situation with latches and gates and looks at one snapshot (polling, bounded,
/// where another thread reaches the situation without an event to wait for).
@Suite("Snapshot: why is it not running?", .offThePool)
struct QueueSnapshotTests {
    /// Waits (bounded) until `queue`'s snapshot satisfies `condition`, and returns it.
    func awaitSnapshot(
        of queue: ConcurrentOperationQueue, sourceLocation: SourceLocation = #_sourceLocation,
        where condition: @escaping @Sendable (QueueSnapshot) -> Bool
    ) async throws -> QueueSnapshot {
        try await untilTrue(sourceLocation: sourceLocation) { condition(queue.snapshot()) }
        return queue.snapshot()
    }

    @Test("an unfinished dependency: the dependent is pending and names it; times since added and started")
    func dependency() async throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.dependency")
        let first = HeldOperation(name: "load")
        let second = ClosureOperation(name: "parse") {}
        try second.addDependency(first)
        try queue.addOperations([first, second], waitUntilFinished: false)
        #expect(await opened(first.started))

        let snapshot = try await awaitSnapshot(of: queue) { $0.operation(named: "load")?.state == .executing }
        let load = try #require(snapshot.operation(named: "load"))
        let parse = try #require(snapshot.operation(named: "parse"))
        #expect(load.kind == "HeldOperation")
        #expect(load.blockers.isEmpty)
        #expect(load.sinceStarted != nil && load.sinceAdded != nil)
        #expect(parse.state == .pending)
        #expect(parse.sinceAdded != nil && parse.sinceStarted == nil)
        #expect(parse.blockers == [.dependencies([load.reference])])
        #expect(snapshot.waitForCycles.isEmpty)

        first.finish()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(queue.snapshot().operations.isEmpty)
    }

    @Test("a suspended queue: its runnable operations are ready and name the suspension")
    func suspended() throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.suspended")
        queue.isSuspended = true
        let operation = ClosureOperation(name: "waiting") {}
        try queue.addOperation(operation)

        let snapshot = queue.snapshot()
        #expect(snapshot.isSuspended)
        let entry = try #require(snapshot.operation(named: "waiting"))
        #expect(entry.state == .ready)
        #expect(entry.blockers == [.queueSuspended("snapshot.suspended")])

        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a full concurrency limit: the waiting operation names the limit and who holds the slot")
    func concurrencyLimit() async throws {
        let queue = try ConcurrentOperationQueue(name: "snapshot.limit", maxConcurrentOperationCount: 1)
        let running = HeldOperation(name: "running")
        try queue.addOperation(running)
        #expect(await opened(running.started))
        try queue.addOperation(ClosureOperation(name: "next") {})

        let snapshot = try await awaitSnapshot(of: queue) { $0.operation(named: "running")?.state == .executing }
        let next = try #require(snapshot.operation(named: "next"))
        #expect(next.state == .ready)
        let holder = OperationReference(id: ObjectIdentifier(running), name: "running")
        #expect(next.blockers == [.concurrencyLimit(1, heldBy: [holder])])

        running.finish()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a mutual exclusivity category held: the waiting procedure names the category and its holder")
    func exclusiveCategory() async throws {
        let category = uniqueExclusivityCategory("snapshot")
        let holderQueue = ConcurrentOperationQueue(name: "snapshot.exclusive.holder")
        let waiterQueue = ConcurrentOperationQueue(name: "snapshot.exclusive.waiter")
        let holder = ProcedureAwaitingFinish(name: "holder")
        try holder.addCondition(MutuallyExclusive(category: category))
        try holderQueue.addOperation(holder)
        #expect(await opened(holder.executing))
        let waiter = ClosureProcedure<Void>(name: "waiter") {}
        try waiter.addCondition(MutuallyExclusive(category: category))
        try waiterQueue.addOperation(waiter)

        let snapshot = try await awaitSnapshot(of: waiterQueue) {
            !($0.operation(named: "waiter")?.blockers.isEmpty ?? true)
        }
        let entry = try #require(snapshot.operation(named: "waiter"))
        #expect(entry.state == .ready)
        #expect(entry.blockers == [.exclusiveCategory(
            category, heldBy: [OperationReference(id: ObjectIdentifier(holder), name: "holder")], queuedBehind: [])])

        holder.finish()
        #expect(waiterQueue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(holderQueue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a condition being evaluated: the procedure is evaluating conditions and names it")
    func conditionEvaluating() async throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.condition")
        let condition = ManualCondition()
        let procedure = ClosureProcedure<Void>(name: "guarded") {}
        try procedure.addCondition(condition)
        try queue.addOperation(procedure)
        #expect(await opened(condition.evaluating))

        let snapshot = try await awaitSnapshot(of: queue) {
            $0.operation(named: "guarded")?.state == .evaluatingConditions
        }
        let entry = try #require(snapshot.operation(named: "guarded"))
        #expect(entry.blockers == [.evaluatingCondition("ManualCondition")])

        condition.complete()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a produced dependency running: the procedure names the operation its condition waits for")
    func producedDependency() async throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.produced")
        let produced = HeldOperation(name: "login")
        let procedure = ClosureProcedure<Void>(name: "fetch") {}
        try procedure.addCondition(ProducingCondition("signed in", Recorder<String>()) { produced })
        try queue.addOperation(procedure)
        #expect(await opened(produced.started))

        let snapshot = try await awaitSnapshot(of: queue) {
            $0.operation(named: "fetch")?.state == .evaluatingConditions
        }
        let entry = try #require(snapshot.operation(named: "fetch"))
        let login = OperationReference(id: ObjectIdentifier(produced), name: "login")
        #expect(entry.blockers == [.producedDependencies([login])])
        #expect(snapshot.operation(named: "login")?.state == .executing)

        produced.finish()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a group waiting for its children: it names them, and its snapshot and the queue's nest them")
    func groupChildren() async throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.group")
        let child = HeldOperation(name: "child")
        let group = try GroupOperation(name: "group", operations: [child])
        try queue.addOperation(group)
        #expect(await opened(child.started))

        let snapshot = try await awaitSnapshot(of: queue) { $0.operation(named: "child")?.state == .executing }
        let entry = try #require(snapshot.operation(named: "group"))
        #expect(entry.state == .executing)
        #expect(entry.blockers == [.children([OperationReference(id: ObjectIdentifier(child), name: "child")])])
        #expect(entry.children?.operations.map(\.name) == ["child"])
        let own = group.snapshot()
        #expect(own.source == .group && own.name == "group")
        #expect(own.operations.first?.state == .executing)

        child.finish()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a group not executing yet: its children wait in its suspended queue")
    func groupNotStarted() throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.group.idle")
        queue.isSuspended = true
        let group = try GroupOperation(name: "idle group", operations: [ClosureOperation(name: "later") {}])
        try queue.addOperation(group)
        let child = try #require(group.snapshot().operation(named: "later"))
        #expect(child.blockers == [.queueSuspended("idle group.children")])
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a retry: its running attempt, then the attempt number and delay it waits for")
    func retry() async throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.retry")
        let attempts = Recorder<ClosureProcedure<Void>>()
        let started = Latch(count: 1)
        let retry = RetryOperation<Void>(name: "retry", maxAttempts: 3, wait: .fixed(.seconds(3_600))) { attempt in
            ClosureProcedure<Void>(name: "attempt \(attempt)", asynchronous: { procedure in
                attempts.record(procedure)
                started.countDown()
            })
        }
        try queue.addOperation(retry)
        #expect(await opened(started))
        let running = try await awaitSnapshot(of: queue) { $0.operation(named: "attempt 1")?.state == .executing }
        let first = try #require(running.operation(named: "retry")?.blockers.first)
        guard case .retryAttempt(1, let attempt) = first else {
            Issue.record("expected the running attempt, got \(first)")
            return
        }
        #expect(attempt.name == "attempt 1")

        try #require(attempts.values.first).finish(with: ProcedureTestError(1))
        let waiting = try await awaitSnapshot(of: queue) {
            if case .retryDelay? = $0.operation(named: "retry")?.blockers.first { return true }
            return false
        }
        let blocker = waiting.operation(named: "retry")?.blockers.first
        guard case .retryDelay(let next, let delay, let remaining)? = blocker else {
            Issue.record("expected the retry's delay")
            return
        }
        #expect(next == 2 && delay == .seconds(3_600) && remaining <= delay)

        retry.cancel()  // waiting between attempts: finishes at once
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a cancelled pending operation is ready, not waiting for its dependencies")
    func cancelledPending() async throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.cancelled")
        queue.isSuspended = true
        let first = ClosureOperation(name: "first") {}
        let second = ClosureOperation(name: "second") {}
        try second.addDependency(first)
        try queue.addOperations([first, second], waitUntilFinished: false)
        second.cancel()
        let entry = try #require(queue.snapshot().operation(named: "second"))
        #expect(entry.isCancelled && entry.state == .ready)
        #expect(entry.blockers == [.queueSuspended("snapshot.cancelled")])
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }
}
