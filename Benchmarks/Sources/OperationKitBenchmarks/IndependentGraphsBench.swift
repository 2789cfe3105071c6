// S6: four independent graphs at once — each a chain and a fan-in — on four queues against the same
// work on one queue and on raw Dispatch; and four independent workflows against one workflow.
//
// What it shows: whether unrelated queues (or workflows) slow each other down, as they do when they
// share one process-wide lock. Four lanes run at once, each started on its own thread; every lane
// builds its graph and waits for it, so building and running both count.

import Dispatch
import Foundation
import OperationKit

/// The number of independent lanes in S6.
let independentLanes = 4

/// One lane's graph: a chain of `length` nodes and `length` nodes plus one depending on all of
/// them, on `contender`. Checks the order and counts; returns nothing (the caller times).
func runChainAndFanIn<C: Contender>(on contender: C, length: Int, lane: Int) {
    let probe = Probe()
    let fanInProbe = Probe()
    var nodes: [C.Node] = []
    nodes.reserveCapacity(2 * length + 1)
    for index in 0..<length {
        nodes.append(contender.makeNode { probe.tick(expectingBefore: index) })
    }
    for index in 1..<length {
        contender.addDependency(nodes[index], on: nodes[index - 1])
    }
    var fanIn: [C.Node] = []
    fanIn.reserveCapacity(length)
    for _ in 0..<length {
        fanIn.append(contender.makeNode { fanInProbe.tick() })
    }
    let last = contender.makeNode { fanInProbe.tick(expectingBefore: length) }
    contender.addDependencies(last, on: fanIn)
    nodes.append(contentsOf: fanIn)
    nodes.append(last)
    contender.run(nodes)
    probe.verify(executed: length, in: "S6 lane \(lane) chain on \(C.name)")
    fanInProbe.verify(executed: length + 1, in: "S6 lane \(lane) fan-in on \(C.name)")
}

/// Runs `body(lane)` for every lane at once, each on its own thread, and returns the wall time in ms.
func timeLanes(_ body: @escaping @Sendable (Int) -> Void) -> Double {
    let start = ContinuousClock.now
    let group = DispatchGroup()
    for lane in 0..<independentLanes {
        // A thread per lane (not the global queue's pool): a lane blocks while it waits.
        group.enter()
        let thread = Thread {
            body(lane)
            group.leave()
        }
        thread.start()
    }
    group.wait()
    return milliseconds(start.duration(to: .now))
}

/// Four lanes, each with a queue of its own.
func runFourQueues(length: Int) -> Double {
    timeLanes { lane in runChainAndFanIn(on: OperationKitContender(), length: length, lane: lane) }
}

/// The same four lanes' graphs on one shared queue (each lane adds its graph and waits for the queue).
func runOneQueue(length: Int) -> Double {
    let shared = OperationKitContender()
    return timeLanes { lane in runChainAndFanIn(on: shared, length: length, lane: lane) }
}

/// The same four lanes on raw Dispatch.
func runFourDispatch(length: Int) -> Double {
    timeLanes { lane in runChainAndFanIn(on: DispatchContender(), length: length, lane: lane) }
}

// MARK: - Workflows

/// Adds one lane's graph to `workflow`: a chain of `half` tasks and `half - 1` tasks plus one
/// depending on all of them (`2 * half` tasks). `probe` counts the runs.
func addChainAndFanIn(to workflow: Workflow, half: Int, probe: Probe, fanInProbe: Probe, lane: Int) {
    var previous: WorkflowTask?
    for index in 0..<half {
        let task = ClosureTask(name: "chain \(lane).\(index)") { run in
            probe.tick(expectingBefore: index)
            run.finish(with: nil)
        }
        do {
            try workflow.add(task, prerequisites: previous.map { [$0] } ?? [])
        } catch {
            fail("S6 workflow lane \(lane): adding a chain task failed: \(error)")
        }
        previous = task
    }
    var fanIn: [WorkflowTask] = []
    fanIn.reserveCapacity(half - 1)
    for index in 0..<(half - 1) {
        let task = ClosureTask(name: "fan \(lane).\(index)") { run in
            fanInProbe.tick()
            run.finish(with: nil)
        }
        do { try workflow.add(task, prerequisites: []) } catch { fail("S6 workflow lane \(lane): adding failed: \(error)") }
        fanIn.append(task)
    }
    let last = ClosureTask(name: "fan \(lane).last") { run in
        fanInProbe.tick(expectingBefore: half - 1)
        run.finish(with: nil)
    }
    do { try workflow.add(last, prerequisites: fanIn) } catch { fail("S6 workflow lane \(lane): adding failed: \(error)") }
}

/// Four workflows of `2 * half` tasks, one per lane, each on its own queue (the default).
func runFourWorkflows(half: Int) -> Double {
    timeLanes { lane in
        let probe = Probe()
        let fanInProbe = Probe()
        let workflow = Workflow(name: "S6 lane \(lane)")
        let latch = WorkflowFinishLatch()
        workflow.delegate = latch
        addChainAndFanIn(to: workflow, half: half, probe: probe, fanInProbe: fanInProbe, lane: lane)
        workflow.start()
        latch.semaphore.wait()
        probe.verify(executed: half, in: "S6 workflow lane \(lane) chain")
        fanInProbe.verify(executed: half, in: "S6 workflow lane \(lane) fan-in")
    }
}

