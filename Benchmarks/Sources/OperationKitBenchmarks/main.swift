// OperationKit against Foundation's OperationQueue and raw Dispatch.
//
//   swift run -c release --package-path Benchmarks OperationKitBenchmarks            full sizes
//   swift run -c release --package-path Benchmarks OperationKitBenchmarks --quick    CI sizes
//   OperationKitBenchmarks --peak-rss idle|s1-operationkit|s1-foundation [--quick]  one peak-memory child
//
// Every run is checked (bodies executed, dependency order); any wrong result exits with status 1.

import Foundation

/// How often one contender runs one scenario.
struct Plan {
    let warmUp: Bool
    let runs: Int
}

/// Runs `scenario` on `contender` per `plan`, prints the samples and returns their median in ms.
func measure<C: Contender>(_ scenario: Scenario, on contender: C.Type, sizes: Sizes, plan: Plan) -> Double {
    if plan.warmUp {
        _ = scenario.run(on: C.self, sizes: sizes)
    }
    let samples = (0..<plan.runs).map { _ in scenario.run(on: C.self, sizes: sizes) }
    let result = median(samples)
    let spread = "min \(format(samples.min() ?? 0)), max \(format(samples.max() ?? 0))"
    let name = C.name.padding(toLength: 13, withPad: " ", startingAt: 0)
    let warmUpNote = plan.warmUp ? "" : ", no warm-up"
    report("  \(name) median \(format(result)) ms  (\(plan.runs) runs\(warmUpNote); \(spread))")
    return result
}

/// Median of `runs` chains of `length` on OperationKit, after one warm-up.
func chainMedian(length: Int, runs: Int) -> Double {
    _ = runChain(OperationKitContender.self, length: length)
    return median((0..<runs).map { _ in runChain(OperationKitContender.self, length: length) })
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
for argument in arguments where argument != "--quick" {
    fail("unknown argument \(argument); usage: OperationKitBenchmarks [--quick] [--peak-rss MODE]")
}

let wallClock = ContinuousClock.now
report("# OperationKit benchmarks (\(sizes.quick ? "quick" : "full") mode)")
report()
machineDescription().forEach { report($0) }
report()

// Foundation's chain is quadratic on Linux (seconds per full-size run), so it gets fewer runs in full mode.
let standardPlan = Plan(warmUp: true, runs: sizes.runs)
let foundationChainPlan = sizes.quick ? standardPlan : Plan(warmUp: false, runs: 3)

var rows: [ResultRow] = []
for scenario in Scenario.allCases {
    report("## \(scenario.title(sizes))")
    let operationKit = measure(scenario, on: OperationKitContender.self, sizes: sizes, plan: standardPlan)
    let foundationPlan = scenario == .chain ? foundationChainPlan : standardPlan
    let foundation = measure(scenario, on: FoundationContender.self, sizes: sizes, plan: foundationPlan)
    let dispatch = measure(scenario, on: DispatchContender.self, sizes: sizes, plan: standardPlan)
    rows.append(ResultRow(title: scenario.title(sizes), operationKit: operationKit, foundation: foundation,
                          dispatch: dispatch))
}
report()

// Linear scaling: doubling the chain should roughly double OperationKit's time.
let chainLength = sizes.chain
let shortChain = chainMedian(length: chainLength, runs: sizes.runs)
let longChain = chainMedian(length: 2 * chainLength, runs: sizes.runs)
let scaling = longChain / shortChain

report("## Results (median wall time: build graph + add + wait)")
report()
markdownTable(rows).forEach { report($0) }
report()
if foundationChainPlan.warmUp == false {
    report("Foundation's S2 ran \(foundationChainPlan.runs) times without warm-up (quadratic on Linux).")
}
report("Linear scaling, OperationKit S2(\(2 * chainLength)) / S2(\(chainLength)): "
    + "\(format(longChain)) ms / \(format(shortChain)) ms = \(format(scaling)) (target <= 2.2)")
report()

// Memory: heap growth while S1's operations are pending in a suspended queue, and the peak resident set.
let count = sizes.independent
report("## Memory per pending operation (\(count) operations in a suspended queue)")
report()
report("| contender | heap bytes/op (mallinfo2) | peak RSS bytes/op (VmHWM - idle) |")
report("|---|---:|---:|")
let peakRepeats = sizes.quick ? 1 : 3
let idlePeak = median((0..<peakRepeats).map { _ in Double(measurePeakInChild(.idle, quick: sizes.quick)) })
func heapCell<C: Contender>(_: C.Type) -> String {
    let samples = (0..<3).compactMap { _ in heapBytesPerPendingUnit(C.self, count: count) }
    return samples.isEmpty ? "n/a" : format(median(samples), decimals: 1)
}
func peakCell(_ mode: PeakMode) -> String {
    let peak = median((0..<peakRepeats).map { _ in Double(measurePeakInChild(mode, quick: sizes.quick)) })
    return format((peak - idlePeak) * 1024 / Double(count), decimals: 1)
}
report("| OperationKit | \(heapCell(OperationKitContender.self)) | \(peakCell(.operationKit)) |")
report("| Foundation | \(heapCell(FoundationContender.self)) | \(peakCell(.foundation)) |")
report("| Dispatch (DispatchWorkItem, reference) | \(heapCell(DispatchContender.self)) | - |")
report()
report("Heap: growth of mallinfo2 uordblks + hblkhd from before creating the operations to after adding them;")
report("the caller's array is reserved beforehand and not counted. Peak RSS: VmHWM of a child process running")
report("only S1 (suspended, added, resumed, drained) minus an idle child holding an equally large array;")
report("idle VmHWM \(Int(idlePeak)) KiB. Target for OperationKit: <= 250 peak bytes per pending operation.")
report()
report("Total benchmark time: \(format(milliseconds(wallClock.duration(to: .now)) / 1_000, decimals: 1)) s")
