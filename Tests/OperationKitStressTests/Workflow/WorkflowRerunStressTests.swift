import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// A layered workflow (the benchmark's S4 shape: each task depends on every task of the layer
    /// before) run, reset and run again: each run must execute and finish every task exactly once,
    /// each after all its prerequisites, and finish the workflow exactly once.
    @Suite("Workflow re-runs")
    struct WorkflowReruns {
        /// What one execution of a body saw.
        struct Execution: Sendable {
            var count = 0
            /// Clock tick when the body began, and just before it finished its run.
            var startedAt = 0
            var finishedAt = 0
            /// How many prerequisites had a result when the body began.
            var prerequisiteResults = 0
        }

        /// Counts the finishes a task tells its delegate.
        final class FinishCounter: WorkflowTaskDelegate, Sendable {
            let finishes = Atomic<Int>(0)

            init() {}

            func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?) {
                finishes.add(1, ordering: .relaxed)
            }
        }

        @Test("a layered workflow run, reset and run again finishes every task exactly once per run")
        func layeredReruns() throws {
            let layers = Stress.count(10, minimum: 3)
            let width = Stress.count(10, minimum: 2)
            let rounds = Stress.count(200, minimum: 3)
            let dag = WorkflowDAG(layers: layers, width: width)
            let workflow = Workflow(name: "layers")
            let tracker = WorkflowRunTracker()
            let clock = LogicalClock()
            let executions = (0..<dag.count).map { _ in WorkflowGuarded<[Int: Execution]>([:]) }
            let counters = (0..<dag.count).map { _ in FinishCounter() }
            var tasks: [WorkflowTask] = []
            for index in 0..<dag.count {
                let record = executions[index]
                let task = ClosureTask(name: "t\(index)") { run in
                    tracker.begin()
                    let startedAt = clock.tick()
                    let seen = run.task.allPrerequisiteResults.count
                    record.withLock { runs in
                        runs[run.number, default: Execution()].count += 1
                        runs[run.number]!.startedAt = startedAt
                        runs[run.number]!.prerequisiteResults = seen
                    }
                    let finish: @Sendable () -> Void = {
                        let finishedAt = clock.tick()
                        record.withLock { $0[run.number]!.finishedAt = finishedAt }
                        run.finish(with: index)
                        tracker.end()
                    }
                    // Inline or on another thread, alternating by task and run.
                    if (index + run.number) % 2 == 0 { finish() } else { tracker.elsewhere.async(execute: finish) }
                }
                try workflow.add(task, prerequisites: dag.prerequisites[index].map { tasks[$0] })
                task.delegate = counters[index]
                tasks.append(task)
            }

            for round in 1...rounds {
                let delegate = WorkflowCountingDelegate()
                workflow.delegate = delegate
                if round > 1 {
                    workflow.reset()
                    let wrong = problems(dag.count) { index in
                        let expected: WorkflowTaskState = dag.prerequisites[index].isEmpty ? .ready : .pending
                        let state = tasks[index].state
                        if state != expected { return "\(state) after reset, expected \(expected)" }
                        return tasks[index].result == nil ? nil : "a result after reset"
                    }
                    #expect(wrong.count == 0, "round \(round), after reset: \(wrong)")
                    #expect(workflow.hasUnfinishedTasks && !workflow.isFinished)
                }
                workflow.start()
                try #require(delegate.finished.wait(timeout: Stress.timeout), "round \(round): the workflow did not finish")
                try #require(tracker.settle(workflow.queue), "round \(round): the workflow did not come to rest")

                let wrong = problems(dag.count) { index -> String? in
                    let task = tasks[index]
                    if task.state != .finished { return "\(task.state)" }
                    if task.currentRun.number != round { return "run \(task.currentRun.number) in round \(round)" }
                    if task.result as? Int != index { return "result \(String(describing: task.result))" }
                    let runs = executions[index].current
                    if runs.count != round || runs.values.contains(where: { $0.count != 1 }) {
                        return "executions by run \(runs.mapValues(\.count).sorted { $0.key < $1.key })"
                    }
                    let execution = runs[round]!
                    if execution.prerequisiteResults != dag.prerequisites[index].count {
                        return "began with \(execution.prerequisiteResults) of \(dag.prerequisites[index].count) prerequisite results"
                    }
                    let prerequisiteFinished = { (prerequisite: Int) in executions[prerequisite].current[round]?.finishedAt ?? .max }
                    if let early = dag.prerequisites[index].first(where: { execution.startedAt < prerequisiteFinished($0) }) {
                        return "began before prerequisite t\(early) finished"
                    }
                    let told = counters[index].finishes.load(ordering: .relaxed)
                    return told == round ? nil : "delegate told \(told) finishes after \(round) runs"
                }
                #expect(wrong.count == 0, "round \(round): \(wrong)")
                #expect(delegate.finishCount == 1, "round \(round): workflowDidFinish told \(delegate.finishCount) times")
                #expect(!workflow.hasUnfinishedTasks && !workflow.hasFailedTasks && workflow.isFinished)
                if wrong.count > 0 { break }
            }
        }
    }
}
