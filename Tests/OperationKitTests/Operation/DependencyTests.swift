import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section D (operation layer) and A8: dependencies between `ConcurrentOperation`s, in one
/// queue, across queues and with no queue at all. A cancelled dependency counts as finished.
@Suite("D. Dependencies (operation layer)", .offThePool)
struct DependencyTests {
    @Test("A8 readiness includes dependencies: B is ready only once A has finished")
    func readinessIncludesDependencies() throws {
        let a = ClosureOperation(name: "A") {}
        let b = ClosureOperation(name: "B") {}
        try b.addDependency(a)
        #expect(a.isReady)
        #expect(!b.isReady)
        #expect(b.dependencies.map(\.name) == ["A"])
        try a.start()
        #expect(a.isFinished)
        #expect(b.isReady)
        try b.start()
        #expect(b.isFinished)
        #expect(b.dependencies.isEmpty, "a finished operation releases its dependencies")
    }

    @Test("A8 readiness of an enqueued operation follows its dependency")
    func enqueuedReadiness() throws {
        let queue = ConcurrentOperationQueue(name: "A8")
        queue.isSuspended = true
        let a = ClosureOperation(name: "A") {}
        let b = ClosureOperation(name: "B") {}
        try b.addDependency(a)
        try queue.addOperations([a, b], waitUntilFinished: false)
        #expect(a.isReady)
        #expect(!b.isReady)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(a.isFinished && b.isFinished)
    }

    @Test("D35 order: C depends on B depends on A, queued in reverse, run A, B, C")
    func orderQueuedInReverse() throws {
        let queue = ConcurrentOperationQueue(name: "D35")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        let c = LoggingOperation(name: "C", log: log)
        try b.addDependency(a)
        try c.addDependency(b)
        try queue.addOperation(c)
        try queue.addOperation(b)
        try queue.addOperation(a)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A", "B", "C"])
        #expect([a, b, c].allSatisfy { $0.sawDependenciesFinished })
    }

    @Test("D35 order holds for a batch added in reverse with addOperations")
    func orderBatchInReverse() throws {
        let queue = ConcurrentOperationQueue(name: "D35-batch")
        let log = Recorder<String>()
        let chain = (0..<10).map { LoggingOperation(name: "op\($0)", log: log) }
        for index in 1..<chain.count { try chain[index].addDependency(chain[index - 1]) }
        try queue.addOperations(chain.reversed(), waitUntilFinished: true)
        #expect(log.values == chain.map(\.displayName))
        #expect(chain.allSatisfy { $0.sawDependenciesFinished })
    }

    @Test("D36 a dependency cancelled before queuing still lets its dependent run")
    func cancelledBeforeQueuingDependencyStillRuns() throws {
        let queue = ConcurrentOperationQueue(name: "D36-before")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        a.cancel()
        try queue.addOperations([b, a], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["B"])
        #expect(a.isFinished && a.isCancelled)
        #expect(b.isFinished && !b.isCancelled)
        #expect(b.sawDependenciesFinished)
    }

