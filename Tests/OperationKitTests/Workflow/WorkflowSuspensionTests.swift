@testable import OperationKit
import OperationKitTestSupport
import Testing

/// `Workflow.isSuspended`: held starts, runs that go on, cancel, start, reset and retry while
/// suspended, and waiting on a suspended workflow.
@Suite("Workflow suspension: held starts, cancel, start, reset, retry, awaiting", .offThePool)
struct WorkflowSuspensionTests {
    @Test("a suspended workflow holds its ready tasks; resuming starts them")
    func holdsAndResumes() async throws {
        let workflow = Workflow(name: "suspend.hold")
        let first = HookCountingTask(name: "A")
        let second = HookCountingTask(name: "B")
        try workflow.add(first)
        try workflow.add(second, prerequisites: [first])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        #expect(!workflow.isSuspended)
        workflow.isSuspended = true
        #expect(workflow.isSuspended)
        workflow.start()
        #expect(first.state == .ready, "held, not started")
        #expect(second.state == .pending)
        #expect(first.runs.value == 0)

        workflow.isSuspended = false
        #expect(!workflow.isSuspended)
        #expect(await reached(delegate.finished))
        #expect(first.runs.value == 1 && second.runs.value == 1)
        #expect(first.state == .finished && second.state == .finished)
        #expect(await drained(workflow.queue))
        withExtendedLifetime(delegate) {}
    }

    @Test("a run executing when the workflow is suspended finishes; the dependents it releases are held")
    func runningFinishesDependentsHeld() async throws {
        let workflow = Workflow(name: "suspend.running")
        let held = HeldRuns()
        let first = held.task("A")
        let second = HookCountingTask(name: "B")
        try workflow.add(first)
        try workflow.add(second, prerequisites: [first])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await held.started(1))
        workflow.isSuspended = true
        try #require(held.run(1)).finish(with: "a")
        #expect(first.state == .finished)
        #expect(second.state == .ready, "released by its prerequisite, held by the suspension")
        #expect(second.runs.value == 0)
        #expect(!workflow.isFinished)

        workflow.isSuspended = false
        #expect(await reached(delegate.finished))
        #expect(second.runs.value == 1)
        #expect(await drained(workflow.queue))
        withExtendedLifetime(delegate) {}
    }

    @Test("cancelling a suspended workflow cancels its held tasks: none runs after the resume")
    func cancelWhileSuspended() async throws {
        let workflow = Workflow(name: "suspend.cancel")
        let tasks = (0..<3).map { HookCountingTask(name: "T\($0)") }
        for task in tasks { try workflow.add(task) }
        workflow.isSuspended = true
        workflow.start()
        tasks[0].cancel()
        #expect(tasks[0].state == .cancelled)
        #expect(tasks[1].state == .ready)
        workflow.cancel()
        workflow.isSuspended = false
        #expect(tasks.allSatisfy { $0.state == .cancelled })
        #expect(tasks.allSatisfy { $0.runs.value == 0 })
        #expect(tasks.allSatisfy { $0.hooks.values == ["didCancel"] })
        #expect(await drained(workflow.queue))
        let outcome = try #require(await awaitResult { try await workflow.outcome(whenCancelled: .keepWaiting) })
        #expect(describeOutcome(try outcome.get()) == "cancelled(T0, T1, T2)")
    }

    @Test("starting a suspended empty workflow finishes it at once; a task started by itself is held too")
    func startWhileSuspended() async throws {
        let empty = Workflow(name: "suspend.empty")
        let emptyDelegate = RecordingWorkflowDelegate()
        empty.delegate = emptyDelegate
        empty.isSuspended = true
        empty.start()
        #expect(await reached(emptyDelegate.finished))

        let workflow = Workflow(name: "suspend.task-start")
        let task = HookCountingTask(name: "T")
        try workflow.add(task)
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.isSuspended = true
        task.start()
        workflow.start()  // held once, not twice
        #expect(task.state == .ready)
        workflow.isSuspended = false
        #expect(await reached(delegate.finished))
        #expect(task.runs.value == 1)
        #expect(await drained(workflow.queue))
        withExtendedLifetime((emptyDelegate, delegate)) {}
    }

    @Test("a reset while suspended forgets the held start: the task waits for the next start")
    func resetWhileSuspended() async throws {
        let workflow = Workflow(name: "suspend.reset")
        let task = HookCountingTask(name: "T")
        try workflow.add(task)
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.isSuspended = true
        workflow.start()
        workflow.reset()
        workflow.isSuspended = false
        #expect(task.state == .ready)
        #expect(task.runs.value == 0)
        #expect(task.hooks.values == ["didReset"])

        workflow.start()
        #expect(await reached(delegate.finished))
        #expect(task.runs.value == 1)
        #expect(await drained(workflow.queue))
        withExtendedLifetime(delegate) {}
    }

    @Test("a retry while suspended holds the retried task; it runs on resume")
    func retryWhileSuspended() async throws {
        let workflow = Workflow(name: "suspend.retry")
        let attempts = WorkflowBox(0)
        let task = HookCountingTask(name: "T") { _, run in
            let attempt = attempts.update { attempts -> Int in
                attempts += 1
                return attempts
            }
            if attempt == 1 { run.fail(with: WorkflowTestError(1)) } else { run.finish(with: "ok") }
        }
        try workflow.add(task)
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        let taskDelegate = RecordingTaskDelegate()
        task.delegate = taskDelegate
        workflow.start()
        #expect(await reached(taskDelegate.messages))
        #expect(task.state == .failed)

        workflow.isSuspended = true
        workflow.retry()
        #expect(task.state == .ready, "retried, then held")
        #expect(task.runs.value == 1)
        workflow.isSuspended = false
        #expect(await reached(delegate.finished))
        #expect(task.runs.value == 2)
        #expect(task.result as? String == "ok")
        #expect(await drained(workflow.queue))
        withExtendedLifetime((delegate, taskDelegate)) {}
    }

    @Test("awaiting a suspended workflow waits; the snapshot and the stall watchdog show it suspended; resuming ends the wait")
    func awaitingSuspended() async throws {
        let workflow = Workflow(name: "suspend.await")
        let task = HookCountingTask(name: "T")
        try workflow.add(task)
        workflow.isSuspended = true
        let waiting = Task { try await workflow.run(whenCancelled: .keepWaiting) }
        #expect(await awaitEventually { awaiterCount(workflow) == 1 })
        #expect(task.state == .ready && task.runs.value == 0)

        let snapshot = workflow.snapshot()
        #expect(snapshot.isSuspended)
        #expect(snapshot.operations.first?.blockers == [.workflowSuspended("suspend.await")])
        #expect("\(snapshot)".contains("workflow suspend.await suspended"))

        let reports = Recorder<StallReport>()
        let reported = Latch(count: 1)
        workflow.startStallWatchdog(StallWatchdogConfiguration(progressTimeout: .milliseconds(5), reportsWaitForCycles: false)) {
            reports.record($0)
            reported.countDown()
        }
        #expect(await reached(reported))
        workflow.stopStallWatchdog()
        let report = try #require(reports.values.first)
        #expect(report.snapshot.isSuspended)
        #expect(report.snapshot.operations.first?.blockers == [.workflowSuspended("suspend.await")])

        workflow.isSuspended = false
        let result = try #require(await awaitEnd(of: waiting), "the wait ends once the workflow is resumed")
        #expect(throws: Never.self) { try result.get() }
        #expect(task.runs.value == 1)
        #expect(!workflow.snapshot().isSuspended)
        #expect(await drained(workflow.queue))
    }
}
