import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// Each workflow has its own lock, and a task moves from a lock of its own to its workflow's
    /// when added. Several workflows — some running sub-workflows, one two levels deep — are
    /// stormed from many threads at once (start, cancel, reset, retry of workflows and tasks,
    /// tasks added while running, reads across workflows); then everything is cancelled, comes
    /// to rest, is reset and run again, and every workflow must finish. Nothing may deadlock:
    /// every wait is bounded.
    @Suite("Workflow independent locks")
    struct WorkflowIndependentLocks {
        /// What the bodies do: finish inline or on another thread, or fail, until `succeedOnly`.
        final class Chaos: Sendable {
            let tracker = WorkflowRunTracker()
            let succeedOnly = Atomic<Bool>(false)
            let counter = Atomic<Int>(0)

            init() {}

            func task(_ name: String) -> ClosureTask {
                ClosureTask(name: name) { [self] run in
                    tracker.begin()
                    let pick = counter.add(1, ordering: .relaxed).newValue % 5
                    if pick == 4 && !succeedOnly.load(ordering: .acquiring) {
                        run.fail(with: WorkflowStressError(index: 0, run: run.number))
                        tracker.end()
                    } else if pick >= 2 {
                        tracker.elsewhere.async {
                            run.finish(with: pick)
                            self.tracker.end()
                        }
                    } else {
                        run.finish(with: pick)
                        tracker.end()
                    }
                }
            }
        }

        /// A workflow of `count` tasks, each after one or two of the tasks before it, plus the
        /// extra tasks given (sub-workflow tasks), each after the first task.
        static func makeWorkflow(_ name: String, count: Int, chaos: Chaos, extra: [WorkflowTask] = []) throws -> Workflow {
            let workflow = Workflow(name: name)
            var tasks: [WorkflowTask] = []
            for index in 0..<count {
                let task = chaos.task("\(name).\(index)")
                let prerequisites = index == 0 ? [] : [tasks[index - 1], tasks[index / 2]]
                try workflow.add(task, prerequisites: prerequisites)
                tasks.append(task)
            }
            for task in extra { try workflow.add(task, prerequisites: [tasks[0]]) }
            return workflow
        }

        @Test("several workflows with sub-workflows stormed from many threads all finish afterwards")
        func storm() throws {
            let chaos = Chaos()
            let size = Stress.count(40, minimum: 8)
            // Two levels: deep ⊂ middle ⊂ parent 0; sub ⊂ parent 1; parents 2 and 3 are plain.
            let deep = try Self.makeWorkflow("deep", count: size, chaos: chaos)
            let middle = try Self.makeWorkflow(
                "middle", count: size, chaos: chaos, extra: [SubworkflowTask(name: "deep", subworkflow: deep)])
            let sub = try Self.makeWorkflow("sub", count: size, chaos: chaos)
            let parents = [
                try Self.makeWorkflow("p0", count: size, chaos: chaos, extra: [SubworkflowTask(name: "middle", subworkflow: middle)]),
                try Self.makeWorkflow("p1", count: size, chaos: chaos, extra: [SubworkflowTask(name: "sub", subworkflow: sub)]),
                try Self.makeWorkflow("p2", count: size, chaos: chaos),
                try Self.makeWorkflow("p3", count: size, chaos: chaos),
            ]
            // Deepest first, so that resetting in this order leaves every sub-workflow reset.
            let subworkflows = [deep, middle, sub]
            let all = subworkflows + parents

            let actions = Stress.count(1_500, minimum: 40)
            let added = Atomic<Int>(0)
            for parent in parents { parent.start() }
            let stormed = onThreads(8, label: "workflow.locks.storm") { thread in
                var random = SplitMix64(seed: 0x10C6_0000 + UInt64(thread))
                for step in 0..<actions {
                    let workflow = all[random.below(all.count)]
                    let tasks = workflow.allTasks
                    let task = tasks[random.below(tasks.count)]
                    switch random.below(12) {
                    case 0: workflow.start()
                    case 1: workflow.cancel()
                    case 2: workflow.reset()
                    case 3: workflow.retry()
                    case 4: task.start()
                    case 5: task.cancel()
                    case 6: task.reset()
                    case 7: task.retry()
                    case 8:
                        // A task added while the workflow runs, after a random task of it.
                        let new = chaos.task("\(workflow.name).t\(thread).\(step)")
                        if (try? workflow.add(new, prerequisites: [task])) != nil { added.add(1, ordering: .relaxed) }
                        if random.chance(50) { new.start() }
                    case 9:
                        // Reads, also across workflows (a task of another workflow is not in this one).
                        let other = all[random.below(all.count)]
                        _ = other.prerequisites(of: task)
                        _ = (task.state, task.result, task.error, task.containingWorkflow, other.isFinished)
                    case 10:
                        _ = (workflow.hasFailedTasks, workflow.hasUnfinishedTasks, workflow.tasksWithNoDependents.count)
                    default:
                        chaos.tracker.finishParked(pick: step)
                    }
                }
            }
            try #require(stormed, "the storm threads did not finish")
            #expect(added.load(ordering: .relaxed) > 0)

            // Rest: cancel everything (no run is left executing, nothing starts any more), then
            // wait until no body is in flight and every queue is empty.
            chaos.succeedOnly.store(true, ordering: .releasing)
            for workflow in all { workflow.cancel() }
            try #require(chaos.tracker.settle(all: all.map(\.queue)), "the workflows did not come to rest")

            // Reset (sub-workflows deepest first) and run every parent to the end.
            let delegates = all.map { _ in WorkflowCountingDelegate() }
            for (workflow, delegate) in zip(all, delegates) { workflow.delegate = delegate }
            for workflow in all { workflow.reset() }
            for parent in parents { parent.start() }
            for (workflow, delegate) in zip(all, delegates) {
                #expect(delegate.finished.wait(timeout: Stress.timeout), "\(workflow.name) did not finish")
                #expect(workflow.isFinished, "\(workflow.name) is not finished")
                #expect(!workflow.hasUnfinishedTasks, "\(workflow.name) has unfinished tasks")
            }
            withExtendedLifetime(delegates) {}
        }

        /// A new task added to two workflows at once from two threads, while a third reads its
        /// state: exactly one add succeeds, and the task ends up in that workflow, under its lock.
        @Test("a task added to two workflows at once joins exactly one of them")
        func racingAdds() throws {
            let rounds = Stress.count(300, minimum: 20)
            let first = Workflow(name: "first")
            let second = Workflow(name: "second")
            let root1 = ClosureTask(name: "root1") { $0.finish(with: nil) }
            let root2 = ClosureTask(name: "root2") { $0.finish(with: nil) }
            try first.add(root1)
            try second.add(root2)
            for round in 0..<rounds {
                let task = ClosureTask(name: "task\(round)") { $0.finish(with: 1) }
                let wins = Atomic<Int>(0)
                let raced = onThreads(3, label: "workflow.locks.add") { thread in
                    switch thread {
                    case 0: if (try? first.add(task, prerequisites: [root1])) != nil { wins.add(1, ordering: .relaxed) }
                    case 1: if (try? second.add(task)) != nil { wins.add(1, ordering: .relaxed) }
                    default:
                        for _ in 0..<20 { _ = (task.state, task.containingWorkflow, first.prerequisites(of: task)) }
                    }
                }
                try #require(raced, "the adding threads did not finish")
                #expect(wins.load(ordering: .relaxed) == 1)
                let home = try #require(task.containingWorkflow)
                #expect(home === first || home === second)
                #expect(home.allTasks.contains { $0 === task })
                #expect((home === first ? second : first).allTasks.allSatisfy { $0 !== task })
            }
            let finished = WorkflowCountingDelegate()
            first.delegate = finished
            first.start()
            #expect(finished.finished.wait(timeout: Stress.timeout), "the first workflow did not finish")
            #expect(first.isFinished)
        }
    }
}
