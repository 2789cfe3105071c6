import Foundation

// `--probe CONTENDER SCENARIO COUNT`: one run of one scenario on one contender, untimed and with no
// warm-up, for counting instructions under callgrind. Instructions per operation are the difference
// between two counts divided by the difference in size, which cancels start-up and the contender's
// one-time costs:
//
//   valgrind --tool=callgrind --callgrind-out-file=a.out OperationKitBenchmarks --probe ok s1 20000
//   valgrind --tool=callgrind --callgrind-out-file=b.out OperationKitBenchmarks --probe ok s1 40000
//   per operation = (total(b) − total(a)) / 20000
//
// `Benchmarks/callgrind.sh` does exactly that. The scenarios are the table's, with the same bodies and
// checks: s1 (batched), s1one (one by one), s2, s3, s4 (COUNT layers of 100), s5, s5one.

/// Runs the probe the arguments ask for, or stops the process with the usage.
func runInstructionProbe(_ arguments: [String]) -> Never {
    let usage = "usage: OperationKitBenchmarks --probe ok|procedure|bare|async|workflow|dispatch|minimal "
        + "s1|s1one|s2|s3|s4|s5|s5one COUNT"
    guard arguments.count == 3, let count = Int(arguments[2]), count > 1 else {
        fail(usage)
    }
    guard let scenario = probeScenario(arguments[1]) else { fail(usage) }
    switch arguments[0] {
    case "ok": probe(scenario, on: OperationKitContender.self, count: count)
    case "procedure": probe(scenario, on: ProcedureContender.self, count: count)
    case "bare": probe(scenario, on: BareProcedureContender.self, count: count)
    case "async": probe(scenario, on: AsyncOperationContender.self, count: count)
    case "workflow": probe(scenario, on: WorkflowContender.self, count: count)
    case "dispatch": probe(scenario, on: DispatchContender.self, count: count)
    case "minimal": probe(scenario, on: MinimalContender.self, count: count)
    default: fail(usage)
    }
    exit(0)
}

private func probe<C: Contender>(_ scenario: Scenario, on contender: C.Type, count: Int) {
    if scenario.needsCancellation && !C.supportsCancellation {
        fail("\(C.name) cannot run \(scenario)")
    }
    switch scenario {
    case .independent: _ = runIndependent(C.self, count: count)
    case .independentOneByOne: _ = runIndependent(C.self, count: count, oneByOne: true)
    case .chain: _ = runChain(C.self, length: count)
    case .fanIn: _ = runFanIn(C.self, count: count)
    case .layers: _ = runLayers(C.self, layers: count, width: 100)
    case .cancelled: _ = runCancelled(C.self, count: count)
    case .cancelledOneByOne: _ = runCancelled(C.self, count: count, oneByOne: true)
    }
}

// `[--quick] --pair CONTENDER CONTENDER SCENARIO RUNS`: two contenders on one scenario, taking turns
// run by run after one warm-up each; prints both medians and their ratio (second / first). For a quick
// check of one ratio of the table without running the whole benchmark.

/// Runs the pair the arguments ask for, or stops the process with the usage.
func runPair(_ arguments: [String], sizes: Sizes) -> Never {
    let usage = "usage: OperationKitBenchmarks --pair CONTENDER CONTENDER s1|s1one|s2|s3|s4|s5|s5one RUNS "
        + "(contenders: ok|procedure|bare|async|workflow|dispatch|minimal)"
    guard arguments.count == 4, let runs = Int(arguments[3]), runs > 0,
        let scenario = probeScenario(arguments[2])
    else {
        fail(usage)
    }
    guard let first = probeRunner(arguments[0], scenario, sizes),
        let second = probeRunner(arguments[1], scenario, sizes)
    else {
        fail(usage)
    }
    _ = first()
    _ = second()
    var firstTimes: [Double] = []
    var secondTimes: [Double] = []
    for _ in 0..<runs {
        firstTimes.append(first())
        secondTimes.append(second())
    }
    let plan = Plan(warmUp: true, runs: runs)
    let firstMedian = summarize(arguments[0], firstTimes, plan: plan)
    let secondMedian = summarize(arguments[1], secondTimes, plan: plan)
    report("\(scenario.title(sizes)): \(arguments[1]) / \(arguments[0]) = \(format(secondMedian / firstMedian))")
    exit(0)
}

private func probeScenario(_ name: String) -> Scenario? {
    switch name {
    case "s1": return .independent
    case "s1one": return .independentOneByOne
    case "s2": return .chain
    case "s3": return .fanIn
    case "s4": return .layers
    case "s5": return .cancelled
    case "s5one": return .cancelledOneByOne
    default: return nil
    }
}

private func probeRunner(_ name: String, _ scenario: Scenario, _ sizes: Sizes) -> (() -> Double)? {
    switch name {
    case "ok": return { scenario.run(on: OperationKitContender.self, sizes: sizes) }
    case "procedure": return { scenario.run(on: ProcedureContender.self, sizes: sizes) }
    case "bare": return { scenario.run(on: BareProcedureContender.self, sizes: sizes) }
    case "async": return { scenario.run(on: AsyncOperationContender.self, sizes: sizes) }
    case "workflow": return { scenario.run(on: WorkflowContender.self, sizes: sizes) }
    case "dispatch": return { scenario.run(on: DispatchContender.self, sizes: sizes) }
    case "minimal":
        if scenario.needsCancellation { return nil }
        return { scenario.run(on: MinimalContender.self, sizes: sizes) }
    default: return nil
    }
}
