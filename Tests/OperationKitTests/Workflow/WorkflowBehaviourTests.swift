import OperationKit
import OperationKitTestSupport
import Testing

/// Runs that are over, delegates, the event stream, re-running, and rendering.
@Suite("Workflow behaviour: runs, delegates, events, re-running, rendering", .offThePool)
struct WorkflowBehaviourTests {
    // MARK: Runs that are over

    @Test("a late finish or fail from a cancelled run is ignored, also once a newer run executes or has finished")
    func lateFinishAfterCancel() async throws {
        let workflow = Workflow(name: "late cancel")
        let held = HeldRuns()
        let task = held.hookTask("T")
        try workflow.add(task)
        let delegate = RecordingTaskDelegate()
        task.delegate = delegate
        workflow.start()
        #expect(await held.started(1))
        let first = try #require(held.run(1))
        #expect(first.number == 1)
        #expect(first.task === task)
        #expect(task.currentRun.number == 1)

        task.cancel()
        task.retry()
        #expect(await held.started(2))
        let second = try #require(held.run(2))
        #expect(second.number == 2)
        #expect(task.currentRun.number == 2)

        first.finish(with: "late")
        first.fail(with: WorkflowTestError(1))
        #expect(task.state == .executing)
        #expect(task.result == nil && task.error == nil && task.finishTime == nil)

        second.finish(with: "second")
        #expect(task.state == .finished)
        first.finish(with: "later")
        first.fail(with: WorkflowTestError(2))
        #expect(task.result as? String == "second")
        #expect(task.error == nil)
        #expect(task.hooks.values == ["didCancel", "didRetry", "didFinish(second)"])
        #expect(delegate.log.values == ["cancel(T)", "finish(T)=second"])
        // Run 1's operation was ended by the cancel: the queue drains.
        #expect(await drained(workflow.queue))
        withExtendedLifetime(delegate) {}
    }

    @Test("a late finish or fail from a reset run is ignored after the task is started again")
    func lateFinishAfterReset() async throws {
        let workflow = Workflow(name: "late reset")
        let held = HeldRuns()
        let task = held.hookTask("T")
        let dependent = HookCountingTask(name: "D")
        try workflow.add(task)
        try workflow.add(dependent, prerequisites: [task])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await held.started(1))
        let first = try #require(held.run(1))

        task.reset()
        #expect(task.state == .ready)
        first.finish(with: "late")
        #expect(task.state == .ready, "a reset run cannot finish the task")
        #expect(dependent.runs.value == 0)

