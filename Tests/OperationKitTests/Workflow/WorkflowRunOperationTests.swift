// When a run gives back its place on the queue: a runner goes on to the next run once main()
// returns for a run ended on its own thread; a run ended elsewhere frees its runner's place at the
// end of that change.

import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Workflow runners: when a run's place on the queue is freed", .offThePool)
struct WorkflowRunOperationTests {
    @Test("a run finished inside main() keeps its place until main() returns, then hands it to the dependent")
    func finishedInsideMainKeepsItsOperation() async throws {
        let queue = try ConcurrentOperationQueue(name: "one at a time", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "finish inside main", queue: queue)
        let finished = Latch()
        let release = Gate()
        let first = ClosureTask(name: "first") { run in
            run.finish(with: 1)
            finished.countDown()
            _ = release.wait()
        }
        let second = ClosureTask(name: "second") { run in run.finish(with: 2) }
        try workflow.add(first)
        try workflow.add(second, prerequisites: [first])
        workflow.start()
        #expect(await finished.opened(within: workflowTimeout))
        #expect(first.state == .finished)
        // The dependent's run is started and was handed to first's runner by first's finish: it
        // waits for first's main() to return, in the place first held. No other runner is made.
        #expect(second.state == .executing)
        #expect(queue.operationCount == 1)
        #expect(workflow.snapshot().operations.first { $0.name == "second" }?.sinceStarted != nil)
        release.open()
        #expect(await drained(queue))
        #expect(second.state == .finished)
        #expect(second.result as? Int == 2)
        #expect(workflow.isFinished)
    }

    @Test("an asynchronous run cancelled from another thread frees its place at once")
    func cancelledElsewhereFreesItsPlace() async throws {
        let queue = try ConcurrentOperationQueue(name: "one at a time", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "cancel an asynchronous run", queue: queue)
        let entered = Latch()
        let held = Recorder<WorkflowTaskRun>()
        // main() returns without finishing: the run goes on (its runner keeps the only place).
        let pending = ClosureTask(name: "pending") { run in
            held.record(run)
            entered.countDown()
        }
        let otherRan = Latch()
        let other = ClosureTask(name: "other") { run in
            run.finish(with: nil)
            otherRan.countDown()
        }
        try workflow.add(pending)
        try workflow.add(other)
        workflow.start()
        #expect(await entered.opened(within: workflowTimeout))
        pending.cancel()
        #expect(pending.state == .cancelled)
        // Its runner finished with the cancel, so the other task's run gets the place.
        #expect(await otherRan.opened(within: workflowTimeout))
        #expect(await drained(queue))
        #expect(other.state == .finished)
        held.values.first?.finish(with: "late")  // ignored: the run was cancelled
        #expect(pending.state == .cancelled)
        #expect(pending.result == nil)
    }

    @Test("a body that cancels its own task keeps its place until it returns; the task stays cancelled")
    func cancelledInsideMain() async throws {
        let queue = try ConcurrentOperationQueue(name: "one at a time", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "cancel inside main", queue: queue)
        let cancelled = Latch()
        let release = Gate()
        let task = ClosureTask(name: "self-cancelling") { run in
            run.task.cancel()
            cancelled.countDown()
            _ = release.wait()
            run.finish(with: "late")  // ignored
        }
        try workflow.add(task)
        workflow.start()
        #expect(await cancelled.opened(within: workflowTimeout))
        #expect(task.state == .cancelled)
        #expect(queue.operationCount == 1)
        release.open()
        #expect(await drained(queue))
        #expect(task.state == .cancelled)
        #expect(task.result == nil)
    }

    // MARK: Keeping the workflow alive

    /// A consumer of `workflow`'s events, whose latch opens when the stream ends: when the
    /// workflow is released.
    private func releaseLatch(_ workflow: Workflow) -> (Latch, Task<Void, Never>) {
        let stream = workflow.events
        let ended = Latch()
        let consumer = Task {
            for await _ in stream {}
            ended.countDown()
        }
        return (ended, consumer)
    }

    @Test("a workflow nothing else holds lives while an asynchronous run executes, and is released once the run ends")
    func keptAliveByAnAsynchronousRun() async throws {
        let entered = Latch()
        let held = Recorder<WorkflowTaskRun>()
        // main() returns without finishing: the run goes on.
        let task = ClosureTask(name: "asynchronous") { run in
            held.record(run)
            entered.countDown()
        }
        weak var weakWorkflow: Workflow?
        let (ended, consumer): (Latch, Task<Void, Never>)
        do {
            let workflow = Workflow(name: "kept alive")
            weakWorkflow = workflow
            try workflow.add(task)
            (ended, consumer) = releaseLatch(workflow)
            workflow.start()
        }
        #expect(await entered.opened(within: workflowTimeout))
        #expect(weakWorkflow != nil, "the executing run keeps its workflow")
        #expect(task.state == .executing)
        let run = try #require(held.values.first)
        run.finish(with: 7)
        #expect(task.state == .finished)
        #expect(task.result as? Int == 7)
        #expect(await reached(ended), "released once the run ended and its operation was done")
        #expect(task.containingWorkflow == nil)
        consumer.cancel()
    }

    @Test("a workflow whose runner is cancelled on the queue is released once the task is cancelled")
    func releasedAfterItsOperationIsCancelled() async throws {
        let queue = ConcurrentOperationQueue(name: "suspended")
        queue.isSuspended = true
        let ran = Latch()
        let task = ClosureTask(name: "never runs") { run in
            ran.countDown()
            run.finish(with: nil)
        }
        weak var weakWorkflow: Workflow?
        let (ended, consumer): (Latch, Task<Void, Never>)
        do {
            let workflow = Workflow(name: "cancelled on the queue", queue: queue)
            weakWorkflow = workflow
            try workflow.add(task)
            (ended, consumer) = releaseLatch(workflow)
            workflow.start()
        }
        #expect(task.state == .executing)
        queue.cancelAllOperations()
        #expect(weakWorkflow != nil, "its runner, still in the queue, keeps the workflow")
        queue.isSuspended = false
        #expect(await drained(queue))
        #expect(task.state == .cancelled)
        #expect(await reached(ended))
        #expect(ran.count == 1, "main() never ran")
        consumer.cancel()
    }

    @Test("a workflow whose run ended before the queue reached it lives until its runner has run, then is released")
    func releasedAfterAnEndedRunsOperationRan() async throws {
        let queue = ConcurrentOperationQueue(name: "suspended")
        queue.isSuspended = true
        let ran = Latch()
        let task = ClosureTask(name: "reset before it runs") { run in
            ran.countDown()
            run.finish(with: nil)
        }
        weak var weakWorkflow: Workflow?
        let (ended, consumer): (Latch, Task<Void, Never>)
        do {
            let workflow = Workflow(name: "reset before the queue", queue: queue)
            weakWorkflow = workflow
            try workflow.add(task)
            (ended, consumer) = releaseLatch(workflow)
            workflow.start()
            task.reset()
        }
        #expect(task.state == .ready)
        #expect(weakWorkflow != nil, "the runner, still in the queue, keeps the workflow")
        queue.isSuspended = false
        #expect(await drained(queue))
        #expect(await reached(ended))
        #expect(ran.count == 1, "main() of an ended run never runs")
        #expect(task.state == .ready)
        consumer.cancel()
    }
}
