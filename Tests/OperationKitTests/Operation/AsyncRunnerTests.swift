import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// The task that ran an AsyncOperation's closure goes on to the closures of the async operations
/// its queue has ready next (`AsyncRunner`): one task for a chain, cancellation that reaches only
/// the closure it was meant for, and everything else handed back to the queue's workers.
@Suite("Concurrency: async operations share a task along a chain", .offThePool)
struct AsyncRunnerTests {
    /// What a closure saw of the task it ran in.
    final class Sightings: Sendable {
        private let recorder = Recorder<Sighting>()
        struct Sighting: Sendable {
            var name: String
            var task: Int
            var cancelled: Bool
            var priority: TaskPriority
        }

        func record(_ name: String) {
            let task = withUnsafeCurrentTask { $0?.hashValue } ?? 0
            recorder.record(Sighting(name: name, task: task, cancelled: Task.isCancelled, priority: Task.currentPriority))
        }

        func of(_ name: String) -> Sighting? { recorder.values.first { $0.name == name } }
    }

    /// A one-shot signal a closure awaits without holding a thread.
    final class Signal: Sendable {
        private let stream: AsyncStream<Void>
        private let continuation: AsyncStream<Void>.Continuation

        init() { (stream, continuation) = AsyncStream.makeStream(of: Void.self) }

        func send() { continuation.yield(()) }
        func wait() async { for await _ in stream { return } }
    }

    @Test("a chain of async operations runs its closures one after another in one task")
    func chainSharesTask() async throws {
        let queue = ConcurrentOperationQueue(name: "chain")
        let seen = Sightings()
        let operations = (0..<5).map { index in AsyncOperation(name: "op\(index)") { seen.record("op\(index)") } }
        for index in 1..<operations.count { try operations[index].addDependency(operations[index - 1]) }
        try queue.addOperations(operations, waitUntilFinished: false)
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let tasks = Set((0..<5).compactMap { seen.of("op\($0)")?.task })
        #expect(tasks.count == 1, "one task ran the whole chain")
        #expect(operations.allSatisfy { $0.isFinished && $0.result != nil })
    }

    @Test("a chain mixing async operations of different outputs runs in one task and keeps each result")
    func mixedChainSharesTaskAndKeepsResults() async throws {
        struct Failure: Error, Equatable {}
        let queue = ConcurrentOperationQueue(name: "mixed-chain")
        let seen = Sightings()
        let void1 = AsyncOperation(name: "void1") { seen.record("void1") }
        let int1 = AsyncOperation(name: "int1") { () -> Int in seen.record("int1"); return 7 }
        let int2 = AsyncOperation(name: "int2") { () -> Int in seen.record("int2"); return 8 }
        let none = AsyncOperation(name: "none") { () -> String? in seen.record("none"); return nil }
        let thrower = AsyncOperation(name: "thrower") { () -> Int in seen.record("thrower"); throw Failure() }
        let void2 = AsyncOperation(name: "void2") { seen.record("void2") }
        let operations: [ConcurrentOperation] = [void1, int1, int2, none, thrower, void2]
        for index in 1..<operations.count { try operations[index].addDependency(operations[index - 1]) }
        try queue.addOperations(operations, waitUntilFinished: false)
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let names = ["void1", "int1", "int2", "none", "thrower", "void2"]
        let tasks = Set(names.compactMap { seen.of($0)?.task })
        #expect(tasks.count == 1, "one task ran the whole chain, across the changes of output type")
        #expect(void1.output != nil && void2.output != nil)
        #expect(int1.output == 7 && int2.output == 8)
        #expect(try #require(none.result).get() == nil, "a closure that returned nil has a result")
        #expect(thrower.error is Failure && thrower.output == nil)
        await #expect(throws: Failure.self) { try await thrower.value }
        #expect(try await int2.value == 8)
    }

