// Workflow: S1-S5 as workflows run once against the same graphs of ClosureOperations (target: the
// workflow within 1.5x on S1-S4; S5 adds to a suspended workflow), and the S4 layered graph as a
// 10,000-task workflow, run, reset and run again, against the same graph built twice from plain
// ConcurrentOperations (operations run once, so the second run needs new ones). Target: within 2x.

import Foundation
import OperationKit
import Synchronization

/// Counts task runs, and checks each layer ran after the previous one finished.
final class WorkflowProbe: Sendable {
    let executed = Atomic<Int>(0)
    let outOfOrder = Atomic<Int>(0)
    final class Cell: Sendable { let value = Atomic<Int>(0) }
    let layerDone: [Cell]
    let width: Int

    init(layers: Int, width: Int) {
        self.width = width
        layerDone = (0..<layers).map { _ in Cell() }
    }

    func ran(layer: Int) {
        if layer > 0 && layerDone[layer - 1].value.load(ordering: .acquiring) != width {
            outOfOrder.wrappingAdd(1, ordering: .relaxed)
        }
        executed.wrappingAdd(1, ordering: .relaxed)
        layerDone[layer].value.wrappingAdd(1, ordering: .releasing)
    }

    func reset() {
        executed.store(0, ordering: .relaxed)
        for done in layerDone { done.value.store(0, ordering: .relaxed) }
    }

    func verify(_ what: String) {
        let count = executed.load(ordering: .acquiring)
        let expected = layerDone.count * width
        if count != expected || outOfOrder.load(ordering: .acquiring) != 0 {
            fail("\(what): \(count) of \(expected) tasks ran, \(outOfOrder.load(ordering: .acquiring)) out of order")
        }
    }
}

/// Finishes when the workflow does.
final class WorkflowFinishLatch: WorkflowDelegate, @unchecked Sendable {
    let semaphore = DispatchSemaphore(value: 0)
    func workflowDidFinish(_ workflow: Workflow) { semaphore.signal() }
}

/// Builds the layered workflow (outside the timed part it is not: building is part of the work),
/// runs it, resets it and runs it again. Returns the time in ms.
func runWorkflowTwice(layers: Int, width: Int) -> Double {
    let probe = WorkflowProbe(layers: layers, width: width)
    let start = ContinuousClock.now
    let workflow = Workflow(name: "S4 workflow")
    let latch = WorkflowFinishLatch()
    workflow.delegate = latch
    var previous: [WorkflowTask] = []
    for layer in 0..<layers {
        var current: [WorkflowTask] = []
        current.reserveCapacity(width)
        for _ in 0..<width {
            let task = ClosureTask(name: "t") { run in
                probe.ran(layer: layer)
                run.finish(with: nil)
            }
            do {
                try workflow.add(task, prerequisites: previous)
            } catch {
                fail("adding a task failed: \(error)")
            }
            current.append(task)
        }
        previous = current
    }
    workflow.start()
    latch.semaphore.wait()
    probe.verify("workflow run 1")
    probe.reset()
    workflow.reset()
    workflow.start()
    latch.semaphore.wait()
    probe.verify("workflow run 2")
    return milliseconds(start.duration(to: .now))
}

/// The same graph as ClosureOperations, built and run twice.
func runOperationsTwice(layers: Int, width: Int) -> Double {
    let probe = WorkflowProbe(layers: layers, width: width)
    let start = ContinuousClock.now
    for round in 1...2 {
        let queue = ConcurrentOperationQueue(name: "S4 operations")
        var all: [ConcurrentOperation] = []
        all.reserveCapacity(layers * width)
        var previous: [ConcurrentOperation] = []
        for layer in 0..<layers {
            var current: [ConcurrentOperation] = []
            current.reserveCapacity(width)
            for _ in 0..<width {
                let operation = ClosureOperation { probe.ran(layer: layer) }
                if !previous.isEmpty {
                    do { try operation.addDependencies(previous) } catch { fail("addDependencies failed: \(error)") }
                }
                current.append(operation)
            }
            all.append(contentsOf: current)
            previous = current
        }
        do {
            try queue.addOperations(all, waitUntilFinished: false)
        } catch {
            fail("addOperations failed: \(error)")
        }
        queue.waitUntilAllOperationsAreFinishedBlocking()
        probe.verify("operations run \(round)")
        probe.reset()
    }
    return milliseconds(start.duration(to: .now))
}

