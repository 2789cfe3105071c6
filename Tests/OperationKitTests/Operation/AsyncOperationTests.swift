import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// Async work as operations: AsyncOperation, AsyncProcedure, `queue.addOperation { async }`,
/// cancellation from the operation to its task, and the batch `map`.
@Suite("Concurrency: async work as operations", .offThePool)
struct AsyncOperationTests {
    struct Boom: Error, Equatable { var id = 0 }

    @Test("an AsyncOperation runs its closure in a task and keeps its value")
    func runsAndKeepsValue() async throws {
        let queue = ConcurrentOperationQueue(name: "async")
        let operation = AsyncOperation(name: "answer") { () async throws -> Int in
            await Task.yield()
            return 42
        }
        try queue.addOperation(operation)
        #expect(try await awaitWithin { try await operation.value } == 42)
        #expect(operation.output == 42 && operation.error == nil && operation.isFinished)
    }

    @Test("a thrown error becomes the operation's error and value throws it")
    func keepsError() async throws {
        let queue = ConcurrentOperationQueue(name: "async-error")
        let operation = queue.addOperation { () async throws -> Int in throw Boom(id: 3) }
        await #expect(throws: Boom(id: 3)) { try await awaitWithin { try await operation.value } }
        #expect(operation.error as? Boom == Boom(id: 3))
        #expect(operation.output == nil)
    }

    @Test("an AsyncOperation<Void> has the result .success(()) once its closure returned; none before, none if cancelled before it started")
    func voidResult() async throws {
        let queue = ConcurrentOperationQueue(name: "async-void")
        let operation = AsyncOperation { () async in }
        #expect(operation.result == nil && operation.output == nil)
        try queue.addOperation(operation)
        try await operation.finished(within: .seconds(30))
        let succeeded = if case .success? = operation.result { true } else { false }
        #expect(succeeded && operation.output != nil && operation.error == nil)

        let cancelled = AsyncOperation { () async in }
        cancelled.cancel()
        try queue.addOperation(cancelled)
        try await cancelled.finished(within: .seconds(30))
        #expect(cancelled.result == nil && cancelled.output == nil)
    }

    @Test("it holds its queue slot until the closure returns: a serial queue runs the next one only then")
    func holdsSlot() async throws {
        let queue = try ConcurrentOperationQueue(name: "serial", maxConcurrentOperationCount: 1)
        let release = Gate()
        let firstStarted = Latch()
        let first = queue.addOperation {
            firstStarted.countDown()
            _ = await opened(release)
        }
        let second = queue.addOperation { () async in first.isFinished }
        #expect(await opened(firstStarted))
        #expect(!second.isExecuting && !second.isFinished)
        release.open()
        #expect(try await awaitWithin { try await second.value })
    }

