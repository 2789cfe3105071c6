import OperationKit
import OperationKitTestSupport
import Testing

/// SCENARIOS.md I (69–72, ExternalConditionTask) and J (73–76, SubworkflowTask), and MethodTask.
@Suite("Workflow task kinds: external conditions, sub-workflows, methods", .offThePool)
struct WorkflowTaskKindTests {
    // MARK: I. External conditions

    @Test("69 an unfulfilled external condition fails when started, with externalConditionNotFulfilled")
    func unfulfilled() async throws {
        let workflow = Workflow(name: "69")
        let condition = ExternalConditionTask(name: "E")
        try workflow.add(condition)
        let delegate = RecordingTaskDelegate()
        condition.delegate = delegate
        #expect(!condition.isFulfilled)
        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(condition.state == .failed)
        let error = try #require(condition.error as? OperationError)
        #expect(error.code == .externalConditionNotFulfilled)
        #expect(error.operationNames == ["E"])
        withExtendedLifetime(delegate) {}
    }

    @Test("70 fulfilled after failing: it retries, finishes with R and its dependents start; a second fulfilment is ignored")
    func fulfilledLater() async throws {
        let workflow = Workflow(name: "70")
        let condition = ExternalConditionTask(name: "E")
        let dependent = HookCountingTask(name: "D") { task, run in run.finish(with: task.anyPrerequisiteResult) }
        try workflow.add(condition)
        try workflow.add(dependent, prerequisites: [condition])
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await delegate.received(1))
        #expect(await log.waitFor(prefix: "taskFailed(E"))
        #expect(condition.state == .failed)
        #expect(dependent.state == .pending)

        condition.fulfill(with: "R")
        #expect(condition.isFulfilled)
        #expect(await reached(delegate.finished))
        #expect(condition.state == .finished)
        #expect(condition.result as? String == "R")
        #expect(dependent.result as? String == "R")
        #expect(dependent.runs.value == 1)
        #expect(await log.waitFor("workflowFinished"))
        let afterFailure = log.events.drop { !$0.hasPrefix("taskFailed(E") }.dropFirst()
        #expect(Array(afterFailure.prefix(3)) == ["taskRetried(E)", "taskStarted(E)", "taskFinished(E)"], "\(log.events)")

