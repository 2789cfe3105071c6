import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Misuse gets a typed `OperationError` naming the operations involved, and nothing else is
/// affected: the queue and every other operation carry on (DESIGN.md "Semantics to keep"; A4,
/// A6, M95, D cycles).
@Suite("Misuse: typed errors, and everything carries on", .offThePool)
struct MisuseTests {
    /// Proves a queue still works: a new operation added to it runs and the queue drains.
    static func expectStillWorks(_ queue: ConcurrentOperationQueue, sourceLocation: SourceLocation = #_sourceLocation) {
        let ran = Latch()
        queue.addOperation { ran.countDown() }
        #expect(ran.wait(timeout: operationTestTimeout), sourceLocation: sourceLocation)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout), sourceLocation: sourceLocation)
    }

    // MARK: Adding to queues

    @Test("added twice to the same queue: alreadyEnqueued; it still runs once")
    func addedTwice() throws {
        let queue = ConcurrentOperationQueue(name: "twice")
        queue.isSuspended = true
        let runs = AtomicCounter()
        let operation = ClosureOperation(name: "twice") { runs.increment() }
        try queue.addOperation(operation)
        let error = try #require(caughtOperationError { try queue.addOperation(operation) })
        #expect(error.code == .alreadyEnqueued)
        #expect(error.operationNames == ["twice"])
        #expect(queue.operationCount == 1)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(runs.value == 1)
        Self.expectStillWorks(queue)
    }

    @Test("added to a second queue: enqueuedInAnotherQueue; it runs once in the first")
    func addedToSecondQueue() throws {
        let first = ConcurrentOperationQueue(name: "first")
        first.isSuspended = true
        let second = ConcurrentOperationQueue(name: "second")
        let ranIn = Recorder<String>()
        let operation = ClosureOperation(name: "shared") { ranIn.record(ConcurrentOperationQueue.current?.name ?? "-") }
        try first.addOperation(operation)
        let error = try #require(caughtOperationError { try second.addOperation(operation) })
        #expect(error.code == .enqueuedInAnotherQueue)
        #expect(error.operationNames == ["shared"])
        #expect(second.operationCount == 0)
        first.isSuspended = false
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(ranIn.values == ["first"])
        Self.expectStillWorks(first)
        Self.expectStillWorks(second)
    }

    @Test("added after it started: alreadyStarted; added after it finished: alreadyFinished")
    func addedAfterStartOrFinish() throws {
        let queue = ConcurrentOperationQueue(name: "late add")
        let executing = ManuallyFinishedOperation(name: "executing")
        try executing.start()
        let startedError = try #require(caughtOperationError { try queue.addOperation(executing) })
        #expect(startedError.code == .alreadyStarted)
        #expect(startedError.operationNames == ["executing"])
        executing.finish()
        let finishedError = try #require(caughtOperationError { try queue.addOperation(executing) })
        #expect(finishedError.code == .alreadyFinished)
        #expect(finishedError.operationNames == ["executing"])
        #expect(executing.executions.value == 1)
        #expect(queue.operationCount == 0)
        Self.expectStillWorks(queue)
    }

