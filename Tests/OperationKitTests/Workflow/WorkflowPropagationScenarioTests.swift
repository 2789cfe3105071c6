import OperationKit
import OperationKitTestSupport
import Testing

/// SCENARIOS.md D (40, 42–44), E (46, 47, 49) and F (51–53, 55): cancel, failure, retry and reset
/// as the workflow layer (Task.framework's rules) sees them.
@Suite("Workflow scenarios: cancel, failure, retry, reset", .offThePool)
struct WorkflowPropagationScenarioTests {
    // MARK: D. Cancel and failure

    @Test("40 cancelling A cancels its dependents B and C; each is told once (hook, task delegate, workflow delegate, event)")
    func cancelPropagates() async throws {
        let workflow = Workflow(name: "40")
        let held = HeldRuns()
        let a = held.hookTask("A")
        let b = HookCountingTask(name: "B")
        let c = HookCountingTask(name: "C")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [a])
        let delegates = [a, b, c].map { task in
            let delegate = RecordingTaskDelegate()
            task.delegate = delegate
            return delegate
        }
        let workflowDelegate = RecordingWorkflowDelegate(expecting: 3)
        workflow.delegate = workflowDelegate
        let log = WorkflowEventLog(workflow)

        workflow.start()
        #expect(await held.started())
        #expect(a.state == .executing)
        #expect(b.state == .pending && c.state == .pending)
        a.cancel()

