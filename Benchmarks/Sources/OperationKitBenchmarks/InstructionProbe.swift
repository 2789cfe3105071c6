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
    guard let scenario = probeScenario(arguments[1]), let contender = probeContender(arguments[0]) else {
        fail(usage)
    }
    probe(scenario, on: contender, count: count)
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
// run by run after one warm-up each; prints both medians and their ratio (second / first), then the
// median and the middle half of the rounds' own ratios. For a quick check of one ratio of the table
// without running the whole benchmark.

/// Runs the pair the arguments ask for, or stops the process with the usage.
func runPair(_ arguments: [String], sizes: Sizes) -> Never {
    let usage = "usage: OperationKitBenchmarks --pair CONTENDER CONTENDER s1|s1one|s2|s3|s4|s5|s5one RUNS "
        + "(contenders: ok|procedure|bare|async|workflow|dispatch|minimal)"
    guard arguments.count == 4, let runs = Int(arguments[3]), runs > 0,
        let scenario = probeScenario(arguments[2])
    else {
        fail(usage)
    }
    guard let first = probeContender(arguments[0]), let second = probeContender(arguments[1]) else {
        fail(usage)
    }
    for contender in [first, second] where scenario.needsCancellation && !contender.supportsCancellation {
        fail("\(contender.name) cannot run \(scenario)")
    }
    let runFirst = { scenario.run(on: first, sizes: sizes) }
    let runSecond = { scenario.run(on: second, sizes: sizes) }
    _ = runFirst()
    _ = runSecond()
    var firstTimes: [Double] = []
    var secondTimes: [Double] = []
    for _ in 0..<runs {
        firstTimes.append(runFirst())
        secondTimes.append(runSecond())
    }
    let plan = Plan(warmUp: true, runs: runs)
    let firstMedian = summarize(arguments[0], firstTimes, plan: plan)
    let secondMedian = summarize(arguments[1], secondTimes, plan: plan)
    report("\(scenario.title(sizes)): \(arguments[1]) / \(arguments[0]) = \(format(secondMedian / firstMedian))")
    // Each run of the second against the first run just before it: a burst of load from elsewhere
    // that slows one round moves one ratio, not both medians.
    let ratios = zip(secondTimes, firstTimes).map { $0 / $1 }.sorted()
    let quarter = ratios.count / 4
    report(
        "  per-round ratios: median \(format(median(ratios))), middle half "
            + "\(format(ratios[quarter]))–\(format(ratios[ratios.count - 1 - quarter]))")
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

/// The contender a probe's argument names (`--probe`, `--pair`).
private func probeContender(_ name: String) -> (any Contender.Type)? {
    switch name {
    case "ok": return OperationKitContender.self
    case "procedure": return ProcedureContender.self
    case "bare": return BareProcedureContender.self
    case "async": return AsyncOperationContender.self
    case "workflow": return WorkflowContender.self
    case "dispatch": return DispatchContender.self
    case "minimal": return MinimalContender.self
    default: return nil
    }
}