    @Test("D36 a dependency cancelled after queuing still lets its dependent run")
    func cancelledAfterQueuingDependencyStillRuns() throws {
        let queue = ConcurrentOperationQueue(name: "D36-after")
        queue.isSuspended = true
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try queue.addOperations([a, b], waitUntilFinished: false)
        a.cancel()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["B"])
        #expect(!b.isCancelled)
        #expect(b.sawDependenciesFinished)
    }

    @Test("D37/C31 no propagation: B cancelled while A runs finishes at once; C still runs")
    func noCancelPropagation() throws {
        let queue = ConcurrentOperationQueue(name: "D37")
        let log = Recorder<String>()
        let gate = Gate()
        let aStarted = Latch()
        let a = LoggingOperation(name: "A", log: log) {
            aStarted.countDown()
            _ = gate.wait(timeout: operationTestTimeout)
        }
        let b = LoggingOperation(name: "B", log: log)
        let c = LoggingOperation(name: "C", log: log)
        try b.addDependency(a)
        try c.addDependency(b)
        try queue.addOperations([a, b, c], waitUntilFinished: false)
        #expect(aStarted.wait(timeout: operationTestTimeout))
        b.cancel()
        #expect(b.waitUntilFinishedBlocking(timeout: operationTestTimeout), "B does not wait for A")
        #expect(c.waitUntilFinishedBlocking(timeout: operationTestTimeout), "C runs after B, A still running")
        #expect(a.isExecuting)
        #expect(!c.isCancelled)
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["C", "A"])
        #expect(b.isCancelled && b.isFinished)
    }

    @Test("C31 cancelled while pending on a dependency: ready at once, finishes without running")
    func cancelledWhilePending() throws {
        let queue = ConcurrentOperationQueue(name: "C31")
        queue.isSuspended = true
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try queue.addOperations([a, b], waitUntilFinished: false)
        #expect(!b.isReady)
        b.cancel()
        #expect(b.isReady)
        #expect(!b.isFinished)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A"])
        #expect(b.isFinished && b.isCancelled)
    }

    @Test("D dependency in another queue: the dependent waits for it")
    func dependencyAcrossQueues() throws {
        let first = ConcurrentOperationQueue(name: "first")
        let second = ConcurrentOperationQueue(name: "second")
        let log = Recorder<String>()
        let gate = Gate()
        let a = LoggingOperation(name: "A", log: log) { _ = gate.wait(timeout: operationTestTimeout) }
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try second.addOperation(b)
        try first.addOperation(a)
        #expect(!b.isReady)
        gate.open()
        #expect(b.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A", "B"])
        #expect(b.sawDependenciesFinished)
        #expect(first.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(second.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("D dependency in no queue: the dependent runs once the dependency is started by hand")
    func dependencyInNoQueue() throws {
        let queue = ConcurrentOperationQueue(name: "D-none")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try queue.addOperation(b)
        #expect(queue.operationCount == 1)
        #expect(!b.isReady)
        #expect(log.values.isEmpty)
        try a.start()
        #expect(b.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A", "B"])
        #expect(b.sawDependenciesFinished)
    }

    @Test("D removeDependency makes an enqueued operation ready")
    func removeDependencyMakesReady() throws {
        let queue = ConcurrentOperationQueue(name: "D-remove")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try queue.addOperation(b)
        #expect(!b.isReady)
        b.removeDependency(a)
        #expect(b.dependencies.isEmpty)
        #expect(b.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["B"])
        #expect(!a.isFinished)
        b.removeDependency(a)  // not a dependency any more: nothing happens
    }

    @Test("D removeDependency of one of two dependencies keeps the operation waiting for the other")
    func removeOneOfTwoDependencies() throws {
        let queue = ConcurrentOperationQueue(name: "D-remove-one")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let other = LoggingOperation(name: "other", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try b.addDependency(other)
        try queue.addOperation(b)
        b.removeDependency(a)
        #expect(!b.isReady)
        #expect(b.dependencies.map(\.displayName) == ["other"])
        try other.start()
        #expect(b.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["other", "B"])
    }

    @Test("D addDependency after enqueue on a suspended queue is honoured")
    func addDependencyAfterEnqueue() throws {
        let queue = try ConcurrentOperationQueue(name: "D-late", maxConcurrentOperationCount: 1)
        queue.isSuspended = true
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try queue.addOperation(b)  // FIFO alone would run B first
        try queue.addOperation(a)
        #expect(b.isReady)
        try b.addDependency(a)
        #expect(!b.isReady)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A", "B"])
        #expect(b.sawDependenciesFinished)
    }

    @Test("D addDependency after enqueue on an already finished operation does not hold it back")
    func addFinishedDependencyAfterEnqueue() throws {
        let queue = ConcurrentOperationQueue(name: "D-late-finished")
        queue.isSuspended = true
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        try a.start()
        let b = LoggingOperation(name: "B", log: log)
        try queue.addOperation(b)
        try b.addDependency(a)
        #expect(b.isReady)
        queue.isSuspended = false
        #expect(b.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A", "B"])
    }

    @Test("D the same dependency added twice, before and after enqueue, is harmless")
    func duplicateDependency() throws {
        let queue = ConcurrentOperationQueue(name: "D-duplicate")
        queue.isSuspended = true
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try b.addDependency(a)
        try queue.addOperations([b, a], waitUntilFinished: false)
        try b.addDependency(a)
        #expect(b.dependencies.count == 3)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["A", "B"])
        #expect(b.sawDependenciesFinished)
    }

    @Test("D removeDependency of a dependency added twice removes both")
    func removeDuplicateDependency() throws {
        let queue = ConcurrentOperationQueue(name: "D-remove-duplicate")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try b.addDependency(a)
        try queue.addOperation(b)
        try b.addDependency(a)
        b.removeDependency(a)
        #expect(b.dependencies.isEmpty)
        #expect(b.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["B"])
    }

    @Test("D the completion block of a dependency runs before its dependent starts")
    func completionBeforeDependents() throws {
        let queue = ConcurrentOperationQueue(name: "D-completion")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        a.completionBlock = { log.record("A completion") }
        let b = LoggingOperation(name: "B", log: log)
        try b.addDependency(a)
        try queue.addOperations([a, b], waitUntilFinished: true)
        #expect(log.values == ["A", "A completion", "B"])
    }

    @Test("D a diamond: D waits for B and C, which both wait for A")
    func diamond() throws {
        let queue = ConcurrentOperationQueue(name: "D-diamond")
        let log = Recorder<String>()
        let a = LoggingOperation(name: "A", log: log)
        let b = LoggingOperation(name: "B", log: log)
        let c = LoggingOperation(name: "C", log: log)
        let d = LoggingOperation(name: "D", log: log)
        try b.addDependency(a)
        try c.addDependency(a)
        try d.addDependency(b)
        try d.addDependency(c)
        try queue.addOperations([d, c, b, a], waitUntilFinished: true)
        let order = log.values
        #expect(order.first == "A")
        #expect(order.last == "D")
        #expect(Set(order) == ["A", "B", "C", "D"])
        #expect([a, b, c, d].allSatisfy { $0.sawDependenciesFinished })
    }
}

/// Logs its name when it executes, after `work`, and remembers whether every dependency had
/// finished when it started.
final class LoggingOperation: ConcurrentOperation, @unchecked Sendable {
    // `log` and `work` are immutable; `sawFinished` is a Recorder (its own lock). `dependencies`
    // is read in execute(), before finish() releases them.
    private let log: Recorder<String>
    private let work: @Sendable () -> Void
    private let sawFinished = Recorder<Bool>()

    init(name: String, log: Recorder<String>, work: @escaping @Sendable () -> Void = {}) {
        self.log = log
        self.work = work
        super.init(name: name)
    }

    /// Whether it executed with every dependency finished (true if it did not execute).
    var sawDependenciesFinished: Bool { sawFinished.values.allSatisfy { $0 } }

    override func execute() {
        sawFinished.record(dependencies.allSatisfy(\.isFinished))
        work()
        log.record(displayName)
        finish()
    }
}