        condition.fulfill(with: "S")
        #expect(condition.result as? String == "R")
        #expect(condition.state == .finished)
        #expect(await drained(workflow.queue))
        #expect(dependent.runs.value == 1)
        #expect(delegate.finishCount == 1)
        withExtendedLifetime(delegate) {}
    }

    @Test("71 fulfilled while ready and never started: it starts and finishes without an explicit start")
    func fulfilledWhileReady() async throws {
        let workflow = Workflow(name: "71")
        let condition = ExternalConditionTask(name: "E")
        try workflow.add(condition)
        let delegate = RecordingTaskDelegate()
        condition.delegate = delegate
        #expect(condition.state == .ready)
        condition.fulfill(with: 71)
        #expect(await reached(delegate.messages))
        #expect(condition.state == .finished)
        #expect(condition.result as? Int == 71)
        #expect(delegate.log.values == ["finish(E)=71"])
        withExtendedLifetime(delegate) {}
    }

    @Test("71 fulfilled while pending: it finishes with the value once its prerequisite finishes")
    func fulfilledWhilePending() async throws {
        let workflow = Workflow(name: "71b")
        let held = HeldRuns()
        let p = held.task("P")
        let condition = ExternalConditionTask(name: "E")
        try workflow.add(p)
        try workflow.add(condition, prerequisites: [p])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await held.started())
        condition.fulfill(with: "early")
        #expect(condition.state == .pending)
        held.run()?.finish(with: nil)
        #expect(await reached(delegate.finished))
        #expect(condition.result as? String == "early")
        withExtendedLifetime(delegate) {}
    }

    @Test("72 reset clears the fulfilment: unfulfilled again, starting it fails")
    func resetClearsFulfilment() async throws {
        let workflow = Workflow(name: "72")
        let condition = ExternalConditionTask(name: "E")
        try workflow.add(condition)
        let delegate = RecordingTaskDelegate(expecting: 2)
        condition.delegate = delegate
        condition.fulfill(with: "R")
        #expect(await delegate.received(1))
        #expect(condition.state == .finished)

        condition.reset()
        #expect(!condition.isFulfilled)
        #expect(condition.state == .ready)
        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(condition.state == .failed)
        #expect((condition.error as? OperationError)?.code == .externalConditionNotFulfilled)
        // Fulfilling it now counts again.
        condition.fulfill(with: "again")
        #expect(await drained(workflow.queue))
        #expect(condition.result as? String == "again")
        withExtendedLifetime(delegate) {}
    }

    @Test("72 reset clears the fulfilment of a pending condition too (Task.framework's -reset always clears it)")
    func resetClearsFulfilmentOfPendingCondition() async throws {
        let workflow = Workflow(name: "72b")
        let held = HeldRuns()
        let p = held.task("P")
        let condition = ExternalConditionTask(name: "E")
        try workflow.add(p)
        try workflow.add(condition, prerequisites: [p])
        workflow.start()
        #expect(await held.started())
        condition.fulfill(with: "stale")
        #expect(condition.state == .pending)

        // The user resets the workflow before the condition ran: the fulfilment must not survive.
        workflow.reset()
        #expect(condition.state == .pending)
        #expect(!condition.isFulfilled, "ExternalConditionTask: reset() left a pending condition fulfilled")
        condition.reset()
        #expect(!condition.isFulfilled, "ExternalConditionTask: reset() of a pending condition did not clear the fulfilment")

        // Consequence: run again, the condition finishes with the stale value instead of failing.
        let delegate = RecordingTaskDelegate()
        condition.delegate = delegate
        workflow.start()
        #expect(await held.started(2))
        held.run(2)?.finish(with: nil)
        #expect(await reached(delegate.messages))
        #expect(condition.state == .failed, "an unfulfilled condition fails when it runs")
        withExtendedLifetime(delegate) {}
    }

    // MARK: J. Sub-workflows

    /// A parent workflow with one sub-workflow task S and a dependent Z.
    private func makeParent(of subworkflow: Workflow, name: String) throws -> (Workflow, SubworkflowTask, HookCountingTask) {
        let parent = Workflow(name: name)
        let step = SubworkflowTask(name: "S", subworkflow: subworkflow)
        let after = HookCountingTask(name: "Z")
        try parent.add(step)
        try parent.add(after, prerequisites: [step])
        return (parent, step, after)
    }

    @Test("73 started, the sub-workflow starts; when it finishes, the task finishes with the sub-workflow as its result")
    func subworkflowSuccess() async throws {
        let sub = Workflow(name: "73 sub")
        let heldX = HeldRuns()
        let x = heldX.task("X")
        let y = HookCountingTask(name: "Y")
        try sub.add(x)
        try sub.add(y, prerequisites: [x])
        let (parent, step, after) = try makeParent(of: sub, name: "73")
        #expect(step.subworkflow === sub)
        let delegate = RecordingWorkflowDelegate()
        parent.delegate = delegate
        parent.start()
        #expect(await heldX.started())
        #expect(step.state == .executing)
        heldX.run()?.finish(with: nil)
        #expect(await reached(delegate.finished))
        #expect(step.state == .finished)
        #expect(step.result as? Workflow === sub)
        #expect(after.runs.value == 1)
        #expect(y.runs.value == 1)
        withExtendedLifetime(delegate) {}
    }

    @Test("73 an empty sub-workflow, or one that finished before the parent started: the task finishes at once")
    func subworkflowAlreadyDone() async throws {
        let empty = Workflow(name: "73 empty")
        let (parent, step, _) = try makeParent(of: empty, name: "73b")
        let delegate = RecordingWorkflowDelegate()
        parent.delegate = delegate
        parent.start()
        #expect(await reached(delegate.finished))
        #expect(step.result as? Workflow === empty)

        let done = Workflow(name: "73 done")
        let x = HookCountingTask(name: "X")
        try done.add(x)
        let doneDelegate = RecordingWorkflowDelegate()
        done.delegate = doneDelegate
        done.start()
        #expect(await reached(doneDelegate.finished))
        let (parent2, step2, _) = try makeParent(of: done, name: "73c")
        let delegate2 = RecordingWorkflowDelegate()
        parent2.delegate = delegate2
        parent2.start()
        #expect(await reached(delegate2.finished))
        #expect(step2.result as? Workflow === done)
        #expect(x.runs.value == 1, "the finished sub-workflow was not run again")
        withExtendedLifetime((delegate, doneDelegate, delegate2)) {}
    }

    @Test("74 a sub-task failing while the parent runs fails the parent with that error")
    func subworkflowFailure() async throws {
        let sub = Workflow(name: "74 sub")
        let held = HeldRuns()
        let f = held.task("F")
        try sub.add(f)
        let (parent, step, after) = try makeParent(of: sub, name: "74")
        let delegate = RecordingWorkflowDelegate()
        parent.delegate = delegate
        parent.start()
        #expect(await held.started())
        held.run()?.fail(with: WorkflowTestError(74))
        #expect(await reached(delegate.messages))
        #expect(step.state == .failed)
        #expect(step.error as? WorkflowTestError == WorkflowTestError(74))
        #expect(after.state == .pending)
        #expect(delegate.log.values == ["fail(S)=W74"])
        withExtendedLifetime(delegate) {}
    }

    @Test("74 a sub-workflow that already has failed tasks: the parent fails at once with the earliest failure's error")
    func subworkflowEarliestFailure() async throws {
        let sub = Workflow(name: "74 earliest sub")
        let heldLate = HeldRuns()
        let heldEarly = HeldRuns()
        let late = heldLate.task("Late")  // added first, fails second
        let early = heldEarly.task("Early")
        let untouched = HookCountingTask(name: "U")
        try sub.add(late)
        try sub.add(early)
        try sub.add(untouched, prerequisites: [late, early])
        sub.start()
        #expect(await heldLate.started())
        #expect(await heldEarly.started())
        heldEarly.run()?.fail(with: WorkflowTestError(1))
        heldLate.run()?.fail(with: WorkflowTestError(2))
        #expect(try #require(early.finishTime) < #require(late.finishTime))

        let (parent, step, _) = try makeParent(of: sub, name: "74b")
        let delegate = RecordingWorkflowDelegate()
        parent.delegate = delegate
        parent.start()
        #expect(await reached(delegate.messages))
        #expect(step.state == .failed)
        #expect(step.error as? WorkflowTestError == WorkflowTestError(1))
        #expect(heldLate.count == 1 && heldEarly.count == 1, "the sub-workflow was not started again")
        withExtendedLifetime(delegate) {}
    }

    @Test("75 a sub-workflow with a cancelled task and no failed one: the parent is cancelled, the sub-workflow left alone")
    func subworkflowCancelledTask() async throws {
        let sub = Workflow(name: "75 sub")
        let cancelled = HookCountingTask(name: "C")
        let other = HookCountingTask(name: "O")
        try sub.add(cancelled)
        try sub.add(other)
        cancelled.cancel()
        let (parent, step, after) = try makeParent(of: sub, name: "75")
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        parent.delegate = delegate
        parent.start()
        #expect(await reached(delegate.messages))
        #expect(step.state == .cancelled)
        #expect(after.state == .cancelled)
        #expect(delegate.log.values == ["cancel(S)", "cancel(Z)"])
        #expect(other.state == .ready, "the sub-workflow was neither started nor cancelled")
        #expect(other.runs.value == 0)
        withExtendedLifetime(delegate) {}
    }

    @Test("75 failed and cancelled sub-tasks: failure wins, the parent fails")
    func subworkflowFailureWins() async throws {
        let sub = Workflow(name: "75b sub")
        let f = HookCountingTask(name: "F") { _, run in run.fail(with: WorkflowTestError(75)) }
        let c = HookCountingTask(name: "C")
        try sub.add(f)
        try sub.add(c)
        c.cancel()
        sub.start()  // F fails
        #expect(await drained(sub.queue))
        #expect(f.state == .failed)
        let (parent, step, _) = try makeParent(of: sub, name: "75b")
        let delegate = RecordingWorkflowDelegate()
        parent.delegate = delegate
        parent.start()
        #expect(await reached(delegate.messages))
        #expect(step.state == .failed)
        #expect(step.error as? WorkflowTestError == WorkflowTestError(75))
        withExtendedLifetime(delegate) {}
    }

    @Test("75 a task cancelled inside the running sub-workflow cancels the parent")
    func subworkflowCancelWhileRunning() async throws {
        let sub = Workflow(name: "75c sub")
        let held = HeldRuns()
        let x = held.task("X")
        try sub.add(x)
        let (parent, step, after) = try makeParent(of: sub, name: "75c")
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        parent.delegate = delegate
        parent.start()
        #expect(await held.started())
        x.cancel()
        #expect(await reached(delegate.messages))
        #expect(step.state == .cancelled && after.state == .cancelled)
        #expect(delegate.log.values == ["cancel(S)", "cancel(Z)"])
        // Retrying the parent retries the sub-workflow, which runs to the end.
        step.retry()
        #expect(await held.started(2))
        held.run(2)?.finish(with: nil)
        #expect(await reached(delegate.finished))
        #expect(step.state == .finished && after.state == .finished)
        withExtendedLifetime(delegate) {}
    }

    @Test("76 cancelling the sub-workflow task cancels the running sub-workflow")
    func cancelReachesSubworkflow() async throws {
        let sub = Workflow(name: "76 sub")
        let held = HeldRuns()
        let x = held.task("X")
        let y = HookCountingTask(name: "Y")
        try sub.add(x)
        try sub.add(y, prerequisites: [x])
        let subLog = WorkflowEventLog(sub)
        let (parent, step, after) = try makeParent(of: sub, name: "76")
        parent.start()
        #expect(await held.started())
        parent.cancel()
        #expect(step.state == .cancelled && after.state == .cancelled)
        #expect(x.state == .cancelled && y.state == .cancelled)
        #expect(await subLog.waitFor("taskCancelled(Y)"))
        #expect(subLog.events.contains("willCancel"))
        held.run()?.finish(with: nil)
        #expect(x.state == .cancelled)
    }

    @Test("76 reset reaches the sub-workflow: after a reset both are ready")
    func resetReachesSubworkflow() async throws {
        let sub = Workflow(name: "76b sub")
        let x = HookCountingTask(name: "X")
        try sub.add(x)
        let (parent, step, after) = try makeParent(of: sub, name: "76b")
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        parent.delegate = delegate
        parent.start()
        #expect(await reached(delegate.finished))
        #expect(x.state == .finished)
        step.reset()
        #expect(step.state == .ready)
        #expect(x.state == .ready)
        #expect(after.state == .pending)
        #expect(step.result == nil)
        // And it runs again.
        parent.start()
        #expect(await reached(delegate.messages))
        #expect(x.runs.value == 2)
        withExtendedLifetime(delegate) {}
    }

    @Test("76 retry reaches the sub-workflow: after retrying a failing sub-task, both fail again")
    func retryReachesSubworkflow() async throws {
        let sub = Workflow(name: "76c sub")
        let f = HookCountingTask(name: "F") { task, run in run.fail(with: WorkflowTestError(task.runs.value)) }
        try sub.add(f)
        let (parent, step, _) = try makeParent(of: sub, name: "76c")
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        parent.delegate = delegate
        parent.start()
        #expect(await delegate.received(1))
        #expect(step.state == .failed)
        step.retry()
        #expect(await reached(delegate.messages))
        #expect(f.runs.value == 2)
        #expect(step.state == .failed)
        #expect(f.state == .failed)
        #expect(delegate.log.values == ["fail(S)=W1", "fail(S)=W2"])
        withExtendedLifetime(delegate) {}
    }

    @Test("76 cancelling a failed sub-workflow task still cancels its sub-workflow's running tasks (Task.framework cancels the sub-workflow first, always)")
    func cancelFailedParentReachesSubworkflow() async throws {
        let sub = Workflow(name: "76d sub")
        let held = HeldRuns()
        let f = HookCountingTask(name: "F") { _, run in run.fail(with: WorkflowTestError(76)) }
        let y = held.task("Y")
        try sub.add(y)
        try sub.add(f)
        let (parent, step, _) = try makeParent(of: sub, name: "76d")
        let delegate = RecordingWorkflowDelegate()
        parent.delegate = delegate
        parent.start()
        #expect(await held.started())
        #expect(await reached(delegate.messages))
        #expect(step.state == .failed)
        #expect(y.state == .executing)

        parent.cancel()
        #expect(y.state == .cancelled, "SubworkflowTask: cancelling a failed task did not cancel its sub-workflow")
        held.run()?.finish(with: nil)
        withExtendedLifetime(delegate) {}
    }

    // MARK: MethodTask

    final class Store: Sendable {
        let calls = Recorder<String>()
        func sync(_ run: WorkflowTaskRun) {
            calls.record("sync run \(run.number) of \(run.task.name), input \(run.task.prerequisiteResult(forKey: "input") ?? "none")")
            run.finish(with: calls.values.count)
        }
    }

    @Test("MethodTask calls the target's method with the run; required keys are checked; the target is held")
    func methodTask() async throws {
        let workflow = Workflow(name: "method")
        let input = ClosureTask(name: "In") { $0.finish(with: "data") }
        var store: Store? = Store()
        weak let weakStore = store
        let task = MethodTask(name: "sync", target: store!, method: Store.sync(_:), requiredPrerequisiteKeys: ["input"])
        let calls = store!.calls
        store = nil
        #expect(weakStore != nil, "the task holds its target")
        #expect(task.target === weakStore)
        try workflow.add(input)
        #expect(throws: OperationError.self) { try workflow.add(task, prerequisites: [input]) }
        try workflow.add(task, keyedPrerequisites: ["input": input])
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        workflow.delegate = delegate
        workflow.start()
        #expect(await reached(delegate.finished))
        #expect(calls.values == ["sync run 1 of sync, input data"])
        #expect(task.result as? Int == 1)
        task.reset()
        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(calls.values.last == "sync run 2 of sync, input data")
        withExtendedLifetime(delegate) {}
    }

    // MARK: ClosureTask

    @Test("a ClosureTask's closure gets the run being executed: the one currentRun gives inside it, on every run")
    func closureGetsExecutingRun() async throws {
        let workflow = Workflow(name: "closure run")
        let seen = Recorder<String>()
        let task = ClosureTask(name: "C") { run in
            let current = run.task.currentRun
            seen.record("\(run.number)=\(current.number) \(run.task === current.task)")
            run.finish(with: run.number)
        }
        try workflow.add(task)
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        workflow.delegate = delegate
        workflow.start()
        #expect(await delegate.received(1))
        task.reset()
        workflow.start()
        #expect(await delegate.received(2))
        #expect(seen.values == ["1=1 true", "2=2 true"])
        #expect(task.result as? Int == 2)
        withExtendedLifetime(delegate) {}
    }
}
