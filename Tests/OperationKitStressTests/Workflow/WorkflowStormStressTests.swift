import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// Threads storming a running 1,000-task workflow with start, cancel, retry and reset — of
    /// single tasks and of the whole workflow — while the task bodies finish inline, on another
    /// thread, later (parked runs) or fail. At rest, every task's state must agree with its
    /// prerequisites', every body must have run at most once per run, and the workflow must then
    /// run to the end exactly once.
    @Suite("Workflow storms")
    struct WorkflowStorms {
        struct Configuration: Sendable, CustomTestStringConvertible {
            let seed: UInt64
            let threads: Int
            let actionsPerThread: Int

            var testDescription: String { "seed 0x\(String(seed, radix: 16)), \(threads) threads" }
        }

        @Test(
            "retry, reset, cancel and start storms on a running 1,000-task graph leave consistent states",
            arguments: [
                Configuration(seed: 0x5EED_0001, threads: 4, actionsPerThread: 900),
                Configuration(seed: 0x5EED_0002, threads: 8, actionsPerThread: 450),
            ])
        func storm(_ configuration: Configuration) throws {
            let dag = WorkflowDAG(count: Stress.count(1_000, minimum: 20), seed: configuration.seed)
            let workflow = Workflow(name: "storm")
            let probe = WorkflowStressProbe(count: dag.count, seed: configuration.seed, queue: workflow.queue)
            let tasks = try probe.makeTasks(dag, in: workflow)
            let stormDelegate = WorkflowCountingDelegate()
            workflow.delegate = stormDelegate
            #expect(workflow.tasksWithNoDependents.count == dag.sinks.count)
            #expect(workflow.tasksWithNoPrerequisites.count == dag.sources.count)

            // Storm.
            workflow.start()
            let actions = Stress.count(configuration.actionsPerThread, minimum: 20)
            let stormed = onThreads(configuration.threads, label: "workflow.storm") { thread in
                Self.stormThread(thread, configuration.seed, actions, workflow, tasks, probe)
            }
            try #require(stormed, "the storm threads did not finish")

            // Rest: no more calls from the test; every body in flight finishes (parked runs at once).
            try #require(probe.tracker.settle(workflow.queue), "the workflow did not come to rest")
            let rest = WorkflowRestCheck(tasks)
            Self.expectConsistent(rest, dag, probe, workflow, phase: "after the storm")

            // Final phase: reset, run to the end; bodies always succeed.
            probe.succeedOnly.store(true, ordering: .releasing)
            let finalDelegate = WorkflowCountingDelegate()
            workflow.delegate = finalDelegate
            workflow.reset()
            let afterReset = WorkflowRestCheck(tasks)
            let misplaced = problems(dag.count) { index in
                let expected: WorkflowTaskState = dag.prerequisites[index].isEmpty ? .ready : .pending
                return afterReset.states[index] == expected ? nil : "\(afterReset.states[index]) after reset, expected \(expected)"
            }
            #expect(misplaced.count == 0, "states after workflow.reset(): \(misplaced)")
            workflow.start()
            #expect(finalDelegate.finished.wait(timeout: Stress.timeout), "the workflow did not finish after reset and start")
            try #require(probe.tracker.settle(workflow.queue), "the workflow did not come to rest after the final run")
            let final = WorkflowRestCheck(tasks)
            let unfinished = problems(dag.count) { index in
                if final.states[index] != .finished { return "\(final.states[index])" }
                if final.runs[index] != rest.runs[index] + 1 {
                    return "run \(final.runs[index]) after run \(rest.runs[index]): not exactly one new run"
                }
                return nil
            }
            #expect(unfinished.count == 0, "after the final run: \(unfinished), states \(final.histogram)")
            Self.expectConsistent(final, dag, probe, workflow, phase: "after the final run")
            #expect(finalDelegate.finishCount == 1, "workflowDidFinish told \(finalDelegate.finishCount) times in the final run")
            #expect(!workflow.hasUnfinishedTasks && !workflow.hasFailedTasks && workflow.isFinished)
            withExtendedLifetime(stormDelegate) {}
        }

        /// One storm thread: `actions` random calls.
        static func stormThread(
            _ thread: Int, _ seed: UInt64, _ actions: Int, _ workflow: Workflow, _ tasks: [WorkflowTask],
            _ probe: WorkflowStressProbe
        ) {
            var random = SplitMix64(seed: seed &+ UInt64(thread + 1) &* 0xA24B_AED4_963E_E407)
            for action in 0..<actions {
                let task = tasks[random.below(tasks.count)]
                // The last quarter calls no whole-workflow action, so the storm does not end with
                // every task in the state of the last one.
                let roll = random.below(action < actions * 3 / 4 ? 1_000 : 930)
                switch roll {
                case ..<200: task.cancel()
                case ..<380: task.retry()
                case ..<540: task.reset()
                case ..<700: task.start()
                case ..<730:
                    // A new run at once: the old run's operation may be just about to call main().
                    task.reset()
                    task.start()
                case ..<750:
                    task.cancel()
                    task.retry()
                case ..<880: probe.tracker.finishParked(pick: random.below(1 << 20))
                case ..<930:
                    // Readers, under the same lock.
                    _ = task.state
                    _ = task.result
                    _ = task.error
                    _ = task.allPrerequisiteResults
                    _ = workflow.hasUnfinishedTasks
                    _ = workflow.isFinished
                case ..<948: workflow.start()
                case ..<964: workflow.retry()
                case ..<978: workflow.reset()
                case ..<990: workflow.cancel()
                case ..<993: _ = workflow.asciiDiagram()
                default: _ = workflow.dependents(of: task).count + workflow.prerequisites(of: task).count
                }
            }
        }

        /// The checks of a workflow at rest.
        static func expectConsistent(
            _ rest: WorkflowRestCheck, _ dag: WorkflowDAG, _ probe: WorkflowStressProbe, _ workflow: Workflow,
            phase: String, sourceLocation: SourceLocation = #_sourceLocation
        ) {
            let states = problems(dag.count) { rest.stateProblem($0, dag) }
            #expect(states.count == 0, "\(phase): states inconsistent with prerequisites: \(states)",
                    sourceLocation: sourceLocation)
            let outcomes = problems(dag.count) { rest.outcomeProblem($0) }
            #expect(outcomes.count == 0, "\(phase): results and errors: \(outcomes)", sourceLocation: sourceLocation)
            let executions = problems(dag.count) { rest.executionProblem($0, probe.executions(of: $0)) }
            #expect(executions.count == 0, "\(phase): executions per run: \(executions)", sourceLocation: sourceLocation)
            #expect(probe.offQueue.load(ordering: .relaxed) == 0, "\(phase): bodies ran off the workflow's queue",
                    sourceLocation: sourceLocation)
            rest.expectCounters(of: workflow, dag, sourceLocation: sourceLocation)
        }
    }
}
