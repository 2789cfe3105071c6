import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// Awaiting a workflow task: `outcome`, `value`, `value(as:)` and the cancellation policies.
@Suite("Workflow concurrency: awaiting a workflow task", .offThePool)
struct WorkflowTaskAwaitingTests {
    @Test("1,000 awaiters of one run are each resumed exactly once, with its result")
    func thousandAwaiters() async throws {
        let runs = HeldRuns()
        let task = runs.task("A")
        let workflow = Workflow(name: "thousand")
        try workflow.add(task)
        workflow.start()
        #expect(await runs.started(1))

        let resumed = WorkflowAwaitCounter()
        let awaiters = (0..<1_000).map { _ in
            Task {
                let value = try await task.value(as: String.self)
                resumed.increment()
                return value
            }
        }
        #expect(await awaitEventually { awaiterCount(task) == 1_000 })
        try #require(runs.run(1)).finish(with: "A1")
        for awaiter in awaiters {
            let result = await awaitEnd(of: awaiter)
            #expect(result?.successValue == "A1")
        }
        #expect(resumed.value == 1_000)
        #expect(awaiterCount(task) == 0)

        // Another 1,000 after the finish: each returns at once, registering nothing.
        let late = try await awaitResult {
            try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<1_000 { group.addTask { try await task.value(as: String.self) } }
                return try await group.reduce(into: [String?]()) { $0.append($1) }
            }
        }?.get()
        #expect(late?.count == 1_000)
        #expect(late?.allSatisfy { $0 == "A1" } == true)
        #expect(awaiterCount(task) == 0)
    }

    @Test("awaiting a task that has already finished, failed or been cancelled returns at once")
    func alreadySettled() async throws {
        let workflow = Workflow(name: "settled")
        let finished = ClosureTask(name: "F") { $0.finish(with: 1) }
        let failed = ClosureTask(name: "E") { $0.fail(with: WorkflowTestError(2)) }
        let cancelled = ClosureTask(name: "C") { _ in }
        try workflow.add(finished)
        try workflow.add(failed)
        try workflow.add(cancelled)
        cancelled.cancel()
        let result = await awaitResult { try await workflow.run() }
        #expect(result?.failureValue as? OperationError == OperationError(.taskFailed, operations: ["E"], ""))

        #expect(describeOutcome(await finished.outcome) == "finished(1)")
        #expect(try await finished.value(as: Int.self) == 1)
        #expect(try await finished.value(as: String.self) == nil)
        await #expect(throws: WorkflowTestError(2)) { try await failed.value }
        let cancelledError = await #expect(throws: OperationError.self) { try await cancelled.value }
        #expect(cancelledError?.code == .cancelled)
        #expect(describeOutcome(await cancelled.outcome) == "cancelled")
        #expect(awaiterCount(finished) + awaiterCount(failed) + awaiterCount(cancelled) == 0)
    }

    @Test("a task behind a failed prerequisite ends the wait with prerequisiteFailed naming both")
    func behindAFailure() async throws {
        let runs = HeldRuns()
        let a = runs.task("A")
        let b = ClosureTask(name: "B") { $0.finish(with: "B") }
        let c = ClosureTask(name: "C") { $0.finish(with: "C") }
        let workflow = Workflow(name: "behind")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [b])
        workflow.start()
        #expect(await runs.started(1))
        let waiting = Task { try await c.value }
        #expect(await awaitEventually { awaiterCount(c) == 1 })

        try #require(runs.run(1)).fail(with: WorkflowTestError(7))
        let error = try #require(await awaitEnd(of: waiting)?.failureValue as? OperationError)
        #expect(error.code == .prerequisiteFailed)
        #expect(error.operationNames == ["C", "A"])
        #expect(error.underlyingErrors.first as? WorkflowTestError == WorkflowTestError(7))
        #expect(describeOutcome(await b.outcome) == "prerequisiteFailed(A, W7)")
        #expect(b.state == .pending && c.state == .pending)

        // The retry lets them run; a new wait sees the new outcome.
        a.retry()
        #expect(await runs.started(2))
        try #require(runs.run(2)).finish(with: "A2")
        #expect(try await awaitResult { try await c.value(as: String.self) }?.get() == "C")
    }

    @Test("a task behind a cancelled prerequisite (reset alone) ends the wait as cancelled")
    func behindACancellation() async throws {
        let a = HeldRuns().task("A")
        let b = ClosureTask(name: "B") { $0.finish(with: "B") }
        let workflow = Workflow(name: "behind cancel")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        a.cancel()
        b.reset()
        #expect(b.state == .pending)
        #expect(describeOutcome(await b.outcome) == "cancelled")
        let bError = await #expect(throws: OperationError.self) { try await b.value }
        #expect(bError?.code == .cancelled)
    }

    @Test("the wait follows the task through a reset: a reset run has no outcome, the next one does")
    func resetWhileWaiting() async throws {
        let runs = HeldRuns()
        let task = runs.task("A")
        let workflow = Workflow(name: "reset")
        try workflow.add(task)
        workflow.start()
        #expect(await runs.started(1))
        let waiting = Task { try await task.value(as: String.self) }
        #expect(await awaitEventually { awaiterCount(task) == 1 })

        task.reset()
        #expect(task.state == .ready)
        #expect(awaiterCount(task) == 1, "a reset is not an outcome")
        try #require(runs.run(1)).finish(with: "stale")  // the reset run is over: ignored
        #expect(awaiterCount(task) == 1)

        task.start()
        #expect(await runs.started(2))
        try #require(runs.run(2)).finish(with: "A2")
        #expect(await awaitEnd(of: waiting)?.successValue == "A2")
    }

    @Test("re-run after reset: a wait on the finished task returns its result, after reset and start the new one")
    func rerunAfterReset() async throws {
        let count = Atomic<Int>(0)
        let task = ClosureTask(name: "A") { run in
            run.finish(with: count.add(1, ordering: .relaxed).newValue)
        }
        let workflow = Workflow(name: "rerun")
        try workflow.add(task)
        #expect(await awaitResult { try await workflow.run() }?.successValue != nil)
        #expect(try await task.value(as: Int.self) == 1)

        workflow.reset()
        let waiting = Task { try await task.value(as: Int.self) }
        #expect(await awaitEventually { awaiterCount(task) == 1 })
        workflow.start()
        #expect(await awaitEnd(of: waiting)?.successValue == 2)
    }

    @Test("a failure that the task's delegate retries at once is not an outcome")
    func failureRetriedByDelegate() async throws {
        final class RetryOnce: WorkflowTaskDelegate {
            let retried = Atomic<Bool>(false)
            func task(_ task: WorkflowTask, didFailWith error: any Error) {
                if !retried.exchange(true, ordering: .relaxed) { task.retry() }
            }
        }
        let attempts = Atomic<Int>(0)
        let task = ClosureTask(name: "A") { run in
            let attempt = attempts.add(1, ordering: .relaxed).newValue
            if attempt == 1 { run.fail(with: WorkflowTestError(1)) } else { run.finish(with: attempt) }
        }
        let delegate = RetryOnce()
        task.delegate = delegate
        let workflow = Workflow(name: "retry in delegate")
        try workflow.add(task)
        let waiting = Task { try await task.value(as: Int.self) }
        #expect(await awaitEventually { awaiterCount(task) == 1 })
        workflow.start()
        #expect(await awaitEnd(of: waiting)?.successValue == 2)
        withExtendedLifetime(delegate) {}
    }

    @Test("an external condition not yet fulfilled is waited for until it is fulfilled")
    func externalCondition() async throws {
        let input = ExternalConditionTask(name: "input")
        let request = ClosureTask(name: "request") { run in
            run.finish(with: "sent \(run.task.anyPrerequisiteResult.map { "\($0)" } ?? "?")")
        }
        let workflow = Workflow(name: "external")
        try workflow.add(input)
        try workflow.add(request, prerequisites: [input])
        let log = WorkflowEventLog(workflow)
        let waiting = Task { try await request.value(as: String.self) }
        let running = Task { try await workflow.run() }
        #expect(await log.waitFor(prefix: "taskFailed(input"))
        #expect(await awaitEventually { awaiterCount(request) == 1 && awaiterCount(workflow) == 1 })
        input.fulfill(with: "hello")
        #expect(await awaitEnd(of: waiting)?.successValue == "sent hello")
        #expect(await awaitEnd(of: running)?.successValue != nil)
    }

    // MARK: The awaiting Swift task is cancelled

    @Test("keepWaiting: cancelling the awaiting Swift task changes nothing; the wait ends with the run")
    func keepWaiting() async throws {
        let (runs, task, workflow) = try await heldTask("keep")
        let waiting = Task { try await task.value(whenCancelled: .keepWaiting) }
        #expect(await awaitEventually { awaiterCount(task) == 1 })
        waiting.cancel()
        #expect(awaiterCount(task) == 1)
        #expect(task.state == .executing)
        try #require(runs.run(1)).finish(with: "done")
        #expect(await awaitEnd(of: waiting)?.successValue as? String == "done")
        withExtendedLifetime(workflow) {}
    }

    @Test("stopWaiting: the wait ends with CancellationError at once, the task runs on")
    func stopWaiting() async throws {
        let (runs, task, workflow) = try await heldTask("stop")
        let waiting = Task { try await task.value(whenCancelled: .stopWaiting) }
        #expect(await awaitEventually { awaiterCount(task) == 1 })
        waiting.cancel()
        #expect(await awaitEnd(of: waiting)?.failureValue is CancellationError)
        #expect(awaiterCount(task) == 0, "the continuation is withdrawn")
        #expect(task.state == .executing)
        try #require(runs.run(1)).finish(with: "done")
        #expect(task.state == .finished)

        // Already cancelled when it calls: throws without registering.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await task.outcome(whenCancelled: .stopWaiting)
        }
        #expect(await awaitEnd(of: early)?.failureValue is CancellationError)
        #expect(awaiterCount(task) == 0)
        withExtendedLifetime(workflow) {}
    }

    @Test("cancelAndWait: the workflow task and its dependents are cancelled, the wait ends with OperationError.cancelled")
    func cancelAndWait() async throws {
        let runs = HeldRuns()
        let task = runs.task("A")
        let dependent = ClosureTask(name: "B") { $0.finish(with: nil) }
        let workflow = Workflow(name: "cancel and wait")
        try workflow.add(task)
        try workflow.add(dependent, prerequisites: [task])
        workflow.start()
        #expect(await runs.started(1))
        let waiting = Task { try await task.value(whenCancelled: .cancelAndWait) }
        #expect(await awaitEventually { awaiterCount(task) == 1 })
        waiting.cancel()
        #expect((await awaitEnd(of: waiting)?.failureValue as? OperationError)?.code == .cancelled)
        #expect(task.state == .cancelled)
        #expect(dependent.state == .cancelled)
        #expect(awaiterCount(task) == 0)
        #expect(describeOutcome(try await task.outcome(whenCancelled: .cancelAndWait)) == "cancelled")
    }

    @Test("the outcome forms: outcome(whenCancelled:) throws only for stopWaiting")
    func outcomeForms() async throws {
        let (runs, task, workflow) = try await heldTask("forms")
        let keep = Task { await task.outcome }
        let stop = Task { try await task.outcome(whenCancelled: .stopWaiting) }
        #expect(await awaitEventually { awaiterCount(task) == 2 })
        keep.cancel()
        stop.cancel()
        #expect(await awaitEnd(of: stop)?.failureValue is CancellationError)
        try #require(runs.run(1)).fail(with: WorkflowTestError(3))
        #expect(await awaitResult { await keep.value }.map { describeOutcome(try! $0.get()) } == "failed(W3)")
        withExtendedLifetime(workflow) {}
    }

    /// A workflow of one task whose run is held, started.
    private func heldTask(_ name: String) async throws -> (HeldRuns, ClosureTask, Workflow) {
        let runs = HeldRuns()
        let task = runs.task("A")
        let workflow = Workflow(name: name)
        try workflow.add(task)
        workflow.start()
        #expect(await runs.started(1))
        return (runs, task, workflow)
    }
}
