// OperationKit (ClosureOperation, ClosureProcedure with a condition and an observer, AsyncOperation)
// against Foundation's OperationQueue, raw Dispatch and the benchmark's own minimal scheduler (a floor).
//
//   swift run -c release --package-path Benchmarks OperationKitBenchmarks            full sizes
//   swift run -c release --package-path Benchmarks OperationKitBenchmarks --quick    CI sizes
//   OperationKitBenchmarks --peak-rss idle|s1-operationkit|s1-foundation [--quick]  one peak-memory child
//   OperationKitBenchmarks --state-machine [--quick]                                 only the state-machine section
//   OperationKitBenchmarks --workflow [--quick]                                      only the workflow section
//   OperationKitBenchmarks --async [--quick]                                         only the Swift concurrency section
//   OperationKitBenchmarks --independent [--quick]                                   only S6 (independent queues, workflows)
//   OperationKitBenchmarks --instrument [--quick]                                    only the instrument cost (S1, S2)
//   OperationKitBenchmarks --memory [--quick]                                        only the memory section
//   OperationKitBenchmarks --layers [--quick]                                        only S4 with layers (against task groups)
//   OperationKitBenchmarks --probe CONTENDER SCENARIO COUNT                          one untimed run, for callgrind (callgrind.sh)
//   OperationKitBenchmarks [--quick] --pair CONTENDER CONTENDER SCENARIO RUNS         two contenders, one scenario, their ratio
//   OperationKitBenchmarks [--quick] --phases RUNS                                   S1 batched split into the caller's phases
//
// Every run is checked (bodies executed, dependency order, states reached); any wrong result exits with status 1.

import Foundation

/// How often one contender runs one scenario.
struct Plan {
    let warmUp: Bool
    let runs: Int
}

/// Prints one contender's samples and returns their median in ms.
func summarize(_ name: String, _ samples: [Double], plan: Plan) -> Double {
    let result = median(samples)
    let spread = "min \(format(samples.min() ?? 0)), max \(format(samples.max() ?? 0))"
    let paddedName = name.padding(toLength: 13, withPad: " ", startingAt: 0)
    let warmUpNote = plan.warmUp ? "" : ", no warm-up"
    report("  \(paddedName) median \(format(result)) ms  (\(plan.runs) runs\(warmUpNote); \(spread))")
    return result
}

/// Runs `scenario` on all seven contenders (the minimal scheduler only where it applies) and returns the medians.
///
/// The contenders take turns run by run, so a burst of load from elsewhere on the machine hits all of them
/// alike instead of skewing whichever happened to run during it.
func measure(_ scenario: Scenario, sizes: Sizes, foundationPlan: Plan) -> ResultRow {
    let plan = Plan(warmUp: true, runs: sizes.runs)
    _ = scenario.run(on: OperationKitContender.self, sizes: sizes)
    _ = scenario.run(on: ProcedureContender.self, sizes: sizes)
    _ = scenario.run(on: BareProcedureContender.self, sizes: sizes)
    _ = scenario.run(on: AsyncOperationContender.self, sizes: sizes)
    if foundationPlan.warmUp {
        _ = scenario.run(on: FoundationContender.self, sizes: sizes)
    }
    _ = scenario.run(on: DispatchContender.self, sizes: sizes)
    let withMinimal = MinimalContender.supportsCancellation || !scenario.needsCancellation
    if withMinimal {
        _ = scenario.run(on: MinimalContender.self, sizes: sizes)
    }
    var operationKit: [Double] = []
    var procedure: [Double] = []
    var bareProcedure: [Double] = []
    var asyncOperation: [Double] = []
    var foundation: [Double] = []
    var dispatch: [Double] = []
    var minimal: [Double] = []
    for round in 0..<max(plan.runs, foundationPlan.runs) {
        if round < plan.runs {
            operationKit.append(scenario.run(on: OperationKitContender.self, sizes: sizes))
            procedure.append(scenario.run(on: ProcedureContender.self, sizes: sizes))
            bareProcedure.append(scenario.run(on: BareProcedureContender.self, sizes: sizes))
            asyncOperation.append(scenario.run(on: AsyncOperationContender.self, sizes: sizes))
        }
        if round < foundationPlan.runs {
            foundation.append(scenario.run(on: FoundationContender.self, sizes: sizes))
        }
        if round < plan.runs {
            dispatch.append(scenario.run(on: DispatchContender.self, sizes: sizes))
            if withMinimal {
                minimal.append(scenario.run(on: MinimalContender.self, sizes: sizes))
            }
        }
    }
    // Printed in the order the contenders run.
    _ = summarize(OperationKitContender.name, operationKit, plan: plan)
    _ = summarize(ProcedureContender.name, procedure, plan: plan)
    _ = summarize(BareProcedureContender.name, bareProcedure, plan: plan)
    _ = summarize(AsyncOperationContender.name, asyncOperation, plan: plan)
    _ = summarize(FoundationContender.name, foundation, plan: foundationPlan)
    _ = summarize(DispatchContender.name, dispatch, plan: plan)
    if withMinimal {
        _ = summarize(MinimalContender.name, minimal, plan: plan)
    } else {
        report("  \(MinimalContender.name.padding(toLength: 13, withPad: " ", startingAt: 0)) —  (no cancellation)")
    }
    return ResultRow(
        title: scenario.title(sizes),
        operationKit: operationKit,
        foundation: foundation,
        dispatch: dispatch,
        procedure: procedure,
        bareProcedure: bareProcedure,
        asyncOperation: asyncOperation,
        minimal: withMinimal ? minimal : nil
    )
}