/// The workflow section of the report.
func workflowReport(sizes: Sizes) -> [String] {
    let layers = sizes.layers
    let width = sizes.layerWidth
    let runs = sizes.runs
    report("## Workflow: \(layers) layers of \(width) tasks, run, reset, run again")
    _ = runWorkflowTwice(layers: layers, width: width)
    _ = runOperationsTwice(layers: layers, width: width)
    var workflowTimes: [Double] = []
    var operationTimes: [Double] = []
    for _ in 0..<runs {
        workflowTimes.append(runWorkflowTwice(layers: layers, width: width))
        operationTimes.append(runOperationsTwice(layers: layers, width: width))
    }
    let workflow = median(workflowTimes)
    let operations = median(operationTimes)
    report("  Workflow       median \(format(workflow)) ms  (\(runs) runs; min \(format(workflowTimes.min() ?? 0)), max \(format(workflowTimes.max() ?? 0)))")
    report("  operations x2  median \(format(operations)) ms  (\(runs) runs; min \(format(operationTimes.min() ?? 0)), max \(format(operationTimes.max() ?? 0)))")
    let edges = (layers - 1) * width * width
    let scenarioRows = workflowScenarioReport(sizes: sizes)
    return scenarioRows + [
        "",
        "### Workflow against ConcurrentOperation (target: workflow / operations <= 2.0)",
        "",
        "| graph | workflow: build, run, reset, run ms | operations: build and run twice ms | workflow / operations |",
        "|---|---:|---:|---:|",
        "| \(layers) layers of \(width) (\(layers * width) tasks, \(edges) edges) | \(format(workflow)) | \(format(operations)) | \(format(workflow / operations)) |",
    ]
}

// MARK: - S1-S5 as workflows, run once

/// One task of the workflow contender, with the prerequisites it gets when the graph is handed over
/// (`Workflow.add` takes a task's prerequisites with the task, and they must be in the workflow first).
final class WorkflowNode: @unchecked Sendable {  // prerequisites are written only while the graph is built
    let task: WorkflowTask
    var prerequisites: [WorkflowTask] = []

    init(_ task: WorkflowTask) {
        self.task = task
    }
}

/// The tasks of the last array of nodes given as dependencies, kept while the same array comes
/// again (compared by its storage). Used only while the graph is built, on one thread.
final class LayerTasks: @unchecked Sendable {
    private var nodes: [WorkflowNode] = []
    private var cached: [WorkflowTask] = []

    func tasks(of dependencies: [WorkflowNode]) -> [WorkflowTask] {
        let same = dependencies.count == nodes.count && dependencies.withUnsafeBufferPointer { given in
            nodes.withUnsafeBufferPointer { kept in given.baseAddress == kept.baseAddress }
        }
        if !same {
            nodes = dependencies
            cached = dependencies.map(\.task)
        }
        return cached
    }
}

/// A `Workflow` of `ClosureTask`s (each runs the body, then finishes its run), on the workflow's own
/// queue with the default concurrency: S1-S4 are built, added in order (every scenario lists a node
/// after its prerequisites), started once and waited for with the workflow's delegate. Where no task
/// has prerequisites and all run the same body (S1, S5), the tasks are made without nodes and share
/// one closure, as the other contenders share the body (and as a user writes a literal). S5 adds the
/// tasks to a suspended workflow, starts it (every task is held), cancels it, resumes it and waits
/// for its queue.
struct WorkflowContender: Contender {
    static let name = "Workflow"

    let workflow = Workflow(name: "bench")
    private let latch = WorkflowFinishLatch()
    private let layerTasks = LayerTasks()

    init() {
        workflow.delegate = latch
    }

    func makeNode(_ body: @escaping @Sendable () -> Void) -> WorkflowNode {
        WorkflowNode(ClosureTask(name: "t") { run in
            body()
            run.finish(with: nil)
        })
    }

    func addDependency(_ node: WorkflowNode, on dependency: WorkflowNode) {
        node.prerequisites.append(dependency.task)
    }

    /// S4 gives the same array of nodes (the layer before) to every node of a layer: its tasks
    /// are listed once per layer and that array is shared, as a user writing the layers as a
    /// workflow lists a layer's tasks once (S4's 9,900 lists of 100 would otherwise be made
    /// and retained element by element, 990,000 retains the other contenders do not pay).
    func addDependencies(_ node: WorkflowNode, on dependencies: [WorkflowNode]) {
        let tasks = layerTasks.tasks(of: dependencies)
        if node.prerequisites.isEmpty {
            node.prerequisites = tasks
        } else {
            node.prerequisites.append(contentsOf: tasks)
        }
    }

    private func add(_ node: WorkflowNode) {
        do {
            try workflow.add(node.task, prerequisites: node.prerequisites)
        } catch {
            fail("\(Self.name) refused a task: \(error)")
        }
    }

