import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// Awaiting a workflow: `run()`, `outcome` and the cancellation policies; the event stream's end.
@Suite("Workflow concurrency: awaiting a workflow", .offThePool)
struct WorkflowAwaitingTests {
    @Test("run() starts the workflow and returns when it has finished, with every result")
    func runSucceeds() async throws {
        let log = WorkflowRunCounter()
        let a = AsyncClosureTask(name: "A") { run in log.record(run.task); return "A" }
        let b = AsyncClosureTask(name: "B") { run in log.record(run.task); return "B" }
        let c = AsyncClosureTask(name: "C") { run in
            log.record(run.task)
            return "C(" + run.task.allPrerequisiteResults.map { "\($0)" }.joined(separator: "+") + ")"
        }
        let workflow = Workflow(name: "A and B, then C")
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c, prerequisites: [a, b])
        let result = await awaitResult { try await workflow.run() }
        #expect(result?.successValue != nil)
        #expect(workflow.isFinished)
        #expect(c.result as? String == "C(A+B)")
        #expect(try await c.value(as: String.self) == "C(A+B)")
        #expect(log.counts == ["A": 1, "B": 1, "C": 1])
        #expect(describeOutcome(await workflow.outcome) == "finished")
        // Awaiting the finished workflow again returns at once; run() starts nothing more.
        #expect(await awaitResult { try await workflow.run() }?.successValue != nil)
        #expect(log.counts == ["A": 1, "B": 1, "C": 1])
        #expect(awaiterCount(workflow) == 0)
    }

    @Test("an empty workflow: run() returns at once")
    func empty() async throws {
        let workflow = Workflow(name: "empty")
        #expect(await awaitResult { try await workflow.run() }?.successValue != nil)
    }

    @Test("a failure: run() throws taskFailed naming the task once nothing runs; dependents never ran")
    func runFails() async throws {
        let log = WorkflowRunCounter()
        let runs = HeldRuns()
        let a = AsyncClosureTask(name: "A") { run in log.record(run.task); throw WorkflowTestError(1) }
        let b = AsyncClosureTask(name: "B") { run in log.record(run.task); return "B" }
        let c = AsyncClosureTask(name: "C") { run in log.record(run.task); return "C" }
        let slow = runs.task("S")  // an independent branch, held until the test lets it finish
        let workflow = Workflow(name: "fails")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [b])
        try workflow.add(slow)
        let events = WorkflowEventLog(workflow)
        let running = Task { try await workflow.run() }
        #expect(await runs.started(1))
        #expect(await events.waitFor(prefix: "taskFailed(A"))
        #expect(await awaitEventually { awaiterCount(workflow) == 1 })
        // A has failed but S is executing: the workflow has not settled.
        #expect(awaiterCount(workflow) == 1)
        try #require(runs.run(1)).finish(with: "S")

        let error = try #require(await awaitEnd(of: running)?.failureValue as? OperationError)
        #expect(error.code == .taskFailed)
        #expect(error.operationNames == ["A"])
        #expect(error.underlyingErrors.first as? WorkflowTestError == WorkflowTestError(1))
        #expect("\(error)".contains("A"))
        #expect(log.counts == ["A": 1])
        #expect(b.state == .pending && c.state == .pending)
        #expect(slow.state == .finished)
        #expect(describeOutcome(await workflow.outcome) == "failed(A: W1)")
        #expect(workflow.lock.withLock { workflow.executingCount } == 0)

        // run() does not retry: on the failed workflow it reports the failure again.
        await #expect(throws: OperationError.self) { try await workflow.run() }
    }

    @Test("a workflow cancelled from outside ends the wait with OperationError.cancelled")
    func cancelledFromOutside() async throws {
        let runs = HeldRuns()
        let a = runs.task("A")
        let b = ClosureTask(name: "B") { $0.finish(with: nil) }
        let workflow = Workflow(name: "cancelled")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let running = Task { try await workflow.run() }
        #expect(await runs.started(1))
        #expect(await awaitEventually { awaiterCount(workflow) == 1 })
        workflow.cancel()
        #expect((await awaitEnd(of: running)?.failureValue as? OperationError)?.code == .cancelled)
        #expect(describeOutcome(await workflow.outcome) == "cancelled(A, B)")
        #expect(workflow.lock.withLock { workflow.executingCount } == 0)
    }

    @Test("keepWaiting: cancelling the awaiting Swift task changes nothing")
    func keepWaiting() async throws {
        let runs = HeldRuns()
        let workflow = Workflow(name: "keep")
        try workflow.add(runs.task("A"))
        let running = Task { try await workflow.run(whenCancelled: .keepWaiting) }
        #expect(await runs.started(1))
        #expect(await awaitEventually { awaiterCount(workflow) == 1 })
        running.cancel()
        #expect(awaiterCount(workflow) == 1)
        try #require(runs.run(1)).finish(with: nil)
        #expect(await awaitEnd(of: running)?.successValue != nil)
    }

    @Test("stopWaiting: the wait ends at once, the workflow runs on")
    func stopWaiting() async throws {
        let runs = HeldRuns()
        let workflow = Workflow(name: "stop")
        let task = runs.task("A")
        try workflow.add(task)
        let running = Task { try await workflow.run(whenCancelled: .stopWaiting) }
        #expect(await runs.started(1))
        #expect(await awaitEventually { awaiterCount(workflow) == 1 })
        running.cancel()
        #expect(await awaitEnd(of: running)?.failureValue is CancellationError)
        #expect(awaiterCount(workflow) == 0)
        #expect(task.state == .executing)
        try #require(runs.run(1)).finish(with: nil)
        #expect(workflow.isFinished)
    }

    @Test("cancelAndWait: the workflow is cancelled and the wait ends with OperationError.cancelled")
    func cancelAndWait() async throws {
        let cancelled = Latch()
        let started = Latch()
        let a = AsyncClosureTask(name: "A") { _ in
            started.countDown()
            do {
                try await Task.sleep(for: .seconds(600))  // only a cancellation ends it
            } catch {
                cancelled.countDown()
                throw error
            }
            return nil
        }
        let b = ClosureTask(name: "B") { $0.finish(with: nil) }
        let workflow = Workflow(name: "cancel and wait")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let running = Task { try await workflow.run(whenCancelled: .cancelAndWait) }
        #expect(await reached(started))
        #expect(await awaitEventually { awaiterCount(workflow) == 1 })
        running.cancel()
        #expect((await awaitEnd(of: running)?.failureValue as? OperationError)?.code == .cancelled)
        #expect(a.state == .cancelled && b.state == .cancelled)
        #expect(await reached(cancelled), "the workflow task's cancel cancelled its Swift task")
        #expect(a.error == nil, "the cancelled run's CancellationError is ignored")
    }

    @Test("1,000 awaiters of one workflow are each resumed exactly once")
    func thousandAwaiters() async throws {
        let runs = HeldRuns()
        let workflow = Workflow(name: "thousand")
        try workflow.add(runs.task("A"))
        workflow.start()
        #expect(await runs.started(1))
        let resumed = WorkflowAwaitCounter()
        let awaiters = (0..<1_000).map { _ in
            Task {
                let outcome = await workflow.outcome
                resumed.increment()
                return describeOutcome(outcome)
            }
        }
        #expect(await awaitEventually { awaiterCount(workflow) == 1_000 })
        try #require(runs.run(1)).finish(with: nil)
        for awaiter in awaiters {
            #expect(await awaitResult { await awaiter.value }?.successValue == "finished")
        }
        #expect(resumed.value == 1_000)
        #expect(awaiterCount(workflow) == 0)
    }

    @Test("the events stream ends when the workflow is released, not before its runs end")
    func eventsEndWithTheWorkflow() async throws {
        let gate = Gate()
        var workflow: Workflow? = Workflow(name: "released")
        try workflow?.add(ClosureTask(name: "A") { run in
            _ = gate.wait(timeout: workflowTimeout)
            run.finish(with: nil)
        })
        let stream = try #require(workflow?.events)
        workflow?.start()
        workflow = nil  // the run in progress keeps it alive
        let events = Task {
            var seen: [String] = []
            for await event in stream { seen.append("\(event)") }
            return seen
        }
        gate.open()
        let seen = await awaitResult { await events.value }?.successValue
        #expect(seen == ["willStart", "taskStarted(A)", "taskFinished(A)", "workflowFinished"])
    }
}

/// Counts runs by task name.
final class WorkflowRunCounter: Sendable {
    private let runs = Recorder<String>()
    func record(_ task: WorkflowTask) { runs.record(task.name) }
    var counts: [String: Int] { runs.values.reduce(into: [:]) { $0[$1, default: 0] += 1 } }
}