        #expect([a, b, c].map(\.state) == [.cancelled, .cancelled, .cancelled])
        for (task, delegate) in zip([a, b, c], delegates) {
            #expect(delegate.log.values == ["cancel(\(task.name))"])
            #expect(task.hooks.values == ["didCancel"])
        }
        // Breadth first from A: A, then its dependents in the order they were added.
        #expect(workflowDelegate.log.values == ["cancel(A)", "cancel(B)", "cancel(C)"])
        #expect(await log.waitFor("taskCancelled(C)"))
        #expect(log.events == ["willStart", "taskStarted(A)", "taskCancelled(A)", "taskCancelled(B)", "taskCancelled(C)"])
        // A's run is over: its operation leaves the queue; B and C never ran.
        #expect(await drained(workflow.queue))
        #expect(b.runs.value == 0 && c.runs.value == 0)
        #expect(workflow.hasUnfinishedTasks && !workflow.hasFailedTasks && !workflow.isFinished)
        withExtendedLifetime((delegates, workflowDelegate)) {}
    }

    @Test("40 cancel reaches the dependents of a finished task, and never its prerequisites")
    func cancelPropagatesRegardless() async throws {
        let workflow = Workflow(name: "40b")
        let held = HeldRuns()
        let a = HookCountingTask(name: "A")
        let b = held.hookTask("B")
        let c = HookCountingTask(name: "C")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [b])
        workflow.start()
        #expect(await held.started())
        #expect(a.state == .finished)

        a.cancel()  // A has nothing to cancel; B and C do
        #expect(a.state == .finished)
        #expect(a.hooks.values == ["didFinish(A)"])
        #expect(b.state == .cancelled && c.state == .cancelled)

        // Cancelling a dependent leaves its prerequisite alone.
        let workflow2 = Workflow(name: "40c")
        let held2 = HeldRuns()
        let p = held2.task("P")
        let q = ClosureTask(name: "Q") { $0.finish(with: nil) }
        try workflow2.add(p)
        try workflow2.add(q, prerequisites: [p])
        workflow2.start()
        #expect(await held2.started())
        q.cancel()
        #expect(q.state == .cancelled)
        #expect(p.state == .executing)
        held2.run()?.finish(with: 1)
        #expect(p.state == .finished)
        #expect(q.state == .cancelled, "a cancelled dependent does not start when its prerequisite finishes")
        #expect(await drained(workflow2.queue))
    }

    @Test("42 cancelling the workflow: will-cancel, the executing task ends cancelled although its work then finishes")
    func workflowCancel() async throws {
        let workflow = Workflow(name: "42")
        let held = HeldRuns()
        let task = held.hookTask("T")
        let next = HookCountingTask(name: "N")
        try workflow.add(task)
        try workflow.add(next, prerequisites: [task])
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await held.started())

        workflow.cancel()
        #expect(task.state == .cancelled && next.state == .cancelled)
        // The work finishes later, through its run and through the task: both ignored.
        held.run()?.finish(with: "late")
        task.finish(with: "late too")
        #expect(task.state == .cancelled)
        #expect(task.result == nil && task.finishTime == nil)
        #expect(task.hooks.values == ["didCancel"])
        #expect(workflow.hasUnfinishedTasks)
        #expect(!workflow.hasFailedTasks)
        #expect(!workflow.isFinished)
        #expect(delegate.log.values == ["cancel(T)", "cancel(N)"])
        #expect(await log.waitFor("taskCancelled(N)"))
        #expect(log.events == ["willStart", "taskStarted(T)", "willCancel", "taskCancelled(T)", "taskCancelled(N)"])
        #expect(next.runs.value == 0)
        withExtendedLifetime(delegate) {}
    }

    @Test("43 a failed task blocks its dependent: B stays pending and never runs; one task-did-fail, carrying the task")
    func failureBlocksDependents() async throws {
        let workflow = Workflow(name: "43")
        let a = HookCountingTask(name: "A") { _, run in run.fail(with: WorkflowTestError(43)) }
        let b = HookCountingTask(name: "B")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let delegate = RecordingWorkflowDelegate(expecting: 1)
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(await drained(workflow.queue))

        #expect(a.state == .failed)
        #expect(a.error as? WorkflowTestError == WorkflowTestError(43))
        #expect(b.state == .pending)
        #expect(b.runs.value == 0)
        #expect(delegate.log.values == ["fail(A)=W43"])
        #expect(delegate.finishCount == 0)
        #expect(!workflow.isFinished)
        #expect(workflow.hasUnfinishedTasks)
        #expect(workflow.hasFailedTasks)
        #expect(await log.waitFor("taskFailed(A, W43)"))
        let carriesTask = log.rawEvents.contains { event in
            if case .taskFailed(let task, let error) = event {
                return task === a && error as? WorkflowTestError == WorkflowTestError(43)
            }
            return false
        }
        #expect(carriesTask)
        #expect(log.events == ["willStart", "taskStarted(A)", "taskFailed(A, W43)"])
        withExtendedLifetime(delegate) {}
    }

    @Test("44 a task that takes A's result as input does not run when A fails or is cancelled; with no value it decides itself")
    func inputOfFailedOrCancelledPrerequisite() async throws {
        for outcome in ["fail", "cancel", "nil"] {
            let workflow = Workflow(name: "44 \(outcome)")
            let held = HeldRuns()
            let a = held.task("A")
            let consumed = Recorder<String>()
            let b = ClosureTask(name: "B", requiredPrerequisiteKeys: ["input"]) { run in
                guard let input = run.task.prerequisiteResult(forKey: "input", as: String.self) else {
                    consumed.record("no input")
                    return run.fail(with: WorkflowTestError(44))
                }
                consumed.record(input)
                run.finish(with: input)
            }
            try workflow.add(a)
            try workflow.add(b, keyedPrerequisites: ["input": a])
            let delegate = RecordingTaskDelegate()
            b.delegate = delegate
            workflow.start()
            #expect(await held.started())
            switch outcome {
            case "fail":
                held.run()?.fail(with: WorkflowTestError(1))
                #expect(b.state == .pending)
            case "cancel":
                a.cancel()
                #expect(b.state == .cancelled)
                #expect(delegate.log.values == ["cancel(B)"])
            default:
                held.run()?.finish(with: nil)
                #expect(await reached(delegate.messages))
                #expect(b.state == .failed)
                #expect(delegate.log.values == ["fail(B)=W44"])
            }
            #expect(await drained(workflow.queue))
            #expect(consumed.values == (outcome == "nil" ? ["no input"] : []), "\(outcome)")
            withExtendedLifetime(delegate) {}
        }
    }

    // MARK: E. Retry

    @Test("46 retrying a failed task: retry then start on its own, result, error and finish time cleared, did-retry ran, it can finish")
    func retryFailedTask() async throws {
        let workflow = Workflow(name: "46")
        let held = HeldRuns()
        let task = HookCountingTask(name: "T") { task, run in
            if task.runs.value == 1 { run.fail(with: WorkflowTestError(46)) } else { held.hold(run) }
        }
        try workflow.add(task)
        let delegate = RecordingTaskDelegate()
        task.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await reached(delegate.messages))
        // Act only once the stream has the failure (the stream is told after the delegates).
        #expect(await log.waitFor("taskFailed(T, W46)"))
        #expect(task.state == .failed)
        #expect(task.error != nil && task.finishTime != nil)
        #expect(workflow.hasFailedTasks)

        task.retry()
        #expect(await held.started())
        #expect(task.state == .executing)
        #expect(task.error == nil && task.result == nil && task.finishTime == nil)
        #expect(!workflow.hasFailedTasks)
        #expect(task.hooks.values == ["didFail(W46)", "didRetry"])
        #expect(held.run()?.number == 2)

        held.run()?.finish(with: "second")
        #expect(task.state == .finished)
        #expect(task.result as? String == "second")
        #expect(task.hooks.values == ["didFail(W46)", "didRetry", "didFinish(second)"])
        #expect(await log.waitFor("workflowFinished"))
        #expect(log.events == [
            "willStart", "taskStarted(T)", "taskFailed(T, W46)",
            "taskRetried(T)", "taskStarted(T)", "taskFinished(T)", "workflowFinished",
        ])
        withExtendedLifetime(delegate) {}
    }

    @Test("47 retrying a ready task leaves it alone (it does not start) and its pending dependents unchanged")
    func retryReadyTask() async throws {
        let workflow = Workflow(name: "47")
        let a = HookCountingTask(name: "A")
        let b = HookCountingTask(name: "B")
        let c = HookCountingTask(name: "C")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [a])
        let log = WorkflowEventLog(workflow)
        a.retry()
        #expect([a, b, c].map(\.state) == [.ready, .pending, .pending])
        workflow.reset()  // a marker: its events follow everything the retry told
        #expect(await log.waitFor("taskReset(A)"))
        #expect([a, b, c].map(\.state) == [.ready, .pending, .pending])
        #expect(await drained(workflow.queue))
        #expect(a.runs.value == 0)
        #expect(log.events == ["willReset", "taskReset(A)"], "the retry told nothing")
        #expect([a, b, c].allSatisfy { !$0.hooks.values.contains("didRetry") })
    }

    @Test("47 retry propagates regardless: a root with nothing to retry still retries its cancelled dependents")
    func retryPropagatesRegardless() async throws {
        let workflow = Workflow(name: "47b")
        let a = HookCountingTask(name: "A")
        let b = HookCountingTask(name: "B")
        let c = HookCountingTask(name: "C")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [a])
        b.cancel()
        c.cancel()
        #expect([a, b, c].map(\.state) == [.ready, .cancelled, .cancelled])
        let log = WorkflowEventLog(workflow)

        a.retry()
        #expect(a.state == .ready, "A had nothing to retry and does not start")
        #expect(a.runs.value == 0)
        #expect(b.state == .pending && c.state == .pending, "retried; A has not finished")
        #expect(b.hooks.values == ["didCancel", "didRetry"])
        #expect(c.hooks.values == ["didCancel", "didRetry"])
        #expect(a.hooks.values.isEmpty)
        #expect(await log.waitFor("taskRetried(C)"))
        #expect(log.events == ["taskRetried(B)", "taskRetried(C)"])

        // Through a finished root, retry reaches a failed dependent, which starts again at once.
        let workflow2 = Workflow(name: "47c")
        let p = HookCountingTask(name: "P")
        let q = HookCountingTask(name: "Q") { task, run in
            if task.runs.value == 1 { run.fail(with: WorkflowTestError(47)) } else { run.finish(with: "ok") }
        }
        let r = HookCountingTask(name: "R")
        try workflow2.add(p)
        try workflow2.add(q, prerequisites: [p])
        try workflow2.add(r, prerequisites: [q])
        let delegate = RecordingWorkflowDelegate(expecting: 1)
        workflow2.delegate = delegate
        workflow2.start()
        #expect(await reached(delegate.messages))
        #expect(q.state == .failed && r.state == .pending)
        p.retry()
        #expect(await reached(delegate.finished))
        #expect([p, q, r].map(\.state) == [.finished, .finished, .finished])
        #expect([p, q, r].map { $0.runs.value } == [1, 2, 1])
        withExtendedLifetime(delegate) {}
    }

    @Test("49 retrying the workflow: will-retry, the failed task runs again, failed tasks = false; an empty workflow does not finish")
    func workflowRetry() async throws {
        let workflow = Workflow(name: "49")
        let held = HeldRuns()
        let task = HookCountingTask(name: "T") { task, run in
            if task.runs.value == 1 { run.fail(with: WorkflowTestError(49)) } else { held.hold(run) }
        }
        try workflow.add(task)
        let delegate = RecordingTaskDelegate()
        task.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(await log.waitFor("taskFailed(T, W49)"))
        #expect(workflow.hasFailedTasks)

        workflow.retry()
        #expect(task.state == .ready || task.state == .executing)
        #expect(!workflow.hasFailedTasks)
        #expect(await held.started())
        #expect(task.state == .executing)
        #expect(await log.waitFor("taskStarted(T)", count: 2))
        #expect(log.events == ["willStart", "taskStarted(T)", "taskFailed(T, W49)", "willRetry", "taskRetried(T)", "taskStarted(T)"])
        held.run()?.finish(with: nil)
        #expect(await log.waitFor("workflowFinished"))

        let empty = Workflow(name: "49 empty")
        let emptyDelegate = RecordingWorkflowDelegate()
        empty.delegate = emptyDelegate
        let emptyLog = WorkflowEventLog(empty)
        empty.retry()
        empty.reset()  // a marker
        #expect(await emptyLog.waitFor("willReset"))
        #expect(emptyLog.events == ["willRetry", "willReset"])
        #expect(emptyDelegate.finishCount == 0)
        withExtendedLifetime((delegate, emptyDelegate)) {}
    }

    // MARK: F. Reset

    @Test("51 resetting a finished task: ready (not started), result and finish time cleared, did-reset, unfinished again; it can run again")
    func resetFinishedTask() async throws {
        let workflow = Workflow(name: "51")
        let task = HookCountingTask(name: "T") { task, run in run.finish(with: task.runs.value) }
        try workflow.add(task)
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await reached(delegate.finished))
        let firstFinish = try #require(task.finishTime)
        #expect(task.result as? Int == 1)
        #expect(!workflow.hasUnfinishedTasks && workflow.isFinished)

        task.reset()
        #expect(task.state == .ready)
        #expect(task.result == nil && task.error == nil && task.finishTime == nil)
        #expect(task.hooks.values == ["didFinish(1)", "didReset"])
        #expect(workflow.hasUnfinishedTasks && !workflow.isFinished)
        #expect(await log.waitFor("taskReset(T)"))
        #expect(await drained(workflow.queue))
        #expect(task.runs.value == 1, "a reset task does not start by itself")
        #expect(task.state == .ready)

        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(task.result as? Int == 2)
        #expect(try #require(task.finishTime) > firstFinish)
        #expect(delegate.finishCount == 2)
        withExtendedLifetime(delegate) {}
    }

    @Test("52 reset propagates regardless: a root with nothing to reset still resets its dependents")
    func resetPropagatesRegardless() async throws {
        // The scenario as written: a ready root with two pending dependents.
        let workflow = Workflow(name: "52")
        let root = HookCountingTask(name: "R")
        let b = HookCountingTask(name: "B")
        let c = HookCountingTask(name: "C")
        try workflow.add(root)
        try workflow.add(b, prerequisites: [root])
        try workflow.add(c, prerequisites: [root])
        root.reset()
        #expect([root, b, c].map(\.state) == [.ready, .pending, .pending])
        #expect(root.hooks.values == ["didReset"])
        #expect(b.hooks.values.isEmpty && c.hooks.values.isEmpty, "a pending task has nothing to reset")

        // Observable propagation: P → R → {B, C}; R pending (P executing) has nothing to reset,
        // B and C (cancelled) do.
        let workflow2 = Workflow(name: "52b")
        let held = HeldRuns()
        let p = held.task("P")
        let r = HookCountingTask(name: "R")
        let b2 = HookCountingTask(name: "B")
        let c2 = HookCountingTask(name: "C")
        try workflow2.add(p)
        try workflow2.add(r, prerequisites: [p])
        try workflow2.add(b2, prerequisites: [r])
        try workflow2.add(c2, prerequisites: [r])
        workflow2.start()
        #expect(await held.started())
        b2.cancel()
        c2.cancel()
        let log = WorkflowEventLog(workflow2)
        r.reset()
        #expect([p.state, r.state, b2.state, c2.state] == [.executing, .pending, .pending, .pending])
        #expect(r.hooks.values.isEmpty)
        #expect(b2.hooks.values == ["didCancel", "didReset"])
        #expect(c2.hooks.values == ["didCancel", "didReset"])
        #expect(await log.waitFor("taskReset(C)"))
        #expect(log.events == ["taskReset(B)", "taskReset(C)"])
        let delegate = RecordingWorkflowDelegate()
        workflow2.delegate = delegate
        held.run()?.finish(with: nil)
        #expect(await reached(delegate.finished))
        #expect([r, b2, c2].map(\.state) == [.finished, .finished, .finished])
        withExtendedLifetime(delegate) {}
    }

    @Test("53 the 1.1 reset bug: A→B run until A finished and B failed; reset B → ready; reset A → A ready and B pending")
    func resetRegression() async throws {
        let workflow = Workflow(name: "53")
        let a = HookCountingTask(name: "A")
        let b = HookCountingTask(name: "B") { _, run in run.fail(with: WorkflowTestError(53)) }
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await log.waitFor("taskFailed(B, W53)"))
        #expect(a.state == .finished && b.state == .failed)

        b.reset()
        #expect(b.state == .ready, "A is finished")
        #expect(a.state == .finished)
        a.reset()
        #expect(a.state == .ready)
        #expect(b.state == .pending, "B's prerequisite is no longer finished")
        #expect(await drained(workflow.queue))
        #expect(a.runs.value == 1 && b.runs.value == 1, "nothing started")

        // And B still waits for A: started again, A runs first, then B.
        #expect(b.state == .pending)
        b.start()
        #expect(b.runs.value == 1, "a pending task does not start")
        workflow.start()
        #expect(await log.waitFor("taskFailed(B, W53)", count: 2))
        #expect(a.runs.value == 2 && b.runs.value == 2)
        #expect(log.events.suffix(5) == ["willStart", "taskStarted(A)", "taskFinished(A)", "taskStarted(B)", "taskFailed(B, W53)"])
    }

    @Test("55 resetting a finished workflow: will-reset, tasks pending or ready, unfinished tasks = true")
    func workflowReset() async throws {
        let workflow = Workflow(name: "55")
        let a = HookCountingTask(name: "A")
        let b = HookCountingTask(name: "B")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await log.waitFor("workflowFinished"))
        #expect(!workflow.hasUnfinishedTasks)

        workflow.reset()
        #expect(a.state == .ready)
        #expect(b.state == .pending)
        #expect(workflow.hasUnfinishedTasks)
        #expect(!workflow.isFinished)
        #expect(a.result == nil && b.result == nil)
        #expect(await log.waitFor("taskReset(B)"))
        #expect(log.events == [
            "willStart", "taskStarted(A)", "taskFinished(A)", "taskStarted(B)", "taskFinished(B)", "workflowFinished",
            "willReset", "taskReset(A)", "taskReset(B)",
        ])
    }
}
