// Tests of the queue part of issue 16: queues on an executor, the main queue and
// MainClosureProcedure (the main dispatch queue is serviced under `swift test`, on Linux too).
import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// An executor that counts its jobs and runs them on a concurrent dispatch queue.
private final class CountingExecutor: OperationExecutor {
    let jobs = Atomic<Int>(0)
    private let target = DispatchQueue(label: "executor-tests.counting", attributes: .concurrent)

    func enqueue(_ job: @escaping OperationExecutorJob) {
        jobs.add(1, ordering: .relaxed)
        target.async { _ = job() }
    }
}

/// Marks the dispatch queues an operation can tell it runs on (without trapping when it does not).
private let mainQueueMark = DispatchSpecificKey<Int>()
private let markMainQueue: Void = { DispatchQueue.main.setSpecific(key: mainQueueMark, value: 1) }()

/// Whether the caller runs on the main dispatch queue.
private func onMainQueue() -> Bool {
    _ = markMainQueue
    return DispatchQueue.getSpecific(key: mainQueueMark) == 1
}

private struct ExecutorTestError: Error, Equatable {}

@Suite("Queue part: executors, the main queue, MainClosureProcedure", .offThePool)
struct QueueExecutorTests {
    @Test("a queue made with an executor runs every operation as a job of it")
    func executorRunsWorkers() async {
        let executor = CountingExecutor()
        let queue = ConcurrentOperationQueue(name: "executor", executor: executor)
        #expect(queue.operationExecutor === executor)
        let done = Latch(count: 20)
        for _ in 0..<20 { queue.addOperation { done.countDown() } }
        #expect(await done.opens())
        #expect(await queue.empties())
        // One job per operation: a job runs one operation and enqueues the next.
        #expect(executor.jobs.load(ordering: .relaxed) >= 20)
    }

    @Test("a queue on an executor honours dependencies and the limit")
    func executorKeepsOrderAndLimit() async throws {
        let queue = ConcurrentOperationQueue(name: "executor-serial", executor: CountingExecutor())
        try queue.setMaxConcurrentOperationCount(1)
        let log = Recorder<Int>()
        let operations = (0..<10).map { index in ClosureOperation { log.record(index) } }
        for index in 1..<10 { try operations[index].addDependency(operations[index - 1]) }
        try queue.addOperations(operations.reversed(), waitUntilFinished: false)
        #expect(await queue.empties())
        #expect(log.values == Array(0..<10))
    }

    @Test("the main dispatch queue is serviced under swift test")
    func mainQueueIsServiced() async {
        let ran = Latch()
        DispatchQueue.main.async { ran.countDown() }
        #expect(await ran.opens())
    }

    @Test(".main runs on the main dispatch queue, one operation at a time, and refuses a higher limit")
    func mainQueue() async throws {
        let queue = ConcurrentOperationQueue.main
        #expect(queue === ConcurrentOperationQueue.main)
        #expect(queue.maxConcurrentOperationCount == 1)
        #expect(queue.underlyingQueue?.label == DispatchQueue.main.label)
        let error = caughtOperationError { try queue.setMaxConcurrentOperationCount(2) }
        #expect(error?.code == .invalidMaxConcurrentOperationCount)
        #expect(caughtOperationError { try queue.setMaxConcurrentOperationCount(0) }?.code == .invalidMaxConcurrentOperationCount)
        try queue.setMaxConcurrentOperationCount(1)
        #expect(queue.maxConcurrentOperationCount == 1)

        let meter = InFlightMeter()
        let onMain = Atomic<Int>(0)
        let done = Latch(count: 8)
        for _ in 0..<8 {
            let operation = ClosureOperation {
                _ = meter.enter()
                if onMainQueue() { onMain.add(1, ordering: .relaxed) }
                meter.leave()
                done.countDown()
            }
            try queue.addOperation(operation)
        }
        #expect(await done.opens())
        #expect(onMain.load(ordering: .relaxed) == 8)
        #expect(meter.peak == 1)
    }

