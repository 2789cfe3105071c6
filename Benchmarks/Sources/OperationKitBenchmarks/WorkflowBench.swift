// Workflow: the S4 layered graph as a 10,000-task workflow, run, reset and run again, against the
// same graph built twice from plain ConcurrentOperations (operations run once, so the second run
// needs new ones). Target: the workflow within 2x.

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
    return [
        "### Workflow against ConcurrentOperation (target: workflow / operations <= 2.0)",
        "",
        "| graph | workflow: build, run, reset, run ms | operations: build and run twice ms | workflow / operations |",
        "|---|---:|---:|---:|",
        "| \(layers) layers of \(width) (\(layers * width) tasks, \(edges) edges) | \(format(workflow)) | \(format(operations)) | \(format(workflow / operations)) |",
    ]
}