    func run(_ nodes: [WorkflowNode]) {
        for node in nodes { add(node) }
        workflow.start()
        latch.semaphore.wait()
    }

    /// The closure of every task when all run the same body (S1, S5), made once, as a user
    /// writes a literal closure: a closure made per task would allocate a context per task.
    private func sharedClosure(_ body: @escaping @Sendable () -> Void) -> @Sendable (WorkflowTaskRun) -> Void {
        { run in
            body()
            run.finish(with: nil)
        }
    }

    /// Adds a task of its own, without prerequisites.
    private func add(_ task: WorkflowTask) {
        do {
            try workflow.add(task)
        } catch {
            fail("\(Self.name) refused a task: \(error)")
        }
    }

    /// The tasks have no prerequisites: they are made and added as they are, with no node.
    func runIndependent(count: Int, body: @escaping @Sendable () -> Void) {
        let closure = sharedClosure(body)
        var tasks: [WorkflowTask] = []
        tasks.reserveCapacity(count)
        for _ in 0..<count { tasks.append(ClosureTask(name: "t", closure)) }
        for task in tasks { add(task) }
        workflow.start()
        latch.semaphore.wait()
    }

    /// A workflow adds its tasks one by one anyway; each is added as soon as it is made.
    func runIndependentOneByOne(count: Int, body: @escaping @Sendable () -> Void) {
        let closure = sharedClosure(body)
        for _ in 0..<count { add(ClosureTask(name: "t", closure)) }
        workflow.start()
        latch.semaphore.wait()
    }

    func runSuspended(
        count: Int,
        cancelling: Bool,
        oneByOne: Bool,
        body: @escaping @Sendable () -> Void,
        beforeCreating: () -> Void,
        afterAdding: () -> Void
    ) {
        workflow.isSuspended = true
        beforeCreating()
        let closure = sharedClosure(body)
        for _ in 0..<count { add(ClosureTask(name: "t", closure)) }
        workflow.start()
        afterAdding()
        if cancelling { workflow.cancel() }
        workflow.isSuspended = false
        if cancelling {
            workflow.queue.waitUntilAllOperationsAreFinishedBlocking()
        } else {
            latch.semaphore.wait()
        }
    }

    /// Every task ran once and finished (S1-S4), or none executed and each was cancelled (S5).
    func verify(finished: Int, conditionsEvaluated: Int, in what: String) {
        let tasks = workflow.allTasks
        let expected: WorkflowTaskState = conditionsEvaluated == 0 ? .cancelled : .finished
        let matching = tasks.count(where: { $0.state == expected })
        if tasks.count != finished || matching != finished {
            fail("\(what): \(matching) of \(tasks.count) tasks \(expected), expected \(finished)")
        }
    }
}

/// S1-S5 as workflows against the same graphs of `ClosureOperation`s, taking turns run by run.
func workflowScenarioReport(sizes: Sizes) -> [String] {
    let scenarios: [Scenario] = [.independent, .chain, .fanIn, .layers, .cancelled]
    var rows: [String] = []
    for scenario in scenarios {
        report("## Workflow: \(scenario.title(sizes)), run once")
        _ = scenario.run(on: WorkflowContender.self, sizes: sizes)
        _ = scenario.run(on: OperationKitContender.self, sizes: sizes)
        var workflowTimes: [Double] = []
        var operationTimes: [Double] = []
        for _ in 0..<sizes.runs {
            workflowTimes.append(scenario.run(on: WorkflowContender.self, sizes: sizes))
            operationTimes.append(scenario.run(on: OperationKitContender.self, sizes: sizes))
        }
        let plan = Plan(warmUp: true, runs: sizes.runs)
        let workflow = summarize(WorkflowContender.name, workflowTimes, plan: plan)
        let operations = summarize(OperationKitContender.name, operationTimes, plan: plan)
        let ratio = pairedRatioValue(workflowTimes, operationTimes) ?? workflow / operations
        let over = scenario != .cancelled && ratio > workflowTarget ? " (over)" : ""
        rows.append("| \(scenario.title(sizes)) | \(format(workflow)) | \(format(operations)) | \(format(ratio))\(over) |")
    }
    return [
        "### Workflow against ClosureOperation, run once (target: Workflow / ClosureOperation <= \(format(workflowTarget, decimals: 1)) on S1-S4)",
        "",
        "| scenario | Workflow ms | ClosureOperation ms | Workflow / ClosureOperation |",
        "|---|---:|---:|---:|",
    ] + rows
}

/// The most a workflow may cost relative to the same graph of `ClosureOperation`s (S1-S4, run once).
let workflowTarget = 1.5