    @Test("cancelling the operation whose closure runs cancels that closure; the next one runs in a task that is not cancelled")
    func cancelReachesOnlyItsClosure() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-current")
        let seen = Sightings()
        let started = Latch()
        let first = AsyncOperation(name: "first") {
            started.countDown()
            // Ends early when the task is cancelled (the test's timeout fails it otherwise).
            try? await Task.sleep(for: .seconds(60))
            seen.record("first")
        }
        let second = AsyncOperation(name: "second") { seen.record("second") }
        try second.addDependency(first)
        try queue.addOperations([first, second], waitUntilFinished: false)
        #expect(await opened(started))
        first.cancel()
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let firstSighting = try #require(seen.of("first"))
        let secondSighting = try #require(seen.of("second"))
        // A task stays cancelled: so the second closure ran in another task. (Not checked by
        // address: the first task may have ended and been freed, its memory reused.)
        #expect(firstSighting.cancelled)
        #expect(!secondSighting.cancelled, "a later closure never runs in the cancelled task")
    }

    @Test("cancelling a later operation of a chain while its closure runs cancels that closure only, in the chain's task")
    func cancelReachesLaterClosureOfChain() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-later")
        let seen = Sightings()
        let started = Latch()
        let first = AsyncOperation(name: "first") { seen.record("first") }
        // Started by the runner after `first`, not by a worker: the runner's step between two
        // closures must still let a cancel reach this closure, and only it.
        let second = AsyncOperation(name: "second") {
            seen.record("second")
            started.countDown()
            try? await Task.sleep(for: .seconds(60))
            seen.record("second-end")
        }
        let third = AsyncOperation(name: "third") { seen.record("third") }
        try second.addDependency(first)
        try third.addDependency(second)
        try queue.addOperations([first, second, third], waitUntilFinished: false)
        #expect(await opened(started))
        second.cancel()
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let firstSighting = try #require(seen.of("first"))
        let secondSighting = try #require(seen.of("second"))
        #expect(!firstSighting.cancelled)
        #expect(!secondSighting.cancelled, "not cancelled before the cancel")
        #expect(seen.of("second-end")?.cancelled == true, "the cancel reached the closure that ran")
        #expect(firstSighting.task == secondSighting.task, "the runner ran both closures")
        #expect(seen.of("third")?.cancelled == false, "a later closure never runs in the cancelled task")
        #expect(second.isCancelled && !third.isCancelled)
    }

    /// A weak reference to a queue, readable from any thread.
    final class WeakQueue: @unchecked Sendable {  // written once, in init; weak loads are thread-safe
        weak var queue: ConcurrentOperationQueue?
        init(_ queue: ConcurrentOperationQueue) { self.queue = queue }
    }

    @Test("a chain goes on after the caller let go of its queue, which is released once the runner is done")
    func chainOutlivesDroppedQueue() async throws {
        let release = Signal()
        let started = Latch()
        var operations: [AsyncOperation<Int>] = []
        let reference: WeakQueue
        do {
            let queue = ConcurrentOperationQueue(name: "dropped")
            reference = WeakQueue(queue)
            let first = AsyncOperation(name: "first") { () -> Int in
                started.countDown()
                await release.wait()
                return 0
            }
            operations = [first] + (1..<20).map { index in AsyncOperation(name: "op\(index)") { index } }
            for index in 1..<operations.count { try operations[index].addDependency(operations[index - 1]) }
            try queue.addOperations(operations, waitUntilFinished: false)
        }
        #expect(await opened(started))
        release.send()
        let chain = operations
        let outputs = try await awaitWithin {
            var outputs: [Int] = []
            for operation in chain { outputs.append(try await operation.value) }
            return outputs
        }
        #expect(outputs == Array(0..<20))
        // The runner holds the queue until its run ends, a moment after the last finish.
        #expect(await eventually { reference.queue == nil }, "the queue is still alive")
    }

    @Test("cancelling an operation whose closure has ended does not reach the next closure in the same task")
    func lateCancelDoesNotLeak() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-late")
        let seen = Sightings()
        let secondStarted = Latch()
        let release = Signal()
        let first = AsyncOperation(name: "first") { seen.record("first") }
        let second = AsyncOperation(name: "second") {
            secondStarted.countDown()
            await release.wait()
            seen.record("second")
        }
        try second.addDependency(first)
        try queue.addOperations([first, second], waitUntilFinished: false)
        #expect(await opened(secondStarted))
        first.cancel()  // finished already: changes nothing, and must not cancel `second`'s task
        release.send()
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let secondSighting = try #require(seen.of("second"))
        #expect(!secondSighting.cancelled)
        #expect(seen.of("first")?.task == secondSighting.task, "the chain shared its task")
        #expect(!first.isCancelled)
    }

    @Test("a synchronous operation in a chain of async ones runs on a worker of the queue")
    func synchronousGoesToWorker() async throws {
        let queue = ConcurrentOperationQueue(name: "mixed")
        let seen = Sightings()
        let ranOnWorker = Atomic(false)
        let first = AsyncOperation(name: "first") { seen.record("first") }
        let middle = ClosureOperation(name: "middle") {
            ranOnWorker.store(ConcurrentOperationQueue.current === queue, ordering: .relaxed)
        }
        let last = AsyncOperation(name: "last") { seen.record("last") }
        try middle.addDependency(first)
        try last.addDependency(middle)
        try queue.addOperations([first, middle, last], waitUntilFinished: false)
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let onWorker = ranOnWorker.load(ordering: .relaxed)
        #expect(onWorker)
        #expect(seen.of("first") != nil && seen.of("last") != nil)
    }

    @Test("an operation that asks for another priority gets a task of its own, at that priority")
    func priorityChangeStartsNewTask() async throws {
        let queue = ConcurrentOperationQueue(name: "priorities")
        let seen = Sightings()
        let low = AsyncOperation(name: "low", priority: .low) { seen.record("low") }
        let high = AsyncOperation(name: "high", priority: .high) { seen.record("high") }
        try high.addDependency(low)
        try queue.addOperations([low, high], waitUntilFinished: false)
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let lowSighting = try #require(seen.of("low"))
        let highSighting = try #require(seen.of("high"))
        // Another task, told by its priority rather than its address (the first task may have
        // ended and been freed, its memory reused).
        #expect(lowSighting.priority < .high)
        #expect(highSighting.priority >= .high)
    }

    @Test("a chain on a serial queue still runs one closure at a time, in order, and lets other work in between")
    func serialQueueOrder() async throws {
        let queue = try ConcurrentOperationQueue(name: "serial", maxConcurrentOperationCount: 1)
        let order = Recorder<String>()
        let inFlight = Atomic(0)
        let overlap = Atomic(false)
        func body(_ name: String) -> @Sendable () async -> Void {
            {
                if inFlight.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue > 1 {
                    overlap.store(true, ordering: .relaxed)
                }
                await Task.yield()
                order.record(name)
                inFlight.wrappingSubtract(1, ordering: .acquiringAndReleasing)
            }
        }
        let chain = (0..<20).map { AsyncOperation(name: "c\($0)", body("c\($0)")) }
        for index in 1..<chain.count { try chain[index].addDependency(chain[index - 1]) }
        let others = (0..<20).map { AsyncOperation(name: "o\($0)", body("o\($0)")) }
        try queue.addOperations(chain + others, waitUntilFinished: false)
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        let overlapped = overlap.load(ordering: .relaxed)
        #expect(!overlapped)
        let values = order.values
        #expect(values.filter { $0.hasPrefix("c") } == (0..<20).map { "c\($0)" })
        #expect(values.count == 40)
    }
}