    @Test("the main queue's rules on a serial queue of the test's: one at a time, limit stays 1")
    func mainQueueRulesOnSerialQueue() async throws {
        let serial = DispatchQueue(label: "executor-tests.main-stand-in")
        let queue = ConcurrentOperationQueue(mainQueueNamed: "stand-in", underlyingQueue: serial)
        #expect(caughtOperationError { try queue.setMaxConcurrentOperationCount(3) }?.code == .invalidMaxConcurrentOperationCount)
        let meter = InFlightMeter()
        let operations = (0..<20).map { _ in
            ClosureOperation {
                _ = meter.enter()
                meter.leave()
            }
        }
        try queue.addOperations(operations, waitUntilFinished: false)
        #expect(await queue.empties())
        #expect(meter.peak == 1)
    }

    @Test("MainClosureProcedure runs its closure on the main queue from any queue and finishes with its value")
    func mainClosureValue() async throws {
        let queue = ConcurrentOperationQueue(name: "main-closure")
        let procedure = MainClosureProcedure<Bool>(name: "on-main") { onMainQueue() }
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(procedure.output == true)
        #expect(procedure.errors.isEmpty)
    }

    @Test("MainClosureProcedure in .main runs its closure at once, on the main queue")
    func mainClosureInMainQueue() async throws {
        let procedure = MainClosureProcedure<Bool> { onMainQueue() }
        try ConcurrentOperationQueue.main.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(procedure.output == true)
    }

    @Test("MainClosureProcedure finishes with the error its closure throws")
    func mainClosureError() async throws {
        let queue = ConcurrentOperationQueue(name: "main-closure-error")
        let procedure = MainClosureProcedure<Int> { throw ExecutorTestError() }
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(procedure.output == nil)
        #expect(procedure.errors.count == 1)
        #expect(procedure.errors.first is ExecutorTestError)
    }

    @Test("MainClosureProcedure cancelled before it executes never runs its closure")
    func mainClosureCancelledBefore() async throws {
        let queue = suspendedProcedureQueue("main-closure-cancel-before")
        let ran = AtomicCounter()
        let procedure = MainClosureProcedure<Void> { ran.increment() }
        try queue.addOperation(procedure)
        procedure.cancel()
        queue.isSuspended = false
        #expect(await procedure.finishes())
        #expect(procedure.isCancelled)
        #expect(ran.value == 0)
    }

    @Test("MainClosureProcedure cancelled while it waits for the main queue finishes without running its closure")
    func mainClosureCancelledWhileWaiting() async throws {
        let blocking = Latch()
        let release = Gate()
        DispatchQueue.main.async {
            blocking.countDown()
            _ = release.wait(timeout: procedureTimeout)
        }
        #expect(await blocking.opens())
        let queue = ConcurrentOperationQueue(name: "main-closure-cancel-while")
        let ran = AtomicCounter()
        let procedure = MainClosureProcedure<Void> { ran.increment() }
        try queue.addOperation(procedure)
        #expect(await eventually { procedure.isExecuting })
        procedure.cancel(with: ExecutorTestError())
        release.open()
        #expect(await procedure.finishes())
        #expect(procedure.isCancelled)
        #expect(ran.value == 0)
        #expect(procedure.errors.first is ExecutorTestError)
    }

    @Test("MainClosureProcedure runs its closure exactly once")
    func mainClosureOnce() async throws {
        let queue = ConcurrentOperationQueue(name: "main-closure-once")
        let ran = AtomicCounter()
        let procedures = (0..<10).map { _ in MainClosureProcedure<Void> { ran.increment() } }
        try queue.addOperations(procedures, waitUntilFinished: false)
        #expect(await queue.empties())
        #expect(ran.value == 10)
    }

    @Test("MainClosureProcedure waits for its dependency, and its will-finish observer runs before it finishes")
    func mainClosureDependencyAndObserver() async throws {
        let queue = ConcurrentOperationQueue(name: "main-closure-dependency")
        let log = Recorder<String>()
        let dependency = ClosureProcedure<Void> { log.record("dependency") }
        let procedure = MainClosureProcedure<Void> { log.record("main") }
        try procedure.addObserver(ClosureObserver(willFinish: { procedure, _ in
            log.record(procedure.isFinished ? "late" : "will finish")
        }))
        try procedure.addDependency(dependency)
        try queue.addOperations([procedure, dependency], waitUntilFinished: false)
        #expect(await procedure.finishes())
        #expect(log.values == ["dependency", "main", "will finish"])
    }
}