/// The same four lanes' graphs in one workflow: every lane adds its tasks at once, then the
/// workflow starts once all are added.
func runOneWorkflow(half: Int) -> Double {
    let workflow = Workflow(name: "S6 shared")
    let latch = WorkflowFinishLatch()
    workflow.delegate = latch
    let probes = (0..<independentLanes).map { _ in (Probe(), Probe()) }
    let built = DispatchGroup()
    for _ in 0..<independentLanes { built.enter() }
    let start = ContinuousClock.now
    let lanes = DispatchGroup()
    for lane in 0..<independentLanes {
        lanes.enter()
        Thread {
            addChainAndFanIn(to: workflow, half: half, probe: probes[lane].0, fanInProbe: probes[lane].1, lane: lane)
            built.leave()
            lanes.leave()
        }.start()
    }
    built.wait()
    workflow.start()
    latch.semaphore.wait()
    lanes.wait()
    let elapsed = milliseconds(start.duration(to: .now))
    for (lane, (probe, fanInProbe)) in probes.enumerated() {
        probe.verify(executed: half, in: "S6 shared workflow lane \(lane) chain")
        fanInProbe.verify(executed: half, in: "S6 shared workflow lane \(lane) fan-in")
    }
    return elapsed
}

/// The same four lanes' task graphs on raw Dispatch (`2 * half` nodes each).
func runFourDispatchWorkflowShapes(half: Int) -> Double {
    timeLanes { lane in
        let contender = DispatchContender()
        let probe = Probe()
        let fanInProbe = Probe()
        var nodes: [DispatchNode] = []
        nodes.reserveCapacity(2 * half)
        for index in 0..<half { nodes.append(contender.makeNode { probe.tick(expectingBefore: index) }) }
        for index in 1..<half { contender.addDependency(nodes[index], on: nodes[index - 1]) }
        let fanIn = (0..<(half - 1)).map { _ in contender.makeNode { fanInProbe.tick() } }
        let last = contender.makeNode { fanInProbe.tick(expectingBefore: half - 1) }
        contender.addDependencies(last, on: fanIn)
        contender.run(nodes + fanIn + [last])
        probe.verify(executed: half, in: "S6 Dispatch lane \(lane) chain")
        fanInProbe.verify(executed: half, in: "S6 Dispatch lane \(lane) fan-in")
    }
}

/// Runs each variant `runs` times, taking turns, after one warm-up each; returns the medians.
func alternate(_ variants: [() -> Double], runs: Int) -> [[Double]] {
    for variant in variants { _ = variant() }
    var samples = Array(repeating: [Double](), count: variants.count)
    for _ in 0..<runs {
        for (index, variant) in variants.enumerated() { samples[index].append(variant()) }
    }
    return samples
}

/// The S6 section of the report.
func independentGraphsReport(sizes: Sizes) -> [String] {
    let length = sizes.chain
    let half = sizes.chain / 2
    let runs = sizes.runs
    let lanes = independentLanes
    report("## S6 \(lanes) independent lanes at once, each a chain of \(length) and \(length) + 1 depending on all")
    let queueSamples = alternate([
        { runFourQueues(length: length) }, { runOneQueue(length: length) }, { runFourDispatch(length: length) },
    ], runs: runs)
    let fourQueues = summarize("4 queues", queueSamples[0], plan: Plan(warmUp: true, runs: runs))
    let oneQueue = summarize("1 queue", queueSamples[1], plan: Plan(warmUp: true, runs: runs))
    let dispatch = summarize("Dispatch", queueSamples[2], plan: Plan(warmUp: true, runs: runs))
    report("## S6 \(lanes) independent workflows at once, each a chain of \(half) and \(half - 1) + 1 depending on all (\(2 * half) tasks)")
    let workflowSamples = alternate([
        { runFourWorkflows(half: half) }, { runOneWorkflow(half: half) }, { runFourDispatchWorkflowShapes(half: half) },
    ], runs: runs)
    let fourWorkflows = summarize("4 workflows", workflowSamples[0], plan: Plan(warmUp: true, runs: runs))
    let oneWorkflow = summarize("1 workflow", workflowSamples[1], plan: Plan(warmUp: true, runs: runs))
    let workflowDispatch = summarize("Dispatch", workflowSamples[2], plan: Plan(warmUp: true, runs: runs))
    return [
        "### S6: independent queues and workflows (\(lanes) lanes at once; target: independent / shared <= 1.0)",
        "",
        "| work | independent ms | one shared ms | Dispatch ms | independent / shared | independent / Dispatch |",
        "|---|---:|---:|---:|---:|---:|",
        "| \(lanes) queues, chain \(length) + fan-in \(length) each | \(format(fourQueues)) | \(format(oneQueue)) | \(format(dispatch)) | \(format(fourQueues / oneQueue)) | \(format(fourQueues / dispatch)) |",
        "| \(lanes) workflows, \(2 * half) tasks each | \(format(fourWorkflows)) | \(format(oneWorkflow)) | \(format(workflowDispatch)) | \(format(fourWorkflows / oneWorkflow)) | \(format(fourWorkflows / workflowDispatch)) |",
    ]
}
