import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// Workflows, their tasks of every kind, the run operations, queues and whatever the bodies
    /// captured are released once the queues are empty and the test drops them — after a run cut
    /// short by a cancel with runs still parked, and after full runs and a reset.
    @Suite("Workflow leaks")
    struct WorkflowLeaks {
        /// Something a task's body or target holds, to see it released with the task.
        final class Payload: Sendable {
            init() {}
        }

        /// A subclass task (finishes inline through itself).
        final class LeakTask: WorkflowTask, @unchecked Sendable {  // immutable after init
            let payload: Payload
            let tracker: WorkflowRunTracker

            init(name: String, payload: Payload, tracker: WorkflowRunTracker) {
                self.payload = payload
                self.tracker = tracker
                super.init(name: name)
            }

            override func main() {
                tracker.begin()
                finish(with: name)
                tracker.end()
            }
        }

        /// The target of a ``MethodTask``.
        final class Target: Sendable {
            let tracker: WorkflowRunTracker

            init(tracker: WorkflowRunTracker) { self.tracker = tracker }

            func run(_ run: WorkflowTaskRun) {
                tracker.begin()
                run.finish(with: 1)
                tracker.end()
            }
        }

        /// Counts the task delegate's calls (held weakly by each task).
        final class TaskDelegate: WorkflowTaskDelegate, Sendable {
            let calls = Atomic<Int>(0)

            init() {}

            func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?) { calls.add(1, ordering: .relaxed) }
            func taskDidCancel(_ task: WorkflowTask) { calls.add(1, ordering: .relaxed) }
        }

        @Test("workflows, tasks, runs and queues are released after use")
        func releasedAfterUse() async throws {
            let workers = DispatchQueue(label: "workflow.leak.workers", attributes: .concurrent)
            let tracker = WorkflowRunTracker()
            let operations = WorkflowGuarded<[WeakRef]>([])
            var references: [(String, WeakRef)] = []
            var workflowReference: WeakRef?
            let consumer: Task<Int, Never>
            do {
                let handlers = QueueEventHandlers(didAdd: { operation in
                    operations.withLock { $0.append(WeakRef(operation)) }
                })
                let queue = ConcurrentOperationQueue(name: "workflow.leak", underlyingQueue: workers)
                let subqueue = ConcurrentOperationQueue(name: "workflow.leak.sub", underlyingQueue: workers)
                queue.eventHandlers = handlers
                subqueue.eventHandlers = handlers
                let workflow = Workflow(name: "leak", queue: queue)
                let subworkflow = Workflow(name: "leak.sub", queue: subqueue)
                workflowReference = WeakRef(workflow)
                references += [("subworkflow", WeakRef(subworkflow)),
                               ("queue", WeakRef(queue)), ("subqueue", WeakRef(subqueue))]

                // The sub-workflow: a chain of three.
                var subtasks: [WorkflowTask] = []
                for index in 0..<3 {
                    let task = ClosureTask(name: "sub\(index)") { run in
                        tracker.begin()
                        run.finish(with: index)
                        tracker.end()
                    }
                    try subworkflow.add(task, prerequisites: subtasks.suffix(1))
                    subtasks.append(task)
                }

                // The workflow: a random graph of every kind of task.
                let parkedOne = Latch()
                let dag = WorkflowDAG(count: Stress.count(150, minimum: 12), seed: 0x1EA4)
                var tasks: [WorkflowTask] = []
                var conditions: [ExternalConditionTask] = []
                let taskDelegate = TaskDelegate()
                for index in 0..<dag.count {
                    let payload = Payload()
                    references.append(("payload \(index)", WeakRef(payload)))
                    let task: WorkflowTask
                    switch index % 6 {
                    case 0:
                        task = ClosureTask(name: "t\(index)") { run in
                            tracker.begin()
                            withExtendedLifetime(payload) { run.finish(with: index) }
                            tracker.end()
                        }
                    case 1:
                        // Parks while parking is open (the first round, cut short), then finishes
                        // on another thread.
                        task = ClosureTask(name: "t\(index)") { run in
                            tracker.begin()
                            let error = WorkflowStressError(index: index, run: run.number)
                            if tracker.park(.init(run: run, result: payload, error: error, fails: false)) {
                                parkedOne.countDown()
                            } else {
                                tracker.elsewhere.async {
                                    run.finish(with: payload)
                                    tracker.end()
                                }
                            }
                        }
                    case 2:
                        task = LeakTask(name: "t\(index)", payload: payload, tracker: tracker)
                    case 3:
                        let target = Target(tracker: tracker)
                        references.append(("target \(index)", WeakRef(target)))
                        task = MethodTask(name: "t\(index)", target: target) { target in target.run }
                    case 4:
                        let condition = ExternalConditionTask(name: "t\(index)")
                        conditions.append(condition)
                        task = condition
                    default:
                        if index == 5 {
                            task = SubworkflowTask(name: "t\(index)", subworkflow: subworkflow)
                        } else {
                            task = ClosureTask(name: "t\(index)") { run in
                                tracker.begin()
                                run.finish(with: nil)
                                tracker.end()
                            }
                        }
                    }
                    try workflow.add(task, prerequisites: dag.prerequisites[index].map { tasks[$0] })
                    task.delegate = taskDelegate
                    tasks.append(task)
                }
                references += (tasks + subtasks).map { ("task \($0.name)", WeakRef($0)) }

                // An event stream, consumed until the workflow is released.
                let stream = workflow.events
                consumer = Task.detached {
                    var events = 0
                    for await _ in stream { events += 1 }
                    return events
                }

                // Round 1, cut short: cancelled while runs are parked (finished after the cancel).
                for condition in conditions { condition.fulfill(with: condition.name) }
                let delegate = WorkflowCountingDelegate()
                workflow.delegate = delegate
                workflow.start()
                try #require(parkedOne.wait(timeout: Stress.timeout), "no run parked")
                workflow.cancel()
                try #require(tracker.settle(queue, subqueue), "round 1 did not come to rest")
                #expect(!workflow.isFinished)

                // Rounds 2 and 3: reset and run to the end.
                for round in 2...3 {
                    let delegate = WorkflowCountingDelegate()
                    workflow.delegate = delegate
                    workflow.reset()
                    for condition in conditions { condition.fulfill(with: condition.name) }
                    workflow.start()
                    try #require(delegate.finished.wait(timeout: Stress.timeout), "round \(round): the workflow did not finish")
                    try #require(tracker.settle(queue, subqueue), "round \(round) did not come to rest")
                    let unfinished = tasks.filter { $0.state != .finished }.map(\.name)
                    #expect(unfinished.isEmpty, "round \(round): unfinished tasks \(unfinished)")
                    #expect(delegate.finishCount == 1)
                }
                #expect(taskDelegate.calls.load(ordering: .relaxed) > 0)
                // Runners are shared by runs (a run ended in its main() hands its runner the next
                // one), so there are fewer runners than runs; at least one served each round.
                #expect(operations.current.count >= 3, "the runners were not seen")
            }
            // Everything the workers and the bodies' other threads captured is released.
            try #require(quiesce(workers, tracker.elsewhere))
            // The workflow's release ends its event stream; the consumer then lets go of the last
            // events (which hold tasks). Awaited, not waited for: the consumer needs a thread of
            // the cooperative pool. (If the workflow is alive, the stream would never end.)
            let workflowReleased = workflowReference?.isReleased == true
            #expect(workflowReleased, "the workflow was not released")
            if !workflowReleased { consumer.cancel() }
            let events = await consumer.value
            #expect(events > 0)
            let alive = references.filter { !$0.1.isReleased }.map(\.0)
            #expect(alive.isEmpty, "still alive: \(alive.prefix(10)) (\(alive.count))")
            let operationsAlive = operations.current.filter { !$0.isReleased }.count
            #expect(operationsAlive == 0, "\(operationsAlive) run operations still alive")
        }
    }
}