    @Test("cancel() cancels the running task: the closure sees Task.isCancelled and its cancellation handler runs")
    func cancelReachesTask() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-task")
        let started = Latch()
        let handlerRan = Latch()
        let operation = queue.addOperation { () async -> Bool in
            await withTaskCancellationHandler {
                started.countDown()
                _ = await opened(handlerRan)
                return Task.isCancelled
            } onCancel: {
                handlerRan.countDown()
            }
        }
        #expect(await opened(started))
        operation.cancel()
        #expect(try await awaitWithin { try await operation.value })
        #expect(operation.isCancelled)
    }

    @Test("cancelled before it starts, the closure never runs and value throws OperationError.cancelled")
    func cancelledBeforeStart() async throws {
        let queue = ConcurrentOperationQueue(name: "never")
        queue.isSuspended = true
        let ran = AtomicCounter()
        let operation = queue.addOperation { () async in ran.increment() }
        operation.cancel()
        queue.isSuspended = false
        let error = await #expect(throws: OperationError.self) { try await awaitWithin { try await operation.value } }
        #expect(error?.code == .cancelled)
        #expect(ran.value == 0 && operation.result == nil)
    }

    @Test("finish() from outside does nothing: the closure's end finishes the operation")
    func finishIgnored() async throws {
        let queue = ConcurrentOperationQueue(name: "finish")
        let release = Gate()
        let started = Latch()
        let operation = queue.addOperation { () async -> Int in
            started.countDown()
            _ = await opened(release)
            return 1
        }
        #expect(await opened(started))
        #expect(!operation.finish())
        #expect(!operation.isFinished)
        release.open()
        #expect(try await awaitWithin { try await operation.value } == 1)
    }

    @Test("a task cancelled while awaiting an AsyncOperation, under cancelAndWait, cancels the operation's task")
    func cancellationFlowsBothWays() async throws {
        let queue = ConcurrentOperationQueue(name: "both-ways")
        let started = Latch()
        let operation = queue.addOperation { () async -> Bool in
            started.countDown()
            try? await Task.sleep(for: operationTestTimeout)  // ends early when cancelled
            return true
        }
        #expect(await opened(started))
        let awaiter = Task { try await operation.value(whenCancelled: .cancelAndWait) }
        try await untilTrue { waiterCount(of: operation) == 1 }
        awaiter.cancel()
        #expect(try await awaitWithin { try await awaiter.value })
        #expect(operation.isCancelled)
    }

    @Test("the task's priority follows the operation's quality of service, then the queue's")
    func priority() async throws {
        let queue = ConcurrentOperationQueue(name: "qos", qualityOfService: .utility)
        let inherited = queue.addOperation { () async in Task.currentPriority }
        let own = AsyncOperation { Task.currentPriority }
        own.qualityOfService = .userInitiated
        try queue.addOperation(own)
        let explicit = queue.addOperation(priority: .background) { () async in Task.currentPriority }
        #expect(try await awaitWithin { try await inherited.value } == .utility)
        #expect(try await awaitWithin { try await own.value } == .high)
        #expect(try await awaitWithin { try await explicit.value } == .background)
    }

    @Test("both initialisers: without a priority, or with nil, the task follows the quality of service; a priority given wins")
    func priorityInitialisers() async throws {
        let queue = ConcurrentOperationQueue(name: "qos-inits", qualityOfService: .utility)
        let withoutPriority = AsyncOperation(name: "without") { Task.currentPriority }
        let withNil = AsyncOperation(name: "nil", priority: nil) { Task.currentPriority }
        let withPriority = AsyncOperation(name: "given", priority: .background) { Task.currentPriority }
        withPriority.qualityOfService = .userInitiated
        try queue.addOperations([withoutPriority, withNil, withPriority], waitUntilFinished: false)
        #expect(try await awaitWithin { try await withoutPriority.value } == .utility)
        #expect(try await awaitWithin { try await withNil.value } == .utility)
        #expect(try await awaitWithin { try await withPriority.value } == .background)
    }

    @Test("started by hand, it runs too")
    func manualStart() async throws {
        let operation = AsyncOperation { "manual" }
        try operation.start()
        #expect(try await awaitWithin { try await operation.value } == "manual")
    }

    @Test("dependencies apply: an async operation waits for its dependency")
    func dependencies() async throws {
        let queue = ConcurrentOperationQueue(name: "deps")
        let first = AsyncOperation(name: "first") { () async -> Int in
            await Task.yield()
            return 1
        }
        let second = AsyncOperation(name: "second") { first.isFinished }
        try second.addDependency(first)
        try queue.addOperations([second, first], waitUntilFinished: false)
        #expect(try await awaitWithin { try await second.value })
    }

    // MARK: Overloads

    @Test("addOperation: a synchronous closure still makes a ClosureOperation, an async or throwing one an AsyncOperation")
    func overloads() async throws {
        let queue = ConcurrentOperationQueue(name: "overloads")
        let ran = AtomicCounter()
        let sync = queue.addOperation { ran.increment() }
        let async = queue.addOperation { await Task.yield(); ran.increment() }
        let throwing = queue.addOperation { () throws -> Int in 5 }
        let value = queue.addOperation { () async in 7 }
        #expect(type(of: sync) == ClosureOperation.self)
        #expect(type(of: async) == AsyncOperation<Void>.self)
        #expect(type(of: throwing) == AsyncOperation<Int>.self)
        #expect(type(of: value) == AsyncOperation<Int>.self)
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        #expect(ran.value == 2)
        #expect(try await value.value == 7)
    }

    // MARK: AsyncProcedure

    @Test("an AsyncProcedure finishes with its closure's value; observers and conditions apply")
    func asyncProcedure() async throws {
        let queue = ConcurrentOperationQueue(name: "procedure")
        let finishes = AtomicCounter()
        let procedure = AsyncProcedure<Int>(name: "proc") { () async throws -> Int in
            await Task.yield()
            return 9
        }
        try procedure.addObserver(ClosureObserver(didFinish: { _, _ in finishes.increment() }))
        try procedure.addCondition(ClosureCondition(name: "yes") { _ in .satisfied })
        try queue.addOperation(procedure)
        #expect(try await awaitWithin { try await procedure.value } == 9)
        try await untilTrue { finishes.value == 1 }
    }

    @Test("an AsyncProcedure's value can be injected into another procedure")
    func asyncProcedureInjection() async throws {
        let queue = ConcurrentOperationQueue(name: "inject")
        let producer = AsyncProcedure<Int> { 20 }
        let consumer = TransformProcedure<Int, Int> { $0 + 1 }
        try consumer.injectInput(from: producer)
        try queue.addOperations([producer, consumer], waitUntilFinished: false)
        #expect(try await awaitWithin { try await consumer.value } == 21)
    }

    @Test("cancelling an AsyncProcedure cancels its task; a CancellationError leaves it cancelled, not failed")
    func asyncProcedureCancel() async throws {
        let queue = ConcurrentOperationQueue(name: "procedure-cancel")
        let started = Latch()
        let procedure = AsyncProcedure<Int> {
            started.countDown()
            try? await Task.sleep(for: operationTestTimeout)  // ends early when cancelled
            throw CancellationError()
        }
        try queue.addOperation(procedure)
        #expect(await opened(started))
        procedure.cancel()
        let error = await #expect(throws: OperationError.self) { try await awaitWithin { try await procedure.value } }
        #expect(error?.code == .cancelled)
        #expect(procedure.errors.isEmpty && !procedure.isFailed)
    }

    @Test("an AsyncProcedure that throws is failed with the error")
    func asyncProcedureFails() async throws {
        let queue = ConcurrentOperationQueue(name: "procedure-fail")
        let procedure = AsyncProcedure<Int> { throw Boom(id: 8) }
        try queue.addOperation(procedure)
        await #expect(throws: Boom(id: 8)) { try await awaitWithin { try await procedure.value } }
        #expect(procedure.isFailed)
    }

    // MARK: map

    @Test("map returns the results in input order, with at most maxConcurrent in flight")
    func mapOrderAndLimit() async throws {
        let queue = try ConcurrentOperationQueue(name: "map", maxConcurrentOperationCount: 8)
        let meter = InFlightMeter()
        let results = try await awaitWithin {
            try await queue.map(0..<200, maxConcurrent: 3) { item in
                meter.enter()
                await Task.yield()
                meter.leave()
                return item * 2
            }
        }
        #expect(results == (0..<200).map { $0 * 2 })
        #expect(meter.peak <= 3)
    }

    @Test("map: the queue's own limit applies too")
    func mapQueueLimit() async throws {
        let queue = try ConcurrentOperationQueue(name: "map-queue", maxConcurrentOperationCount: 2)
        let meter = InFlightMeter()
        try await awaitWithin {
            try await queue.map(0..<100, maxConcurrent: 10) { _ in
                meter.enter()
                await Task.yield()
                meter.leave()
            }
        }
        #expect(meter.peak <= 2)
    }

    @Test("map of nothing returns nothing; maxConcurrent below 1 is refused")
    func mapEdges() async throws {
        let queue = ConcurrentOperationQueue(name: "map-edges")
        #expect(try await queue.map([Int](), maxConcurrent: 2) { $0 }.isEmpty)
        let error = await #expect(throws: OperationError.self) { try await queue.map([1], maxConcurrent: 0) { $0 } }
        #expect(error?.code == .invalidMaxConcurrentOperationCount)
    }

    @Test("map: the first error cancels the rest, nothing more starts, and it is rethrown after the started ones finished")
    func mapFirstError() async throws {
        let queue = ConcurrentOperationQueue(name: "map-error")
        let started = AtomicCounter()
        let cancelledSeen = AtomicCounter()
        let running = AtomicCounter()
        let failNow = Latch(count: 2)  // the two others are running
        await #expect(throws: Boom(id: 0)) {
            try await awaitWithin {
                try await queue.map(0..<100, maxConcurrent: 3) { item in
                    started.increment()
                    running.increment()
                    if item == 0 {
                        _ = await opened(failNow)
                        throw Boom(id: 0)
                    }
                    failNow.countDown()
                    try? await Task.sleep(for: operationTestTimeout)  // ends early when cancelled
                    cancelledSeen.increment()
                    throw Boom(id: item)
                }
            }
        }
        // Structured: the others had finished when map threw.
        #expect(started.value == 3)
        #expect(cancelledSeen.value == 2)
        #expect(queue.operationCount == 0 || queue.operations.allSatisfy(\.isFinished))
    }

    @Test("map: cancelling the awaiting task cancels the batch and throws CancellationError")
    func mapCancelled() async throws {
        let queue = ConcurrentOperationQueue(name: "map-cancel")
        let started = Latch(count: 2)
        let cancelledSeen = AtomicCounter()
        let batch = Task {
            try await queue.map(0..<50, maxConcurrent: 2) { _ in
                started.countDown()
                try? await Task.sleep(for: operationTestTimeout)  // ends early when cancelled
                cancelledSeen.increment()
            }
        }
        #expect(await opened(started))
        batch.cancel()
        let outcome = try await awaitWithin { await batch.result }
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(cancelledSeen.value == 2)
    }

    @Test("allOperationsFinished for a queue of async operations")
    func waitForAsyncOperations() async throws {
        let queue = try ConcurrentOperationQueue(name: "drain", maxConcurrentOperationCount: 4)
        let done = AtomicCounter()
        for _ in 0..<100 { queue.addOperation { await Task.yield(); done.increment() } }
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        #expect(done.value == 100)
    }
}