/// OperationKit's chain at `length` and at twice that, alternating, after one warm-up each: the two medians.
func chainScaling(length: Int, runs: Int) -> (single: Double, double: Double) {
    _ = runChain(OperationKitContender.self, length: length)
    _ = runChain(OperationKitContender.self, length: 2 * length)
    var single: [Double] = []
    var double: [Double] = []
    for _ in 0..<runs {
        single.append(runChain(OperationKitContender.self, length: length))
        double.append(runChain(OperationKitContender.self, length: 2 * length))
    }
    return (median(single), median(double))
}

let arguments = Array(CommandLine.arguments.dropFirst())
let sizes = Sizes(quick: arguments.contains("--quick"))

if let flag = arguments.firstIndex(of: "--peak-rss") {
    guard flag + 1 < arguments.count, let mode = PeakMode(rawValue: arguments[flag + 1]) else {
        let modes = PeakMode.allCases.map(\.rawValue).joined(separator: "|")
        fail("usage: OperationKitBenchmarks --peak-rss \(modes) [--quick]")
    }
    runPeakChild(mode, count: sizes.independent)
}
if let flag = arguments.firstIndex(of: "--probe") {
    runInstructionProbe(Array(arguments[(flag + 1)...]))
}
if let flag = arguments.firstIndex(of: "--pair") {
    runPair(Array(arguments[(flag + 1)...]), sizes: sizes)
}
if let flag = arguments.firstIndex(of: "--phases") {
    runPhases(Array(arguments[(flag + 1)...]), sizes: sizes)
}
let onlyStateMachine = arguments.contains("--state-machine")
let onlyWorkflow = arguments.contains("--workflow")
let onlyAsync = arguments.contains("--async")
let onlyIndependent = arguments.contains("--independent")
let onlyInstrument = arguments.contains("--instrument")
let onlyMemory = arguments.contains("--memory")
let onlyLayers = arguments.contains("--layers")
let knownArguments: Set<String> = ["--quick", "--state-machine", "--workflow", "--async", "--independent", "--instrument", "--memory", "--layers"]
for argument in arguments where !knownArguments.contains(argument) {
    fail("unknown argument \(argument); usage: OperationKitBenchmarks [--quick] [--state-machine] [--workflow] [--async] [--independent] [--instrument] [--memory] [--layers] [--peak-rss MODE] [--probe CONTENDER SCENARIO COUNT] [--pair CONTENDER CONTENDER SCENARIO RUNS] [--phases RUNS]")
}

