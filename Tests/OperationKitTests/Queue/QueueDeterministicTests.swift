// Tests of the queue part of issue 16: the test kit's DeterministicQueue — stepping, child
// queues of groups and retries stepping with it, timers fired by moving its virtual clock.
import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

private struct StepError: Error {}

@Suite("Queue part: DeterministicQueue", .offThePool)
struct QueueDeterministicTests {
    @Test("nothing runs until the test steps the queue")
    func nothingWithoutAStep() throws {
        let deterministic = DeterministicQueue()
        let count = AtomicCounter()
        for _ in 0..<3 { try deterministic.addOperation(ClosureOperation { count.increment() }) }
        #expect(count.value == 0)
        #expect(deterministic.pendingJobCount >= 1)
        #expect(deterministic.queue.operationCount == 3)
        #expect(deterministic.runUntilIdle() == 3)
        #expect(count.value == 3)
        #expect(deterministic.queue.operationCount == 0)
        #expect(deterministic.runNext() == false)
    }

    @Test("each runNext runs one operation, in the queue's order, on the test's thread")
    func steppingOrder() throws {
        let deterministic = DeterministicQueue(maxConcurrentOperationCount: 1)
        let log = Recorder<String>()
        let low = ClosureOperation { log.record("low") }
        low.queuePriority = .low
        let a = ClosureOperation { log.record("a") }
        let b = ClosureOperation { log.record("b") }
        let high = ClosureOperation { log.record("high") }
        high.queuePriority = .high
        try deterministic.addOperations([low, a, b, high])
        #expect(deterministic.runNext())
        #expect(log.values == ["high"])
        #expect(deterministic.runNext())
        #expect(log.values == ["high", "a"])
        #expect(a.isFinished && !b.isFinished)
        deterministic.runUntilIdle()
        #expect(log.values == ["high", "a", "b", "low"])
    }

    @Test("dependencies are honoured step by step")
    func dependencies() throws {
        let deterministic = DeterministicQueue()
        let log = Recorder<Int>()
        let operations = (0..<5).map { index in ClosureOperation { log.record(index) } }
        for index in 1..<5 { try operations[index].addDependency(operations[index - 1]) }
        try deterministic.addOperations(operations.reversed())
        for step in 0..<5 {
            #expect(deterministic.runNext())
            #expect(log.values == Array(0...step))
        }
        #expect(!deterministic.runNext())
    }

    @Test("a group's children (and a group in a group) run on the same executor and clock")
    func groupChildrenStep() throws {
        let deterministic = DeterministicQueue()
        let log = Recorder<String>()
        let inner = try GroupOperation(name: "inner", operations: [ClosureOperation { log.record("inner child") }])
        let group = try GroupOperation(name: "outer", operations: [ClosureOperation { log.record("child") }, inner])
        try deterministic.addOperation(group)
        #expect(group.childQueue.operationExecutor === deterministic.executor)
        #expect(inner.childQueue.operationExecutor === deterministic.executor)
        #expect(group.childQueue.clock as? VirtualClock === deterministic.clock)
        #expect(inner.childQueue.clock as? VirtualClock === deterministic.clock)
        #expect(log.values.isEmpty)
        deterministic.runUntilIdle()
        #expect(group.isFinished)
        #expect(inner.isFinished)
        #expect(Set(log.values) == ["child", "inner child"])
    }

    @Test("a group added to an ordinary queue keeps its children's own queue settings")
    func noAdoptionFromOrdinaryQueue() async throws {
        let group = try GroupOperation(operations: [ClosureOperation {}])
        let queue = ConcurrentOperationQueue(name: "ordinary")
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(group.childQueue.operationExecutor == nil)
        #expect(group.childQueue.clock is SystemOperationClock)
    }

    @Test("a child queue given its own clock keeps it")
    func childKeepsItsOwnClock() throws {
        let deterministic = DeterministicQueue()
        let own = VirtualClock()
        let child = ConcurrentOperationQueue(name: "own-clock", clock: own)
        child.adoptSettings(of: deterministic.queue)
        #expect(child.clock as? VirtualClock === own)
        #expect(child.operationExecutor === deterministic.executor)
        let onDispatch = ConcurrentOperationQueue(name: "own-dispatch", underlyingQueue: DispatchQueue(label: "own"))
        onDispatch.adoptSettings(of: deterministic.queue)
        #expect(onDispatch.operationExecutor == nil)
        #expect(onDispatch.clock as? VirtualClock === deterministic.clock)
    }

