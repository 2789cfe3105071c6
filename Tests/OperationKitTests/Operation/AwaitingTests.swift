import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// Awaiting operations: `finished`, `waitUntilFinished(whenCancelled:)` and `value`, exactly once
/// per awaiter, before and after the finish, under every cancellation policy.
@Suite("Concurrency: awaiting operations", .offThePool)
struct AwaitingTests {
    @Test("await finished resumes once the operation finishes")
    func finishedResumes() async throws {
        let queue = ConcurrentOperationQueue(name: "await")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        let awaiter = Task { await operation.finished; return operation.isFinished }
        #expect(await opened(operation.started))
        operation.finish()
        #expect(try await awaitWithin { await awaiter.value })
    }

    @Test("awaiting an operation that has already finished returns at once, every time")
    func alreadyFinished() async throws {
        let operation = ClosureOperation(name: "done") {}
        try operation.start()
        #expect(operation.isFinished)
        try await awaitWithin {
            await operation.finished
            await operation.finished
            try await operation.waitUntilFinished(whenCancelled: .stopWaiting)
            try await operation.waitUntilFinished(whenCancelled: .cancelAndWait)
        }
        #expect(waiterCount(of: operation) == 0)
    }

    @Test("1,000 tasks awaiting one operation are each resumed exactly once", arguments: TaskCancellationPolicy.allCases)
    func thousandAwaiters(policy: TaskCancellationPolicy) async throws {
        let queue = ConcurrentOperationQueue(name: "thousand")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        #expect(await opened(operation.started))
        let resumed = AtomicCounter()
        let registered = Latch(count: 1_000)
        try await awaitWithin {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<1_000 {
                    group.addTask {
                        registered.countDown()
                        try? await operation.waitUntilFinished(whenCancelled: policy)
                        resumed.increment()
                    }
                }
                // Some awaiters register before the finish, some race with it.
                _ = await opened(registered)
                operation.finish()
            }
        }
        #expect(resumed.value == 1_000)
        #expect(waiterCount(of: operation) == 0)
        #expect(!operation.isCancelled)
    }

    @Test("1,000 tasks awaiting an operation after it finished are each resumed once")
    func thousandLateAwaiters() async throws {
        let procedure = ClosureProcedure<Int>(name: "value") { 42 }
        let queue = ConcurrentOperationQueue(name: "late")
        try queue.addOperation(procedure)
        await procedure.finished
        let sum = try await awaitWithin {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<1_000 { group.addTask { try await procedure.value } }
                return try await group.reduce(0, +)
            }
        }
        #expect(sum == 42_000)
    }

    // MARK: Policies

    @Test("keepWaiting: a cancelled awaiting task keeps waiting; the operation is not cancelled")
    func keepWaiting() async throws {
        let queue = ConcurrentOperationQueue(name: "keep")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        #expect(await opened(operation.started))
        let awaiting = Latch()
        let awaiter = Task {
            awaiting.countDown()
            try await operation.waitUntilFinished(whenCancelled: .keepWaiting)
            return (operation.isFinished, Task.isCancelled)
        }
        #expect(await opened(awaiting))
        awaiter.cancel()
        try await untilTrue { waiterCount(of: operation) == 1 }  // it did suspend, and stays
        #expect(!operation.isCancelled)
        operation.finish()
        let (finishedWhenResumed, sawCancel) = try await awaitWithin { try await awaiter.value }
        #expect(finishedWhenResumed && sawCancel)
    }

    @Test("the finished property keeps waiting through a cancellation")
    func finishedPropertyKeepsWaiting() async throws {
        let queue = ConcurrentOperationQueue(name: "keep-property")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        #expect(await opened(operation.started))
        let awaiter = Task { await operation.finished; return operation.isFinished }
        try await untilTrue { waiterCount(of: operation) == 1 }
        awaiter.cancel()
        #expect(!operation.isCancelled)
        operation.finish()
        #expect(try await awaitWithin { await awaiter.value })
    }

    @Test("stopWaiting: the wait ends with CancellationError, the waiter is withdrawn, the operation carries on")
    func stopWaiting() async throws {
        let queue = ConcurrentOperationQueue(name: "stop")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        #expect(await opened(operation.started))
        let awaiter = Task { try await operation.waitUntilFinished(whenCancelled: .stopWaiting) }
        try await untilTrue { waiterCount(of: operation) == 1 }
        awaiter.cancel()
        let outcome = try await awaitWithin { await awaiter.result }
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(waiterCount(of: operation) == 0)
        #expect(!operation.isCancelled && !operation.isFinished)
        operation.finish()
        #expect(operation.isFinished)
    }

    @Test("stopWaiting in a task cancelled before it awaits throws at once, and leaves no waiter")
    func stopWaitingAlreadyCancelled() async throws {
        let queue = ConcurrentOperationQueue(name: "stop-early")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        let awaiter = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await operation.waitUntilFinished(whenCancelled: .stopWaiting)
        }
        let outcome = try await awaitWithin { await awaiter.result }
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(waiterCount(of: operation) == 0)
        #expect(await opened(operation.started))
        operation.finish()
    }

    @Test("stopWaiting racing the finish: every awaiter resumes exactly once, either way", arguments: 0..<20)
    func stopWaitingRace(round: Int) async throws {
        let queue = ConcurrentOperationQueue(name: "race\(round)")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        #expect(await opened(operation.started))
        let outcomes = Recorder<Bool>()
        let awaiters = (0..<50).map { _ in
            Task {
                do {
                    try await operation.waitUntilFinished(whenCancelled: .stopWaiting)
                    outcomes.record(true)
                } catch {
                    outcomes.record(false)
                }
            }
        }
        // Cancel and finish at the same time, from two threads.
        let cancelled = Latch()
        DispatchQueue.global().async {
            for awaiter in awaiters { awaiter.cancel() }
            cancelled.countDown()
        }
        operation.finish()
        try await awaitWithin { for awaiter in awaiters { await awaiter.value } }
        #expect(await opened(cancelled))
        #expect(outcomes.values.count == 50)
        #expect(waiterCount(of: operation) == 0)
    }

    @Test("cancelAndWait: cancelling the awaiting task cancels the operation, and the wait goes on until it finishes")
    func cancelAndWait() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-and-wait")
        let operation = HeldOperation(name: "held")
        try queue.addOperation(operation)
        #expect(await opened(operation.started))
        let awaiter = Task {
            try await operation.waitUntilFinished(whenCancelled: .cancelAndWait)
            return operation.isFinished
        }
        try await untilTrue { waiterCount(of: operation) == 1 }
        awaiter.cancel()
        try await untilTrue { operation.isCancelled }
        #expect(!operation.isFinished)
        operation.finish()  // an executing operation finishes itself
        #expect(try await awaitWithin { try await awaiter.value })
    }

    @Test("cancelAndWait on an operation that has not started: it finishes without executing")
    func cancelAndWaitBeforeStart() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-before-start")
        queue.isSuspended = true
        let ran = AtomicCounter()
        let operation = ClosureOperation(name: "never") { ran.increment() }
        try queue.addOperation(operation)
        let awaiter = Task { try await operation.waitUntilFinished(whenCancelled: .cancelAndWait) }
        try await untilTrue { waiterCount(of: operation) == 1 }
        awaiter.cancel()
        try await untilTrue { operation.isCancelled }
        queue.isSuspended = false
        try await awaitWithin { try await awaiter.value }
        #expect(operation.isFinished && ran.value == 0)
    }

    // MARK: Values

    @Test("value returns the output of a ResultProcedure")
    func valueOfProcedure() async throws {
        let queue = ConcurrentOperationQueue(name: "values")
        let procedure = ClosureProcedure<String>(name: "hello") { "hello" }
        try queue.addOperation(procedure)
        #expect(try await awaitWithin { try await procedure.value } == "hello")
    }

    struct Boom: Error, Equatable {}

    @Test("value throws the procedure's first error")
    func valueThrowsError() async throws {
        let queue = ConcurrentOperationQueue(name: "errors")
        let procedure = ClosureProcedure<Int>(name: "boom") { throw Boom() }
        try queue.addOperation(procedure)
        await #expect(throws: Boom.self) { try await awaitWithin { try await procedure.value } }
    }

    @Test("value of a procedure cancelled before it ran throws OperationError.cancelled")
    func valueOfCancelled() async throws {
        let queue = ConcurrentOperationQueue(name: "cancelled")
        let procedure = ClosureProcedure<Int>(name: "cancelled") { 1 }
        procedure.cancel()
        try queue.addOperation(procedure)
        let error = await #expect(throws: OperationError.self) { try await awaitWithin { try await procedure.value } }
        #expect(error?.code == .cancelled)
    }

    @Test("value of a procedure cancelled with an error throws that error")
    func valueOfCancelledWithError() async throws {
        let queue = ConcurrentOperationQueue(name: "cancelled-error")
        let procedure = ClosureProcedure<Int>(name: "cancelled") { 1 }
        procedure.cancel(with: Boom())
        try queue.addOperation(procedure)
        await #expect(throws: Boom.self) { try await awaitWithin { try await procedure.value } }
    }

    @Test("value of a procedure that finished without a value throws OperationError.noValue")
    func valueMissing() async throws {
        let queue = ConcurrentOperationQueue(name: "no-value")
        let procedure = ClosureProcedure<Int>(name: "empty", asynchronous: { $0.finish() })
        try queue.addOperation(procedure)
        let error = await #expect(throws: OperationError.self) { try await awaitWithin { try await procedure.value } }
        #expect(error?.code == .noValue)
    }

    @Test("value(whenCancelled: .stopWaiting) throws CancellationError and leaves the procedure running")
    func valueStopWaiting() async throws {
        let queue = ConcurrentOperationQueue(name: "value-stop")
        let release = Gate()
        let procedure = ClosureProcedure<Int>(name: "slow", asynchronous: { procedure in
            BlockingWaits.run {
                _ = release.wait(timeout: operationTestTimeout)
                procedure.finish(withValue: 7)
            }
        })
        try queue.addOperation(procedure)
        let awaiter = Task { try await procedure.value(whenCancelled: .stopWaiting) }
        try await untilTrue { waiterCount(of: procedure) == 1 }
        awaiter.cancel()
        let outcome = try await awaitWithin { await awaiter.result }
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(!procedure.isCancelled)
        release.open()
        #expect(try await awaitWithin { try await procedure.value } == 7)
    }

    // MARK: The queue

    @Test("waitUntilAllOperationsAreFinished(whenCancelled:) under each policy")
    func queuePolicies() async throws {
        for policy in TaskCancellationPolicy.allCases {
            let queue = ConcurrentOperationQueue(name: "queue-\(policy)")
            let operation = HeldOperation(name: "held")
            try queue.addOperation(operation)
            #expect(await opened(operation.started))
            let awaiter = Task { try await queue.waitUntilAllOperationsAreFinished(whenCancelled: policy) }
            try await untilTrue { waiterCount(of: queue) == 1 }
            awaiter.cancel()
            switch policy {
            case .stopWaiting:
                let outcome = try await awaitWithin { await awaiter.result }
                #expect(throws: CancellationError.self) { try outcome.get() }
                #expect(waiterCount(of: queue) == 0)
                #expect(!operation.isCancelled)
                operation.finish()
            case .keepWaiting:
                #expect(!operation.isCancelled)
                operation.finish()
                try await awaitWithin { try await awaiter.value }
            case .cancelAndWait:
                try await untilTrue { operation.isCancelled }
                operation.finish()
                try await awaitWithin { try await awaiter.value }
            }
            try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        }
    }

    @Test("waiting for an empty queue returns at once under every policy")
    func emptyQueue() async throws {
        let queue = ConcurrentOperationQueue(name: "empty")
        for policy in TaskCancellationPolicy.allCases {
            try await awaitWithin { try await queue.waitUntilAllOperationsAreFinished(whenCancelled: policy) }
        }
    }
}
