import Synchronization

/// Workload sizes for one invocation: full sizes, or the small CI sizes with `--quick`.
struct Sizes {
    let quick: Bool

    var independent: Int { quick ? 20_000 : 100_000 }
    var chain: Int { quick ? 2_000 : 10_000 }
    var fanIn: Int { quick ? 2_000 : 10_000 }
    var layers: Int { quick ? 20 : 100 }
    var layerWidth: Int { quick ? 20 : 100 }
    var cancelled: Int { quick ? 20_000 : 100_000 }
    /// Requests per run in the state-machine section.
    var transitions: Int { quick ? 200_000 : 2_000_000 }
    /// Quick mode's cap on one state-machine run, in ms (a slower contender makes fewer requests).
    var transitionRunBudget: Double? { quick ? 80 : nil }
    /// Measured runs per scenario and contender, after one warm-up run.
    var runs: Int { quick ? 3 : 5 }
}

/// The scenarios of the comparison table, in the order they run and are printed. S1 and S5 come twice:
/// batched (one `addOperations` call) and one by one (one `addOperation` per operation).
enum Scenario: CaseIterable {
    case independent
    case independentOneByOne
    case chain
    case fanIn
    case layers
    case cancelled
    case cancelledOneByOne

    /// Whether the scenario needs suspension and cancellation (the minimal scheduler has neither).
    var needsCancellation: Bool {
        self == .cancelled || self == .cancelledOneByOne
    }

    func title(_ sizes: Sizes) -> String {
        switch self {
        case .independent:
            return "S1 \(sizes.independent) independent"
        case .independentOneByOne:
            return "S1 one-by-one, \(sizes.independent) independent"
        case .chain:
            return "S2 chain of \(sizes.chain)"
        case .fanIn:
            return "S3 \(sizes.fanIn) + 1 depending on all"
        case .layers:
            let edges = (sizes.layers - 1) * sizes.layerWidth * sizes.layerWidth
            return "S4 \(sizes.layers) layers of \(sizes.layerWidth) (\(edges) edges)"
        case .cancelled:
            return "S5 \(sizes.cancelled) cancelled while suspended"
        case .cancelledOneByOne:
            return "S5 one-by-one, \(sizes.cancelled) cancelled while suspended"
        }
    }

    /// Runs the scenario once on a fresh contender, checks the outcome and returns the wall time in ms.
    func run<C: Contender>(on contender: C.Type, sizes: Sizes) -> Double {
        switch self {
        case .independent:
            return runIndependent(C.self, count: sizes.independent)
        case .independentOneByOne:
            return runIndependent(C.self, count: sizes.independent, oneByOne: true)
        case .chain:
            return runChain(C.self, length: sizes.chain)
        case .fanIn:
            return runFanIn(C.self, count: sizes.fanIn)
        case .layers:
            return runLayers(C.self, layers: sizes.layers, width: sizes.layerWidth)
        case .cancelled:
            return runCancelled(C.self, count: sizes.cancelled)
        case .cancelledOneByOne:
            return runCancelled(C.self, count: sizes.cancelled, oneByOne: true)
        }
    }
}

// MARK: - Correctness probes

/// Counts executed bodies and dependency-order violations; shared by every body of one run.
final class Probe: Sendable {
    private let executed = Atomic<Int>(0)
    private let violations = Atomic<Int>(0)

    /// Counts one execution.
    func tick() {
        executed.wrappingAdd(1, ordering: .relaxed)
    }

    /// Counts one execution, and a violation unless exactly `expected` executions were counted before it.
    func tick(expectingBefore expected: Int) {
        let before = executed.wrappingAdd(1, ordering: .acquiringAndReleasing).oldValue
        if before != expected {
            violations.wrappingAdd(1, ordering: .relaxed)
        }
    }

    /// The bodies counted so far (for a description of a hung run).
    var executedCount: Int { executed.load(ordering: .acquiring) }

    func recordViolation() {
        violations.wrappingAdd(1, ordering: .relaxed)
    }

    /// Stops the process unless exactly `expected` bodies ran and no order violation was seen.
    func verify(executed expected: Int, in what: String) {
        let actual = executed.load(ordering: .acquiring)
        let violationCount = violations.load(ordering: .acquiring)
        if actual != expected {
            fail("\(what): \(actual) bodies ran, expected \(expected)")
        }
        if violationCount != 0 {
            fail("\(what): \(violationCount) dependency-order violations")
        }
    }
}

/// One atomic counter per layer of the layered graph, counting finished bodies of that layer.
final class LayerCounts {
    private let counts: UnsafeMutablePointer<Atomic<Int>>
    private let layers: Int

    init(layers: Int) {
        self.layers = layers
        counts = .allocate(capacity: layers)
        for layer in 0..<layers {
            (counts + layer).initialize(to: Atomic(0))
        }
    }

    deinit {
        counts.deinitialize(count: layers)
        counts.deallocate()
    }

    func finished(_ layer: Int) -> Int {
        counts[layer].load(ordering: .acquiring)
    }

