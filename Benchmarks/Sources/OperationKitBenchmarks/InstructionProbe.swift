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
    let scenario: Scenario
    switch arguments[1] {
    case "s1": scenario = .independent
    case "s1one": scenario = .independentOneByOne
    case "s2": scenario = .chain
    case "s3": scenario = .fanIn
    case "s4": scenario = .layers
    case "s5": scenario = .cancelled
    case "s5one": scenario = .cancelledOneByOne
    default: fail(usage)
    }
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