        workflow.start()
        #expect(await held.started(2))
        first.finish(with: "late")
        first.fail(with: WorkflowTestError(1))
        #expect(task.state == .executing)
        #expect(dependent.runs.value == 0)
        held.run(2)?.finish(with: "second")
        #expect(await reached(delegate.finished))
        #expect(task.result as? String == "second")
        #expect(dependent.runs.value == 1)
        #expect(task.hooks.values == ["didReset", "didFinish(second)"])
        #expect(await drained(workflow.queue))
        withExtendedLifetime(delegate) {}
    }

    @Test("finishing through the task (not the run) finishes whatever run is current, as documented")
    func finishThroughTheTask() async throws {
        let workflow = Workflow(name: "through task")
        let held = HeldRuns()
        let task = held.task("T")
        try workflow.add(task)
        workflow.start()
        #expect(await held.started(1))
        task.cancel()
        task.finish(with: "ignored")
        #expect(task.state == .cancelled)
        task.retry()
        #expect(await held.started(2))
        task.finish(with: "current")
        #expect(task.state == .finished)
        #expect(task.result as? String == "current")
    }

    @Test("a run cancelled or reset before its operation executes never calls main(), and its operation leaves the queue")
    func runOverBeforeItExecutes() async throws {
        let queue = ConcurrentOperationQueue(name: "suspended")
        queue.isSuspended = true
        let workflow = Workflow(name: "before execute", queue: queue)
        let numbers = Recorder<Int>()
        let cancelled = HookCountingTask(name: "C") { _, run in numbers.record(run.number) }
        let reset = HookCountingTask(name: "R") { _, run in
            numbers.record(run.number * 10)
            run.finish(with: run.number)
        }
        try workflow.add(cancelled)
        try workflow.add(reset)
        workflow.start()
        #expect(cancelled.state == .executing && reset.state == .executing)
        #expect(queue.operationCount == 2)
        cancelled.cancel()
        reset.reset()
        workflow.start()  // R's run 2
        #expect(reset.state == .executing)
        #expect(queue.operationCount == 3)
        queue.isSuspended = false
        #expect(await drained(queue))
        #expect(cancelled.runs.value == 0)
        #expect(cancelled.state == .cancelled)
        #expect(reset.runs.value == 1)
        #expect(numbers.values == [20], "only R's second run executed")
        #expect(reset.result as? Int == 2)
    }

    @Test("a task in no workflow ignores start, finish, fail, cancel, retry and reset; its current run is 0")
    func taskOutsideAWorkflow() {
        let task = HookCountingTask(name: "lonely")
        #expect(task.currentRun.number == 0)
        task.start()
        task.finish(with: 1)
        task.fail(with: WorkflowTestError(1))
        task.cancel()
        task.retry()
        task.reset()
        task.currentRun.finish(with: 2)
        #expect(task.state == .ready)
        #expect(task.result == nil && task.error == nil)
        #expect(task.runs.value == 0)
        #expect(task.hooks.values.isEmpty)
        #expect(task.anyPrerequisiteResult == nil && task.allPrerequisiteResults.isEmpty)
    }

    // MARK: Delegates

    @Test("task and workflow delegates get exactly one message per event: finish, fail, cancel")
    func delegatesOneMessagePerEvent() async throws {
        let workflow = Workflow(name: "delegates")
        let held = HeldRuns()
        let a = ClosureTask(name: "A") { $0.finish(with: "a") }
        let b = ClosureTask(name: "B") { $0.fail(with: WorkflowTestError(2)) }
        let c = held.task("C")
        let d = HookCountingTask(name: "D")
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c)
        try workflow.add(d, prerequisites: [b])
        let taskDelegates = [a, b, c, d].map { task in
            let delegate = RecordingTaskDelegate()
            task.delegate = delegate
            return delegate
        }
        #expect(a.delegate === taskDelegates[0])
        let workflowDelegate = RecordingWorkflowDelegate(expecting: 3)
        workflow.delegate = workflowDelegate
        #expect(workflow.delegate === workflowDelegate)
        workflow.start()
        #expect(await reached(taskDelegates[0].messages))
        #expect(await reached(taskDelegates[1].messages))
        // B's fail tells the workflow's delegate on B's thread after B's own delegate: wait for
        // that message too, or the cancel below (told on this thread) may overtake it.
        #expect(await workflowDelegate.received(1))
        #expect(await held.started())
        workflow.cancel()
        #expect(await reached(workflowDelegate.messages))

        #expect(taskDelegates.map(\.log.values) == [["finish(A)=a"], ["fail(B)=W2"], ["cancel(C)"], ["cancel(D)"]])
        #expect(workflowDelegate.log.values == ["fail(B)=W2", "cancel(C)", "cancel(D)"])
        #expect(d.runs.value == 0)
        // Nothing more arrives: cancelling, retrying or resetting again tells only what changes.
        workflow.cancel()
        #expect(workflowDelegate.log.values.count == 3)
        #expect(taskDelegates.map(\.log.values.count) == [1, 1, 1, 1])
        withExtendedLifetime((taskDelegates, workflowDelegate)) {}
    }

    @Test("delegates are held weakly")
    func delegatesAreWeak() throws {
        let workflow = Workflow(name: "weak")
        let task = ClosureTask(name: "T") { $0.finish(with: nil) }
        try workflow.add(task)
        var workflowDelegate: RecordingWorkflowDelegate? = RecordingWorkflowDelegate()
        var taskDelegate: RecordingTaskDelegate? = RecordingTaskDelegate()
        workflow.delegate = workflowDelegate
        task.delegate = taskDelegate
        #expect(workflow.delegate != nil && task.delegate != nil)
        workflowDelegate = nil
        taskDelegate = nil
        #expect(workflow.delegate == nil)
        #expect(task.delegate == nil)
        _ = (workflowDelegate, taskDelegate)
    }

    // MARK: Events

    @Test("the event stream sees willStart, then each task started and finished in order, then workflowFinished")
    func eventsOfAChain() async throws {
        let workflow = Workflow(name: "events")
        let a = ClosureTask(name: "A") { $0.finish(with: 1) }
        let b = ClosureTask(name: "B") { $0.finish(with: 2) }
        let c = ClosureTask(name: "C") { $0.finish(with: 3) }
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [b])
        let log = WorkflowEventLog(workflow)
        let second = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await log.waitFor("workflowFinished"))
        let expected = [
            "willStart", "taskStarted(A)", "taskFinished(A)", "taskStarted(B)", "taskFinished(B)",
            "taskStarted(C)", "taskFinished(C)", "workflowFinished",
        ]
        #expect(log.events == expected)
        #expect(await second.waitFor("workflowFinished"))
        #expect(second.events == expected, "every stream gets every event")
        // The finished events carry the task and its result.
        let results = log.rawEvents.compactMap { event -> String? in
            if case .taskFinished(let task, let result) = event { return "\(task.name)=\(result as? Int ?? -1)" }
            return nil
        }
        #expect(results == ["A=1", "B=2", "C=3"])
    }

    @Test("a stream subscribed later sees only later events; streams end when the workflow is released")
    func streamLifetime() async throws {
        var workflow: Workflow? = Workflow(name: "stream lifetime")
        let task = ClosureTask(name: "T") { $0.finish(with: nil) }
        try workflow?.add(task)
        let early = WorkflowEventLog(workflow!)
        workflow?.start()
        #expect(await early.waitFor("workflowFinished"))
        let late = WorkflowEventLog(workflow!)
        workflow?.reset()
        #expect(await late.waitFor("taskReset(T)"))
        #expect(late.events == ["willReset", "taskReset(T)"])

        let stream = workflow!.events
        let ended = Latch()
        let consumer = Task {
            for await _ in stream {}
            ended.countDown()
        }
        weak let weakWorkflow = workflow
        workflow = nil
        #expect(weakWorkflow == nil, "nothing else holds a workflow that is not running")
        #expect(await reached(ended))
        consumer.cancel()
    }

    @Test("event descriptions name the event and the task")
    func eventDescriptions() {
        let task = ClosureTask(name: "T") { $0.finish(with: nil) }
        let events: [WorkflowEvent] = [
            .willStart, .willCancel, .willRetry, .willReset, .taskStarted(task), .taskFinished(task, result: 1),
            .taskFailed(task, error: WorkflowTestError(3)), .taskCancelled(task), .taskRetried(task), .taskReset(task),
            .workflowFinished,
        ]
        #expect(events.map(\.description) == [
            "willStart", "willCancel", "willRetry", "willReset", "taskStarted(T)", "taskFinished(T)",
            "taskFailed(T, W3)", "taskCancelled(T)", "taskRetried(T)", "taskReset(T)", "workflowFinished",
        ])
    }

    // MARK: Re-running

    @Test("a finished workflow, reset and started again, runs every task again with new results")
    func rerun() async throws {
        let workflow = Workflow(name: "rerun")
        let a = HookCountingTask(name: "A") { task, run in run.finish(with: "A\(task.runs.value)") }
        let b = HookCountingTask(name: "B") { task, run in
            run.finish(with: "\(task.anyPrerequisiteResult ?? "none")+B\(task.runs.value)")
        }
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await reached(delegate.finished))
        #expect(b.result as? String == "A1+B1")
        let firstFinish = try #require(b.finishTime)

        workflow.reset()
        #expect(!workflow.isFinished)
        #expect(a.state == .ready && b.state == .pending)
        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(a.result as? String == "A2")
        #expect(b.result as? String == "A2+B2")
        #expect(try #require(b.finishTime) > firstFinish)
        #expect(delegate.finishCount == 2)
        #expect(workflow.isFinished)
        #expect(await log.waitFor("workflowFinished", count: 2))
        #expect(log.events.filter { $0.hasPrefix("taskStarted") } == [
            "taskStarted(A)", "taskStarted(B)", "taskStarted(A)", "taskStarted(B)",
        ])
        withExtendedLifetime(delegate) {}
    }

    @Test("starting a finished workflow again does nothing until it is reset")
    func startFinishedWorkflow() async throws {
        let workflow = Workflow(name: "start twice")
        let a = HookCountingTask(name: "A")
        try workflow.add(a)
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await log.waitFor("workflowFinished"))
        workflow.start()
        workflow.reset()  // a marker
        #expect(await log.waitFor("taskReset(A)"))
        #expect(log.events == ["willStart", "taskStarted(A)", "taskFinished(A)", "workflowFinished", "willStart", "willReset", "taskReset(A)"])
        #expect(a.runs.value == 1)
        #expect(delegate.finishCount == 1)
        withExtendedLifetime(delegate) {}
    }

    /// Resets the task as soon as its delegate hears it finished.
    final class ResettingDelegate: WorkflowTaskDelegate {
        func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?) { task.reset() }
    }

    @Test("a delegate reacting to a message does not put the event stream out of order: its last event agrees with the final state")
    func eventsStayInOrderWhenADelegateReacts() async throws {
        let workflow = Workflow(name: "reacting delegate")
        let task = ClosureTask(name: "T") { $0.finish(with: 1) }
        try workflow.add(task)
        let delegate = ResettingDelegate()
        task.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await log.waitFor("workflowFinished"))
        #expect(await log.waitFor("taskReset(T)"))
        // The task finished (and with it the workflow), then the delegate reset it.
        #expect(task.state == .ready)
        #expect(!workflow.isFinished)
        #expect(log.events == ["willStart", "taskStarted(T)", "taskFinished(T)", "workflowFinished", "taskReset(T)"],
                "the stream tells the reset before the finish it reacted to")
        withExtendedLifetime(delegate) {}
    }
}
