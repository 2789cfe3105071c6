// When a run gives back its place on the queue: a runner goes on to the next run once main()
// returns for a run ended on its own thread; a run ended elsewhere frees its runner's place at the
// end of that change.

import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Workflow runners: when a run's place on the queue is freed", .offThePool)
struct WorkflowRunOperationTests {
    @Test("a run finished inside main() keeps its operation until main() returns; the dependent then runs")
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
        // The dependent's run is started, and waits: the runner that may take it waits in the
        // queue for the place first's runner holds until first's main() returns.
        #expect(second.state == .executing)
        #expect(queue.operationCount == 2)
        #expect(workflow.snapshot().operations.first { $0.name == "second" }?.sinceStarted == nil)
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
        // main() returns without finishing: the run goes on (its operation keeps the only place).
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
        // Its operation finished with the cancel, so the other task's run gets the place.
        #expect(await otherRan.opened(within: workflowTimeout))
        #expect(await drained(queue))
        #expect(other.state == .finished)
        held.values.first?.finish(with: "late")  // ignored: the run was cancelled
        #expect(pending.state == .cancelled)
        #expect(pending.result == nil)
    }

    @Test("a body that cancels its own task keeps its operation until it returns; the task stays cancelled")
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
}