    @Test("a retry's attempts step with the queue, and its result arrives")
    func retryAttemptsStep() throws {
        let deterministic = DeterministicQueue()
        let attempts = AtomicCounter()
        let retry = RetryOperation<Int>(maxAttempts: 3) { number in
            ClosureProcedure<Int> {
                attempts.increment()
                if number < 3 { throw StepError() }
                return number
            }
        }
        try deterministic.addOperation(retry)
        #expect(attempts.value == 0)
        deterministic.runUntilIdle()
        #expect(retry.isFinished)
        #expect(attempts.value == 3)
        #expect(retry.output == 3)
    }

    @Test("a repeat's attempts step with the queue, and its waits are on the virtual clock")
    func repeatAttemptsStep() throws {
        let deterministic = DeterministicQueue()
        let attempts = AtomicCounter()
        let repeated = RepeatProcedure<Int>(max: 3, wait: .fixed(.seconds(10))) { number in
            ClosureProcedure<Int> {
                attempts.increment()
                return number
            }
        }
        try deterministic.addOperation(repeated)
        deterministic.runUntilIdle()
        #expect(attempts.value == 1)
        #expect(!repeated.isFinished)
        deterministic.advance(by: .seconds(10))
        #expect(attempts.value == 2)
        deterministic.advance(by: .seconds(10))
        #expect(attempts.value == 3)
        #expect(repeated.isFinished)
        #expect(repeated.output == 3)
    }

    @Test("the procedure an AnyProcedure or IgnoreErrorsProcedure wraps steps with the queue")
    func wrappersStep() throws {
        let deterministic = DeterministicQueue()
        let erased = AnyProcedure(ClosureProcedure<Int> { 7 })
        let ignoring = IgnoreErrorsProcedure(ClosureProcedure<Int> { throw StepError() })
        try deterministic.addOperations([erased, ignoring])
        deterministic.runUntilIdle()
        #expect(erased.isFinished && erased.output == 7)
        #expect(ignoring.isFinished && ignoring.errors.isEmpty)
    }

    @Test("a timer on the queue's clock fires only when advance passes its deadline")
    func timerFiredByAdvance() throws {
        let deterministic = DeterministicQueue()
        let procedure = ClosureProcedure<Int>(asynchronous: { procedure in
            let clock = ConcurrentOperationQueue.current?.clock ?? SystemOperationClock()
            clock.schedule(after: .seconds(30)) { procedure.finish(withValue: 30) }
        })
        try deterministic.addOperation(procedure)
        deterministic.runUntilIdle()
        #expect(procedure.isExecuting)
        deterministic.advance(by: .seconds(29))
        #expect(!procedure.isFinished)
        deterministic.advance(by: .seconds(1))
        #expect(procedure.isFinished)
        #expect(procedure.output == 30)
        #expect(deterministic.queue.operationCount == 0)
    }

    @Test("a group child's timer uses the adopted virtual clock; work a timer starts runs before later timers")
    func childTimerAndLaterWork() throws {
        let deterministic = DeterministicQueue()
        let log = Recorder<String>()
        let waiting = ClosureProcedure<Void>(asynchronous: { procedure in
            let queue = ConcurrentOperationQueue.current
            queue?.clock.schedule(after: .seconds(5)) {
                log.record("timer")
                queue?.addOperation { log.record("after timer") }
                procedure.finish()
            }
        })
        let group = try GroupOperation(operations: [waiting])
        try deterministic.addOperation(group)
        deterministic.clock.schedule(after: .seconds(6)) { log.record("later timer") }
        deterministic.runUntilIdle()
        #expect(log.values.isEmpty)
        deterministic.advance(by: .seconds(10))
        #expect(log.values == ["timer", "after timer", "later timer"])
        #expect(group.isFinished)
    }

    @Test("cancelling before a step: the operation finishes at the next step without running")
    func cancelBeforeStep() throws {
        let deterministic = DeterministicQueue()
        let count = AtomicCounter()
        let operation = ClosureOperation { count.increment() }
        try deterministic.addOperation(operation)
        operation.cancel()
        #expect(!operation.isFinished)
        deterministic.runUntilIdle()
        #expect(operation.isFinished)
        #expect(count.value == 0)
    }
}