    func markFinished(_ layer: Int) {
        counts[layer].wrappingAdd(1, ordering: .acquiringAndReleasing)
    }
}

// The pointer is set once in init and only reaches atomics through it.
extension LayerCounts: @unchecked Sendable {}

// MARK: - Scenario bodies

/// Converts a measured duration to milliseconds.
func milliseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
}

/// S1: `count` bodies with no dependencies, added in one batch or (`oneByOne`) one at a time.
func runIndependent<C: Contender>(_: C.Type, count: Int, oneByOne: Bool = false) -> Double {
    let contender = C()
    let probe = Probe()
    let what = oneByOne ? "S1 one-by-one on \(C.name)" : "S1 on \(C.name)"
    let start = ContinuousClock.now
    if oneByOne {
        contender.runIndependentOneByOne(count: count) { probe.tick() }
    } else {
        contender.runIndependent(count: count) { probe.tick() }
    }
    let elapsed = start.duration(to: .now)
    probe.verify(executed: count, in: what)
    contender.verify(finished: count, conditionsEvaluated: count, in: what)
    return milliseconds(elapsed)
}

/// S2: a chain in which node i depends on node i - 1; each node checks it runs exactly i-th.
func runChain<C: Contender>(_: C.Type, length: Int) -> Double {
    let contender = C()
    let probe = Probe()
    let start = ContinuousClock.now
    var nodes: [C.Node] = []
    nodes.reserveCapacity(length)
    for index in 0..<length {
        nodes.append(contender.makeNode { probe.tick(expectingBefore: index) })
    }
    for index in 1..<length {
        contender.addDependency(nodes[index], on: nodes[index - 1])
    }
    contender.run(nodes)
    let elapsed = start.duration(to: .now)
    probe.verify(executed: length, in: "S2 (\(length)) on \(C.name)")
    contender.verify(finished: length, conditionsEvaluated: length, in: "S2 (\(length)) on \(C.name)")
    return milliseconds(elapsed)
}

/// S3: `count` independent nodes and a final one depending on all of them, which checks they all ran.
func runFanIn<C: Contender>(_: C.Type, count: Int) -> Double {
    let contender = C()
    let probe = Probe()
    let start = ContinuousClock.now
    var nodes: [C.Node] = []
    nodes.reserveCapacity(count + 1)
    for _ in 0..<count {
        nodes.append(contender.makeNode { probe.tick() })
    }
    let last = contender.makeNode { probe.tick(expectingBefore: count) }
    for index in 0..<count {
        contender.addDependency(last, on: nodes[index])
    }
    nodes.append(last)
    contender.run(nodes)
    let elapsed = start.duration(to: .now)
    probe.verify(executed: count + 1, in: "S3 on \(C.name)")
    contender.verify(finished: count + 1, conditionsEvaluated: count + 1, in: "S3 on \(C.name)")
    return milliseconds(elapsed)
}

/// S4: `layers` layers of `width` nodes, each depending on every node of the layer before.
func runLayers<C: Contender>(_: C.Type, layers: Int, width: Int) -> Double {
    let contender = C()
    let probe = Probe()
    let layerCounts = LayerCounts(layers: layers)
    let start = ContinuousClock.now
    var nodes: [C.Node] = []
    nodes.reserveCapacity(layers * width)
    for layer in 0..<layers {
        for _ in 0..<width {
            nodes.append(contender.makeNode {
                if layer > 0 && layerCounts.finished(layer - 1) != width {
                    probe.recordViolation()
                }
                probe.tick()
                layerCounts.markFinished(layer)
            })
        }
    }
    for layer in 1..<layers {
        let previous = Array(nodes[((layer - 1) * width)..<(layer * width)])
        for node in (layer * width)..<((layer + 1) * width) {
            contender.addDependencies(nodes[node], on: previous)
        }
    }
    contender.run(nodes)
    let elapsed = start.duration(to: .now)
    probe.verify(executed: layers * width, in: "S4 on \(C.name)")
    contender.verify(finished: layers * width, conditionsEvaluated: layers * width, in: "S4 on \(C.name)")
    return milliseconds(elapsed)
}

/// S5: `count` units added (in one batch or one by one) to a suspended scheduler, all cancelled, then
/// resumed and drained; none may run.
func runCancelled<C: Contender>(_: C.Type, count: Int, oneByOne: Bool = false) -> Double {
    let contender = C()
    let probe = Probe()
    let what = oneByOne ? "S5 one-by-one on \(C.name)" : "S5 on \(C.name)"
    let start = ContinuousClock.now
    contender.runSuspended(count: count, cancelling: true, oneByOne: oneByOne) { probe.tick() }
    let elapsed = start.duration(to: .now)
    probe.verify(executed: 0, in: what)
    // Cancelled before they started: every one finishes, none evaluates its conditions.
    contender.verify(finished: count, conditionsEvaluated: 0, in: what)
    return milliseconds(elapsed)
}