let wallClock = ContinuousClock.now
report("# OperationKit benchmarks (\(sizes.quick ? "quick" : "full") mode)")
report()
machineDescription().forEach { report($0) }
report()

if onlyWorkflow {
    workflowReport(sizes: sizes).forEach { report($0) }
    report()
    report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
    exit(0)
}

if onlyLayers {
    layersReport(sizes: sizes).forEach { report($0) }
    report()
    report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
    exit(0)
}

if onlyMemory {
    memoryReport(count: sizes.independent, quick: sizes.quick).forEach { report($0) }
    report()
    report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
    exit(0)
}

if onlyIndependent {
    independentGraphsReport(sizes: sizes).forEach { report($0) }
    report()
    report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
    exit(0)
}

if onlyInstrument {
    instrumentReport(sizes: sizes).forEach { report($0) }
    report()
    report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
    exit(0)
}

if onlyAsync {
    asyncReport(sizes: sizes).forEach { report($0) }
    report()
    report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
    exit(0)
}

if onlyStateMachine {
    stateMachineReport(sizes: sizes).forEach { report($0) }
    report()
    report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
    exit(0)
}

// Foundation's chain and layered graph are quadratic on Linux (over ten seconds per full-size run), so in
// full mode they get three runs and no warm-up.
let slowFoundation: Set<Scenario> = [.chain, .layers]
let reducedPlan = Plan(warmUp: false, runs: 3)

var rows: [ResultRow] = []
for scenario in Scenario.allCases {
    report("## \(scenario.title(sizes))")
    let reduced = !sizes.quick && slowFoundation.contains(scenario)
    let foundationPlan = reduced ? reducedPlan : Plan(warmUp: true, runs: sizes.runs)
    rows.append(measure(scenario, sizes: sizes, foundationPlan: foundationPlan))
}
report()

// Linear scaling: doubling the chain should roughly double OperationKit's time.
let chainLength = sizes.chain
let (shortChain, longChain) = chainScaling(length: chainLength, runs: sizes.runs)
let scaling = longChain / shortChain

report("## Results (median wall time: build graph + add + wait; ratios: median of the rounds' own ratios)")
report()
markdownTable(rows).forEach { report($0) }
report()
if !sizes.quick {
    let names = slowFoundation.map { $0.title(sizes).prefix(2) }.sorted().joined(separator: " and ")
    report("Foundation's \(names) ran \(reducedPlan.runs) times without warm-up (quadratic on Linux).")
}
report("Linear scaling, OperationKit S2(\(2 * chainLength)) / S2(\(chainLength)): "
    + "\(format(longChain)) ms / \(format(shortChain)) ms = \(format(scaling)) (target <= 2.2)")
report()
report("### ProcedureOperation and AsyncOperation against ClosureOperation (target: procedure / OK <= \(format(procedureTarget, decimals: 1)))")
report()
procedureTable(rows).forEach { report($0) }
report()

// S4 written with layers (one OperationLayer per layer) against task groups run as barriers.
layersReport(sizes: sizes).forEach { report($0) }
report()

// The cost of an installed (no-op) instrument on S1 and S2.
instrumentReport(sizes: sizes).forEach { report($0) }
report()

// Memory: heap growth while S1's operations are pending in a suspended queue, and the peak resident set.
memoryReport(count: sizes.independent, quick: sizes.quick).forEach { report($0) }
report()

// StateMachine: transitions per second against an enum + switch under a mutex (the floor).
stateMachineReport(sizes: sizes).forEach { report($0) }
report()

// Workflow: the S4 graph as a workflow run, reset and run again, against operations run twice.
workflowReport(sizes: sizes).forEach { report($0) }
report()

// S6: independent queues and workflows at once, against one shared queue or workflow and Dispatch.
independentGraphsReport(sizes: sizes).forEach { report($0) }
report()

// Swift concurrency: async closures as operations against a TaskGroup and a graph of Tasks.
asyncReport(sizes: sizes).forEach { report($0) }
report()
report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
