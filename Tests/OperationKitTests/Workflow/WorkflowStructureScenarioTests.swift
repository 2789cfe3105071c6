import OperationKit
import OperationKitTestSupport
import Testing

/// SCENARIOS.md G (56, 57, 59, 60) and H (64–68): results, keyed prerequisites, add-time checks,
/// structure and scheduling.
@Suite("Workflow scenarios: results, building, scheduling", .offThePool)
struct WorkflowStructureScenarioTests {
    // MARK: G. Results

    @Test("56 finishing with R: finished, result R, finish time now, one delegate finish message, one event, dependents start")
    func finishWithResult() async throws {
        let workflow = Workflow(name: "56")
        let held = HeldRuns()
        let task = HookCountingTask(name: "T") { _, run in held.hold(run) }
        let dependent = HookCountingTask(name: "D")
        try workflow.add(task)
        try workflow.add(dependent, prerequisites: [task])
        let taskDelegate = RecordingTaskDelegate()
        task.delegate = taskDelegate
        let workflowDelegate = RecordingWorkflowDelegate()
        workflow.delegate = workflowDelegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await held.started())

        let before = ContinuousClock.now
        held.run()?.finish(with: "R")
        let after = ContinuousClock.now
        #expect(task.state == .finished)
        #expect(task.result as? String == "R")
        #expect(task.error == nil)
        let finishTime = try #require(task.finishTime)
        #expect(finishTime >= before && finishTime <= after)
        #expect(taskDelegate.log.values == ["finish(T)=R"])
        #expect(task.hooks.values == ["didFinish(R)"])
        #expect(await reached(workflowDelegate.finished))
        #expect(dependent.runs.value == 1)
        #expect(workflowDelegate.log.values == ["finished(56)"], "no fail or cancel message")
        #expect(await log.waitFor("workflowFinished"))
        #expect(log.events.filter { $0 == "taskFinished(T)" }.count == 1)
        withExtendedLifetime((taskDelegate, workflowDelegate)) {}
    }

    @Test("56 failing with E: failed, error E, finish time now, one delegate fail message (task and workflow)")
    func failWithError() async throws {
        let workflow = Workflow(name: "56 fail")
        let held = HeldRuns()
        let task = HookCountingTask(name: "T") { _, run in held.hold(run) }
        try workflow.add(task)
        let taskDelegate = RecordingTaskDelegate()
        task.delegate = taskDelegate
        let workflowDelegate = RecordingWorkflowDelegate()
        workflow.delegate = workflowDelegate
        workflow.start()
        #expect(await held.started())

        let before = ContinuousClock.now
        held.run()?.fail(with: WorkflowTestError(56))
        let after = ContinuousClock.now
        #expect(task.state == .failed)
        #expect(task.error as? WorkflowTestError == WorkflowTestError(56))
        #expect(task.result == nil)
        let finishTime = try #require(task.finishTime)
        #expect(finishTime >= before && finishTime <= after)
        #expect(taskDelegate.log.values == ["fail(T)=W56"])
        #expect(workflowDelegate.log.values == ["fail(T)=W56"])
        #expect(task.hooks.values == ["didFail(W56)"])
        // A second fail or finish of the same run changes nothing and tells nobody.
        held.run()?.fail(with: WorkflowTestError(57))
        held.run()?.finish(with: "late")
        task.finish(with: "late")
        #expect(task.error as? WorkflowTestError == WorkflowTestError(56))
        #expect(taskDelegate.log.values == ["fail(T)=W56"])
        withExtendedLifetime((taskDelegate, workflowDelegate)) {}
    }

    @Test("57 prerequisite results: any, all, unkeyed, keyed, for a key, by task")
    func prerequisiteResults() async throws {
        let workflow = Workflow(name: "57")
        let u1 = ClosureTask(name: "U1") { $0.finish(with: 1) }
        let u2 = ClosureTask(name: "U2") { $0.finish(with: 2) }
        let u3 = ClosureTask(name: "U3") { $0.finish(with: 3) }
        let noResult = ClosureTask(name: "N") { $0.finish(with: nil) }
        let k = ClosureTask(name: "K") { $0.finish(with: 10) }
        let j = ClosureTask(name: "J") { $0.finish(with: 20) }
        struct Seen: Sendable {
            var any: Int?
            var all: [Int] = []
            var unkeyed: [Int] = []
            var keyed: [String: Int] = [:]
            var k: Int?
            var j: Int?
            var kAsString: String?
            var missing: Bool = false
            var byTask: [String: Int] = [:]
        }
        let seen = WorkflowBox(Seen())
        let t = ClosureTask(name: "T", requiredPrerequisiteKeys: ["k"]) { run in
            let task = run.task
            var s = Seen()
            s.any = task.anyPrerequisiteResult as? Int
            s.all = task.allPrerequisiteResults.compactMap { $0 as? Int }.sorted()
            s.unkeyed = task.allUnkeyedPrerequisiteResults.compactMap { $0 as? Int }.sorted()
            s.keyed = task.keyedPrerequisiteResults.compactMapValues { $0 as? Int }
            s.k = task.prerequisiteResult(forKey: "k") as? Int
            s.j = task.prerequisiteResult(forKey: "j", as: Int.self)
            s.kAsString = task.prerequisiteResult(forKey: "k", as: String.self)
            s.missing = task.prerequisiteResult(forKey: "missing") == nil
            s.byTask = Dictionary(uniqueKeysWithValues: task.prerequisiteResultsByTask.map { ($0.task.name, $0.result as? Int ?? -1) })
            seen.value = s
            run.finish(with: nil)
        }
        for task in [u1, u2, u3, noResult, k, j] { try workflow.add(task) }
        try workflow.add(t, prerequisites: [u1, u2, u3, noResult], keyedPrerequisites: ["k": k, "j": j])
        #expect(workflow.prerequisites(of: t).map(\.name) == ["U1", "U2", "U3", "N", "J", "K"])
        #expect(workflow.keyedPrerequisites(of: t).mapValues(\.name) == ["k": "K", "j": "J"])
        #expect(workflow.dependents(of: k).map(\.name) == ["T"])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await reached(delegate.finished))

        let s = seen.value
        #expect(s.any.map { [1, 2, 3, 10, 20].contains($0) } == true)
        #expect(s.all == [1, 2, 3, 10, 20], "a prerequisite without a result is left out")
        #expect(s.unkeyed == [1, 2, 3])
        #expect(s.keyed == ["k": 10, "j": 20])
        #expect(s.k == 10)
        #expect(s.j == 20)
        #expect(s.kAsString == nil)
        #expect(s.missing)
        #expect(s.byTask == ["U1": 1, "U2": 2, "U3": 3, "K": 10, "J": 20])
        // The by-task pairs hold the tasks themselves.
        #expect(t.prerequisiteResultsByTask.contains { $0.task === k && $0.result as? Int == 10 })
        // Read from outside after the run, the same; a reset prerequisite's result is gone.
        #expect(t.allPrerequisiteResults.count == 5)
        k.reset()
        #expect(t.prerequisiteResult(forKey: "k") == nil)
        #expect(t.keyedPrerequisiteResults.compactMapValues { $0 as? Int } == ["j": 20])
        #expect(t.allUnkeyedPrerequisiteResults.count == 3)
        withExtendedLifetime(delegate) {}
    }

    @Test("57 a task that is both an unkeyed and a keyed prerequisite counts once, as keyed")
    func sameTaskKeyedAndUnkeyed() async throws {
        let workflow = Workflow(name: "57b")
        let p = ClosureTask(name: "P") { $0.finish(with: 7) }
        let t = HookCountingTask(name: "T")
        try workflow.add(p)
        try workflow.add(t, prerequisites: [p, p], keyedPrerequisites: ["p": p])
        #expect(workflow.prerequisites(of: t).map(\.name) == ["P"])
        #expect(workflow.dependents(of: p).map(\.name) == ["T"])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await reached(delegate.finished))
        #expect(t.allPrerequisiteResults.compactMap { $0 as? Int } == [7])
        #expect(t.allUnkeyedPrerequisiteResults.isEmpty)
        #expect(t.prerequisiteResult(forKey: "p", as: Int.self) == 7)
        withExtendedLifetime(delegate) {}
    }

    @Test("59 keyed prerequisites also gate: pending until the keyed prerequisite finishes, then it runs")
    func keyedPrerequisitesGate() async throws {
        let workflow = Workflow(name: "59")
        let held = HeldRuns()
        let k = held.task("K")
        let t = HookCountingTask(name: "T") { task, run in run.finish(with: task.prerequisiteResult(forKey: "k")) }
        try workflow.add(k)
        try workflow.add(t, keyedPrerequisites: ["k": k])
        #expect(t.state == .pending)
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await held.started())
        #expect(t.state == .pending)
        #expect(t.runs.value == 0)
        held.run()?.finish(with: "key")
        #expect(await reached(delegate.finished))
        #expect(t.runs.value == 1)
        #expect(t.result as? String == "key")
        withExtendedLifetime(delegate) {}
    }

    @Test("60 add-time checks: missing required keys, added twice, in a second workflow, prerequisite not added, self-prerequisite")
    func addTimeErrors() throws {
        let workflow = Workflow(name: "60")
        let other = Workflow(name: "60 other")
        let a = ClosureTask(name: "A") { $0.finish(with: nil) }
        let b = ClosureTask(name: "B") { $0.finish(with: nil) }
        try workflow.add(a)
        try workflow.add(b)

        /// The code and operation names of the OperationError `body` throws, or nil.
        func code(_ body: () throws -> Void) -> (OperationError.Code, [String])? {
            do {
                try body()
                return nil
            } catch let error as OperationError {
                return (error.code, error.operationNames)
            } catch {
                Issue.record("not an OperationError: \(error)")
                return nil
            }
        }

        // Required keys.
        let needsKeys = ClosureTask(name: "NeedsKeys", requiredPrerequisiteKeys: ["a", "b"]) { $0.finish(with: nil) }
        let missing = code { try workflow.add(needsKeys, keyedPrerequisites: ["a": a]) }
        #expect(missing?.0 == .missingPrerequisiteKeys)
        #expect(missing?.1 == ["NeedsKeys"])
        #expect(code { try workflow.add(needsKeys, prerequisites: [a, b]) }?.0 == .missingPrerequisiteKeys,
                "unkeyed prerequisites do not supply keys")
        #expect(needsKeys.containingWorkflow == nil)
        #expect(workflow.allTasks.count == 2)
        #expect(workflow.dependents(of: a).isEmpty, "nothing was added")
        #expect(code { try workflow.add(needsKeys, keyedPrerequisites: ["a": a, "b": b, "extra": a]) } == nil)
        #expect(needsKeys.state == .pending)

        // Added twice; added to a second workflow.
        let twice = code { try workflow.add(a) }
        #expect(twice?.0 == .taskAlreadyInWorkflow)
        #expect(twice?.1 == ["A"])
        #expect(code { try other.add(a) }?.0 == .taskAlreadyInWorkflow)
        #expect(other.allTasks.isEmpty)

        // A prerequisite not added first (to no workflow, or to another one).
        let stranger = ClosureTask(name: "Stranger") { $0.finish(with: nil) }
        let late = ClosureTask(name: "Late") { $0.finish(with: nil) }
        let notAdded = code { try workflow.add(late, prerequisites: [a, stranger]) }
        #expect(notAdded?.0 == .prerequisiteNotInWorkflow)
        #expect(notAdded?.1 == ["Late", "Stranger"])
        #expect(code { try workflow.add(late, keyedPrerequisites: ["s": stranger]) }?.0 == .prerequisiteNotInWorkflow)
        try other.add(stranger)
        #expect(code { try workflow.add(late, prerequisites: [stranger]) }?.0 == .prerequisiteNotInWorkflow)
        #expect(late.containingWorkflow == nil)
        #expect(workflow.dependents(of: a).map(\.name) == ["NeedsKeys"], "nothing was added")
        #expect(workflow.allTasks.count == 3)

        // Its own prerequisite.
        let selfish = ClosureTask(name: "Selfish") { $0.finish(with: nil) }
        let cycle = code { try workflow.add(selfish, prerequisites: [selfish]) }
        #expect(cycle?.0 == .dependencyCycle)
        #expect(cycle?.1 == ["Selfish", "Selfish"])
        #expect(code { try workflow.add(selfish, keyedPrerequisites: ["me": selfish]) }?.0 == .dependencyCycle)
        #expect(selfish.containingWorkflow == nil)

        // A refused task can still be added properly.
        #expect(code { try workflow.add(late, prerequisites: [a]) } == nil)
        #expect(code { try workflow.add(selfish) } == nil)
        #expect(late.containingWorkflow === workflow)
        #expect(workflow.allTasks.map(\.name) == ["A", "B", "NeedsKeys", "Late", "Selfish"])
    }

    @Test("60 a subclass's required keys are checked too")
    func subclassRequiredKeys() throws {
        final class NeedsUser: WorkflowTask, @unchecked Sendable {
            override var requiredPrerequisiteKeys: Set<String> { ["user"] }
        }
        let workflow = Workflow(name: "60b")
        let user = ClosureTask(name: "user") { $0.finish(with: nil) }
        try workflow.add(user)
        #expect(throws: OperationError.self) { try workflow.add(NeedsUser(name: "N"), prerequisites: [user]) }
        try workflow.add(NeedsUser(name: "N2"), keyedPrerequisites: ["user": user])
        #expect(workflow.allTasks.map(\.name) == ["user", "N2"])
    }

    // MARK: H. Structure and scheduling

    @Test("64 a new task is ready; added with an unfinished prerequisite it is pending and listed as the prerequisite's dependent")
    func pendingOnAdd() async throws {
        let workflow = Workflow(name: "64")
        let a = ClosureTask(name: "A") { $0.finish(with: "a") }
        let b = ClosureTask(name: "B") { $0.finish(with: "b") }
        #expect(a.state == .ready && b.state == .ready)
        #expect(a.containingWorkflow == nil)
        try workflow.add(a)
        #expect(a.state == .ready)
        #expect(a.containingWorkflow === workflow)
        try workflow.add(b, prerequisites: [a])
        #expect(b.state == .pending)
        #expect(workflow.dependents(of: a).map(\.name) == ["B"])
        #expect(workflow.prerequisites(of: b).map(\.name) == ["A"])
        #expect(workflow.tasksWithNoPrerequisites.map(\.name) == ["A"])
        #expect(workflow.tasksWithNoDependents.map(\.name) == ["B"])
        #expect(workflow.allTasks.map(\.name) == ["A", "B"])
        // Relationship queries about a task of another workflow answer nothing.
        let stranger = ClosureTask(name: "S") { $0.finish(with: nil) }
        #expect(workflow.prerequisites(of: stranger).isEmpty && workflow.dependents(of: stranger).isEmpty)

        // Added with a finished prerequisite, a task is ready, and the finished workflow is
        // unfinished again until it has run.
        let delegate = RecordingWorkflowDelegate(expecting: 2)
        workflow.delegate = delegate
        workflow.start()
        #expect(await reached(delegate.finished))
        #expect(workflow.isFinished)
        let c = ClosureTask(name: "C") { $0.finish(with: "c") }
        try workflow.add(c, prerequisites: [b])
        #expect(c.state == .ready)
        #expect(!workflow.isFinished && workflow.hasUnfinishedTasks)
        #expect(workflow.tasksWithNoDependents.map(\.name) == ["C"])
        workflow.start()
        #expect(await reached(delegate.messages))
        #expect(c.state == .finished && workflow.isFinished)
        withExtendedLifetime(delegate) {}
    }

    @Test("65 chain A→B: A runs while B is pending; B after A; the workflow finishes once, after B")
    func chain() async throws {
        let workflow = Workflow(name: "65")
        let heldA = HeldRuns()
        let heldB = HeldRuns()
        let a = heldA.task("A")
        let b = heldB.task("B")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(await heldA.started())
        #expect(a.state == .executing && b.state == .pending)
        #expect(heldB.count == 0)
        heldA.run()?.finish(with: 1)
        #expect(await heldB.started())
        #expect(a.state == .finished && b.state == .executing)
        #expect(!workflow.isFinished && workflow.hasUnfinishedTasks)
        #expect(delegate.finishCount == 0)
        heldB.run()?.finish(with: 2)
        #expect(workflow.isFinished)
        #expect(!workflow.hasUnfinishedTasks)
        #expect(delegate.log.values == ["finished(65)"])
        #expect(await log.waitFor("workflowFinished"))
        #expect(log.events.filter { $0 == "workflowFinished" }.count == 1)
        withExtendedLifetime(delegate) {}
    }

    @Test("66 fan-in: C starts only after both A and B finish")
    func fanIn() async throws {
        let workflow = Workflow(name: "66 in")
        let heldA = HeldRuns()
        let heldB = HeldRuns()
        let a = heldA.task("A")
        let b = heldB.task("B")
        let c = HookCountingTask(name: "C")
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c, prerequisites: [a, b])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await heldA.started())
        #expect(await heldB.started())
        heldA.run()?.finish(with: nil)
        #expect(c.state == .pending)
        #expect(c.runs.value == 0)
        heldB.run()?.finish(with: nil)
        #expect(await reached(delegate.finished))
        #expect(c.runs.value == 1)
        withExtendedLifetime(delegate) {}
    }

    @Test("66 fan-out: B and C both start after A finishes; the workflow finishes after both")
    func fanOut() async throws {
        let workflow = Workflow(name: "66 out")
        let heldB = HeldRuns()
        let heldC = HeldRuns()
        let a = HookCountingTask(name: "A")
        let b = heldB.task("B")
        let c = heldC.task("C")
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        try workflow.add(c, prerequisites: [a])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await heldB.started())
        #expect(await heldC.started())
        #expect(a.state == .finished)
        heldB.run()?.finish(with: nil)
        #expect(!workflow.isFinished)
        #expect(delegate.finishCount == 0)
        heldC.run()?.finish(with: nil)
        #expect(workflow.isFinished)
        #expect(delegate.log.values == ["finished(66 out)"])
        withExtendedLifetime(delegate) {}
    }

    @Test("67 an empty workflow finishes at once on start, with exactly one delegate message; a silent delegate is fine")
    func emptyWorkflow() async {
        let workflow = Workflow(name: "67")
        #expect(workflow.isFinished)
        #expect(!workflow.hasUnfinishedTasks && !workflow.hasFailedTasks)
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        let log = WorkflowEventLog(workflow)
        workflow.start()
        #expect(delegate.log.values == ["finished(67)"])
        #expect(await log.waitFor("workflowFinished"))
        #expect(log.events == ["willStart", "workflowFinished"])

        let silent = Workflow(name: "67 silent")
        let silentDelegate = SilentWorkflowDelegate()
        silent.delegate = silentDelegate
        silent.start()
        silent.cancel()
        silent.retry()
        silent.reset()
        #expect(silent.isFinished)
        withExtendedLifetime((delegate, silentDelegate)) {}
    }

    @Test("68 a workflow built with a custom queue runs its tasks' work on that queue; by default on a queue of its own")
    func executionQueue() async throws {
        let queue = ConcurrentOperationQueue(name: "68 custom")
        let workflow = Workflow(name: "68", queue: queue)
        #expect(workflow.queue === queue)
        let seen = Recorder<String>()
        func task(_ name: String, _ workflow: Workflow) -> ClosureTask {
            ClosureTask(name: name) { [weak workflow] run in
                let current = ConcurrentOperationQueue.current
                seen.record("\(name): \(current === workflow?.queue ? "workflow queue" : current?.name ?? "no queue")")
                run.finish(with: nil)
            }
        }
        let a = task("A", workflow)
        let b = task("B", workflow)
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        #expect(await reached(delegate.finished))
        #expect(seen.values == ["A: workflow queue", "B: workflow queue"])
        #expect(queue.name == "68 custom")

        let byDefault = Workflow(name: "68 default")
        #expect(byDefault.queue !== queue)
        #expect(byDefault.queue.name == "Workflow.68 default")
        try byDefault.add(task("C", byDefault))
        let defaultDelegate = RecordingWorkflowDelegate()
        byDefault.delegate = defaultDelegate
        byDefault.start()
        #expect(await reached(defaultDelegate.finished))
        #expect(seen.values.last == "C: workflow queue")
        withExtendedLifetime((delegate, defaultDelegate)) {}
    }
}