    @Test("addOperations with one bad operation adds none of the batch and throws its error")
    func batchWithOneBadOperation() throws {
        let queue = ConcurrentOperationQueue(name: "batch")
        let finished = ClosureOperation(name: "done") {}
        try finished.start()
        let runs = AtomicCounter()
        let good = (0..<3).map { index in ClosureOperation(name: "good\(index)") { runs.increment() } }
        let error = try #require(caughtOperationError {
            try queue.addOperations([good[0], finished, good[1], good[2]], waitUntilFinished: true)
        })
        #expect(error.code == .alreadyFinished)
        #expect(error.operationNames == ["done"])
        #expect(runs.value == 0)
        #expect(queue.operationCount == 0)
        try queue.addOperations(good, waitUntilFinished: true)
        #expect(runs.value == 3)
    }

    @Test("addOperations with the same operation twice in one batch: nothing added, alreadyEnqueued")
    func duplicateInBatch() throws {
        let queue = ConcurrentOperationQueue(name: "duplicate batch")
        let runs = AtomicCounter()
        let operation = ClosureOperation(name: "dup") { runs.increment() }
        let error = try #require(caughtOperationError {
            try queue.addOperations([operation, operation], waitUntilFinished: true)
        })
        #expect(error.code == .alreadyEnqueued)
        #expect(error.operationNames == ["dup"])
        #expect(runs.value == 0)
        #expect(queue.operationCount == 0)
        try queue.addOperations([operation], waitUntilFinished: true)
        #expect(runs.value == 1)
    }

    // MARK: Dependencies

    @Test("self-dependency: selfDependency naming the operation; nothing recorded")
    func selfDependency() throws {
        let operation = ClosureOperation(name: "narcissus") {}
        let error = try #require(caughtOperationError { try operation.addDependency(operation) })
        #expect(error.code == .selfDependency)
        #expect(error.operationNames == ["narcissus"])
        #expect(operation.dependencies.isEmpty)
        let queue = ConcurrentOperationQueue(name: "self")
        try queue.addOperation(operation)
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("2-cycle detected when the last operation is enqueued; breaking it lets both run")
    func twoCycleOnEnqueue() throws {
        let queue = ConcurrentOperationQueue(name: "2-cycle")
        let log = Recorder<String>()
        let a = ClosureOperation(name: "A") { log.record("A") }
        let b = ClosureOperation(name: "B") { log.record("B") }
        try a.addDependency(b)
        try b.addDependency(a)
        try queue.addOperation(a)
        let error = try #require(caughtOperationError { try queue.addOperation(b) })
        #expect(error.code == .dependencyCycle)
        #expect(Set(error.operationNames) == ["A", "B"])
        #expect(error.operationNames.count == 2)
        #expect(queue.operationCount == 1)
        #expect(!b.isExecuting && !b.isFinished)
        Self.expectNoProgress(on: [a], queue: queue)
        b.removeDependency(a)
        try queue.addOperation(b)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["B", "A"])
    }

    /// The operations are still waiting (nothing ran them by mistake), and an unrelated operation
    /// on the same queue runs.
    static func expectNoProgress(
        on operations: [ConcurrentOperation], queue: ConcurrentOperationQueue,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let ran = Latch()
        let unrelated = ClosureOperation(name: "unrelated") { ran.countDown() }
        #expect(caughtOperationError { try queue.addOperation(unrelated) } == nil, sourceLocation: sourceLocation)
        #expect(ran.wait(timeout: operationTestTimeout), sourceLocation: sourceLocation)
        #expect(unrelated.waitUntilFinishedBlocking(timeout: operationTestTimeout), sourceLocation: sourceLocation)
        #expect(operations.allSatisfy { !$0.isExecuting && !$0.isFinished }, sourceLocation: sourceLocation)
    }

    /// A chain op0 ← op1 ← … ← op(n-1), each waiting for the one before, logging its name.
    static func chain(_ count: Int, log: Recorder<String>) throws -> [ClosureOperation] {
        let operations = (0..<count).map { index in ClosureOperation(name: "op\(index)") { log.record("op\(index)") } }
        for index in 1..<count { try operations[index].addDependency(operations[index - 1]) }
        return operations
    }

    @Test("an operation refused for a cycle behind a barrier keeps only its own dependencies")
    func refusedOperationLeavesNoBarrierBehind() throws {
        let queue = ConcurrentOperationQueue(name: "cycle behind barrier")
        let gate = Gate()
        let early = ClosureOperation(name: "early") { _ = gate.wait(timeout: operationTestTimeout) }
        try queue.addOperation(early)
        queue.addBarrierBlock {}
        let a = ClosureOperation(name: "A") {}
        let b = ClosureOperation(name: "B") {}
        try a.addDependency(b)
        try b.addDependency(a)
        try queue.addOperation(a)
        let error = try #require(caughtOperationError { try queue.addOperation(b) })
        #expect(error.code == .dependencyCycle)
        #expect(b.dependencies.map(\.displayName) == ["A"])
        b.removeDependency(a)
        try queue.addOperation(b)
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(a.isFinished && b.isFinished)
    }

    @Test("50-cycle detected when the last operation is enqueued, naming the whole cycle")
    func longCycleOnEnqueue() throws {
        let queue = ConcurrentOperationQueue(name: "50-cycle")
        let log = Recorder<String>()
        let operations = try Self.chain(50, log: log)
        try operations[0].addDependency(operations[49])
        for operation in operations.dropLast() { try queue.addOperation(operation) }
        let error = try #require(caughtOperationError { try queue.addOperation(operations[49]) })
        #expect(error.code == .dependencyCycle)
        #expect(Set(error.operationNames) == Set(operations.map(\.displayName)))
        #expect(error.operationNames.count == 50)
        #expect(queue.operationCount == 49)
        Self.expectNoProgress(on: operations, queue: queue)
        operations[0].removeDependency(operations[49])
        #expect(operations[48].waitUntilFinishedBlocking(timeout: operationTestTimeout))
        try queue.addOperation(operations[49])
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == operations.map(\.displayName))
    }

    @Test("2-cycle detected when the edge is added to an already-enqueued operation")
    func twoCycleOnAddDependency() throws {
        let queue = ConcurrentOperationQueue(name: "2-cycle-edge")
        queue.isSuspended = true
        let log = Recorder<String>()
        let a = ClosureOperation(name: "A") { log.record("A") }
        let b = ClosureOperation(name: "B") { log.record("B") }
        try b.addDependency(a)
        try queue.addOperations([a, b], waitUntilFinished: false)
        let error = try #require(caughtOperationError { try a.addDependency(b) })
        #expect(error.code == .dependencyCycle)
        #expect(Set(error.operationNames) == ["A", "B"])
        #expect(a.dependencies.isEmpty)
        #expect(a.isReady)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A", "B"])
    }

    @Test("50-cycle detected when the closing edge is added to an already-enqueued operation")
    func longCycleOnAddDependency() throws {
        let queue = ConcurrentOperationQueue(name: "50-cycle-edge")
        queue.isSuspended = true
        let log = Recorder<String>()
        let operations = try Self.chain(50, log: log)
        try queue.addOperations(operations.reversed(), waitUntilFinished: false)
        let error = try #require(caughtOperationError { try operations[0].addDependency(operations[49]) })
        #expect(error.code == .dependencyCycle)
        #expect(Set(error.operationNames) == Set(operations.map(\.displayName)))
        #expect(error.operationNames.count == 50)
        #expect(operations[0].dependencies.isEmpty)
        #expect(operations[0].isReady)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == operations.map(\.displayName))
    }

    @Test("B19 dependency added to an executing operation: dependentAlreadyExecuting, nothing changed")
    func dependencyOnExecuting() throws {
        let queue = ConcurrentOperationQueue(name: "late dependency")
        let started = Latch()
        let gate = Gate()
        let executing = ClosureOperation(name: "executing") {
            started.countDown()
            _ = gate.wait(timeout: operationTestTimeout)
        }
        let other = ClosureOperation(name: "other") {}
        try queue.addOperation(executing)
        #expect(started.wait(timeout: operationTestTimeout))
        let error = try #require(caughtOperationError { try executing.addDependency(other) })
        #expect(error.code == .dependentAlreadyExecuting)
        #expect(error.operationNames == ["executing", "other"])
        #expect(executing.dependencies.isEmpty)
        gate.open()
        #expect(executing.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        let finishedError = try #require(caughtOperationError { try executing.addDependency(other) })
        #expect(finishedError.code == .dependentAlreadyFinished)
        #expect(finishedError.operationNames == ["executing", "other"])
        Self.expectStillWorks(queue)
    }

    @Test("dependency added to an operation executing without a queue: dependentAlreadyExecuting")
    func dependencyOnExecutingWithoutQueue() throws {
        let executing = ManuallyFinishedOperation(name: "by hand")
        try executing.start()
        let other = ClosureOperation(name: "other") {}
        let error = try #require(caughtOperationError { try executing.addDependency(other) })
        #expect(error.code == .dependentAlreadyExecuting)
        #expect(error.operationNames == ["by hand", "other"])
        #expect(executing.finish())
    }

    // MARK: Queue configuration

    @Test(
        "maxConcurrentOperationCount 0 or negative in init: invalidMaxConcurrentOperationCount",
        arguments: [0, -1, Int.min])
    func invalidCountInInit(count: Int) throws {
        let error = try #require(caughtOperationError {
            _ = try ConcurrentOperationQueue(name: "invalid", maxConcurrentOperationCount: count)
        })
        #expect(error.code == .invalidMaxConcurrentOperationCount)
        #expect(error.operationNames == ["invalid"])
    }

    @Test("maxConcurrentOperationCount 0 or negative in the setter: refused, limit unchanged", arguments: [0, -5])
    func invalidCountInSetter(count: Int) throws {
        let queue = try ConcurrentOperationQueue(name: "setter", maxConcurrentOperationCount: 3)
        let error = try #require(caughtOperationError { try queue.setMaxConcurrentOperationCount(count) })
        #expect(error.code == .invalidMaxConcurrentOperationCount)
        #expect(error.operationNames == ["setter"])
        #expect(queue.maxConcurrentOperationCount == 3)
        Self.expectStillWorks(queue)
    }

    // MARK: ConcurrentOperation start and finish

    @Test("start() by hand on an operation a queue manages: managedByQueue; the queue still runs it once")
    func startManagedByQueue() throws {
        let queue = ConcurrentOperationQueue(name: "managed")
        queue.isSuspended = true
        let runs = AtomicCounter()
        let operation = ClosureOperation(name: "managed op") { runs.increment() }
        try queue.addOperation(operation)
        let error = try #require(caughtOperationError { try operation.start() })
        #expect(error.code == .managedByQueue)
        #expect(error.operationNames == ["managed op"])
        #expect(operation.isReady && !operation.isExecuting)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(runs.value == 1)
    }

    @Test("start() by hand before its dependencies finished: notReady naming both; later it runs")
    func startNotReady() throws {
        let dependency = ClosureOperation(name: "dependency") {}
        let runs = AtomicCounter()
        let dependent = ClosureOperation(name: "dependent") { runs.increment() }
        try dependent.addDependency(dependency)
        let error = try #require(caughtOperationError { try dependent.start() })
        #expect(error.code == .notReady)
        #expect(error.operationNames == ["dependent", "dependency"])
        #expect(!dependent.isExecuting && !dependent.isFinished)
        try dependency.start()
        try dependent.start()
        #expect(runs.value == 1)
        #expect(dependent.isFinished)
    }

    @Test("A6 start() twice or after finish on a ConcurrentOperation: refused, executed once")
    func startTwice() throws {
        let operation = ManuallyFinishedOperation(name: "started")
        try operation.start()
        let twice = try #require(caughtOperationError { try operation.start() })
        #expect(twice.code == .alreadyStarted)
        #expect(twice.operationNames == ["started"])
        #expect(operation.finish())
        let afterFinish = try #require(caughtOperationError { try operation.start() })
        #expect(afterFinish.code == .alreadyFinished)
        #expect(operation.executions.value == 1)
    }

    @Test("M95 finish() before start or twice returns false; the completion block runs once")
    func finishTwice() throws {
        let operation = ManuallyFinishedOperation(name: "finish twice")
        let completions = AtomicCounter()
        operation.completionBlock = { completions.increment() }
        #expect(!operation.finish(), "not started")
        #expect(operation.isReady && !operation.isFinished)
        try operation.start()
        #expect(operation.finish())
        #expect(!operation.finish())
        #expect(completions.value == 1)
        #expect(operation.isFinished)
    }
}
