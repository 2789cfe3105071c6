// S4 written with layers (issue 17): the same 100 layers of 100 bodies, each depending on every body
// of the layer before, with one `OperationLayer` per layer (each body depends on the layer before:
// about 2 × 10,000 edges instead of 990,000), against Swift task groups run as barriers (one
// `withDiscardingTaskGroup` per layer, awaited before the next) and, for reference, OperationKit's
// S4 with one edge per pair (the main table's row). Target: OK with layers / task groups <= 1.5.
// Reported, not enforced; a wrong result (a body that ran before its layer's predecessors, a body
// that did not run) fails the run.

import Dispatch
import OperationKit

/// The target of the section: OK S4 with layers / task groups.
let layersTarget = 1.5

/// The contenders of the section.
enum LayersContender: CaseIterable {
    /// `ClosureOperation`s on a `ConcurrentOperationQueue`, each depending on the previous layer's
    /// `OperationLayer`; all added in one batch, as the main table's S4 adds its nodes.
    case operationKitLayers
    /// One `withDiscardingTaskGroup` per layer, one `addTask` per body, awaited before the next layer.
    case taskGroups
    /// The main table's S4 on `ClosureOperation`: one `addDependencies` of the whole previous layer.
    case operationKitEdges

    var name: String {
        switch self {
        case .operationKitLayers: return "OK layers"
        case .taskGroups: return "task groups"
        case .operationKitEdges: return "OK per edge"
        }
    }

    /// Runs S4 once and returns the wall time in ms (build + add + wait).
    func run(sizes: Sizes) -> Double {
        switch self {
        case .operationKitLayers: return runLayersWithOperationLayers(layers: sizes.layers, width: sizes.layerWidth)
        case .taskGroups: return runLayersWithTaskGroups(layers: sizes.layers, width: sizes.layerWidth)
        case .operationKitEdges: return runLayers(OperationKitContender.self, layers: sizes.layers, width: sizes.layerWidth)
        }
    }
}

/// The body of S4: checks the layer before has finished, then counts itself.
private func layerBody(_ layer: Int, width: Int, probe: Probe, counts: LayerCounts) -> @Sendable () -> Void {
    {
        if layer > 0 && counts.finished(layer - 1) != width {
            probe.recordViolation()
        }
        probe.tick()
        counts.markFinished(layer)
    }
}

/// S4 with one `OperationLayer` per layer.
func runLayersWithOperationLayers(layers: Int, width: Int) -> Double {
    let probe = Probe()
    let counts = LayerCounts(layers: layers)
    let queue = ConcurrentOperationQueue(name: "bench layers")
    let start = ContinuousClock.now
    var all: [ConcurrentOperation] = []
    all.reserveCapacity(layers * width)
    var previous: OperationLayer?
    for layer in 0..<layers {
        var members: [ConcurrentOperation] = []
        members.reserveCapacity(width)
        for _ in 0..<width {
            let operation = ClosureOperation(layerBody(layer, width: width, probe: probe, counts: counts))
            if let previous {
                do { try operation.addDependency(previous) } catch { fail("S4 with layers: \(error)") }
            }
            members.append(operation)
        }
        all.append(contentsOf: members)
        previous = OperationLayer(members)
    }
    do { try queue.addOperations(all, waitUntilFinished: false) } catch { fail("S4 with layers: \(error)") }
    queue.waitUntilAllOperationsAreFinishedBlocking()
    let elapsed = start.duration(to: .now)
    probe.verify(executed: layers * width, in: "S4 with layers")
    if previous?.isFinished != true { fail("S4 with layers: the last layer did not finish") }
    return milliseconds(elapsed)
}

/// S4 as task groups run as barriers.
func runLayersWithTaskGroups(layers: Int, width: Int) -> Double {
    let probe = Probe()
    let counts = LayerCounts(layers: layers)
    let start = ContinuousClock.now
    blockUntilDone {
        for layer in 0..<layers {
            let body = layerBody(layer, width: width, probe: probe, counts: counts)
            await withDiscardingTaskGroup { group in
                for _ in 0..<width {
                    group.addTask(operation: body)
                }
            }
        }
    }
    let elapsed = start.duration(to: .now)
    probe.verify(executed: layers * width, in: "S4 with task groups")
    return milliseconds(elapsed)
}

/// Runs the section (contenders taking turns, one warm-up each) and returns its table and target line.
func layersReport(sizes: Sizes) -> [String] {
    let title = "S4 with layers: \(sizes.layers) layers of \(sizes.layerWidth)"
    report("## \(title)")
    let contenders = LayersContender.allCases
    for contender in contenders { _ = contender.run(sizes: sizes) }
    var samples: [LayersContender: [Double]] = [:]
    for _ in 0..<sizes.runs {
        for contender in contenders {
            samples[contender, default: []].append(contender.run(sizes: sizes))
        }
    }
    let plan = Plan(warmUp: true, runs: sizes.runs)
    var medians: [LayersContender: Double] = [:]
    for contender in contenders {
        medians[contender] = summarize(contender.name, samples[contender] ?? [], plan: plan)
    }
    let layered = medians[.operationKitLayers] ?? .nan
    let groups = medians[.taskGroups] ?? .nan
    let edges = medians[.operationKitEdges] ?? .nan
    // Paired by round, as the main table's ratios (`pairedRatioValue`).
    let ratio = pairedRatioValue(samples[.operationKitLayers] ?? [], samples[.taskGroups] ?? []) ?? layered / groups
    let perEdge = pairedRatioValue(samples[.operationKitLayers] ?? [], samples[.operationKitEdges] ?? []) ?? layered / edges
    let edgeCount = (sizes.layers - 1) * sizes.layerWidth * sizes.layerWidth
    let layeredEdges = 2 * sizes.layers * sizes.layerWidth - 2 * sizes.layerWidth
    return [
        "### \(title) (ClosureOperation; task groups as barriers)",
        "",
        "| scenario | OK with layers ms | task groups ms | OK per edge ms | OK layers / task groups "
            + "| OK layers / OK per edge |",
        "|---|---:|---:|---:|---:|---:|",
        "| \(title) | \(format(layered)) | \(format(groups)) | \(format(edges)) | \(format(ratio)) "
            + "| \(format(perEdge)) |",
        "",
        "OK with layers registers about \(layeredEdges) edges (one per member to its layer, one per dependent "
            + "from the layer before); OK per edge registers \(edgeCount).",
        "OK S4 with layers / task groups = \(format(ratio)) (target <= \(format(layersTarget, decimals: 1))): "
            + (ratio <= layersTarget ? "met" : "NOT met"),
    ]
}
