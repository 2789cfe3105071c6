// Swift concurrency (issue 7): S1 and S2 with async closures, run as operations on a
// `ConcurrentOperationQueue`, side by side with a TaskGroup and with a graph of unstructured Tasks that
// await their predecessors, doing the same work. Targets: OK async within 1.5x of the TaskGroup on S1,
// and ahead of the Task graph on S2. Reported, not enforced; a wrong result (a body that did not run, a
// chain out of order) fails the run. See Benchmarks/README.md.
//
// Every contender runs the same bodies: `@Sendable () async -> Void` closures that contain no `await`
// and only count themselves on the run's `Probe` (S2: and check they run exactly i-th). So each body
// completes in the first slice of the Task that runs it, and what is measured is the cost of scheduling
// and finishing one unit of async work, not the executor's cost of suspending and resuming it.

import Dispatch
import OperationKit
import Synchronization

// MARK: - The async operation

/// What the "OK async" rows run on (printed with the results).
let asyncOperationImplementation = "AsyncOperation"

/// THE ONE PLACE that makes the async operation of the "OK async" rows.
func makeAsyncOperation(_ body: @escaping @Sendable () async -> Void) -> ConcurrentOperation {
    AsyncOperation(body)
}

// MARK: - Contenders

typealias AsyncBody = @Sendable () async -> Void

/// The priority of every Task in the section. The Task graph's Tasks are made on the main thread,
/// where `Task {}` would inherit `.high` (the main thread's QoS); AsyncOperation's Tasks get the
/// priority of the queue's default QoS (`.medium`), and the groups' children inherit `.medium` from
/// the detached Task that runs the group. On Linux the global executor runs each priority on its
/// own Dispatch root queue, so all of them are made `.medium`, on the same one.
let asyncPriority = TaskPriority.medium

/// The contenders of the async section. Not every one runs every scenario (see `contenders(for:)`).
enum AsyncContender: CaseIterable {
    /// Async closures as operations on a `ConcurrentOperationQueue` (default concurrency): built, wired
    /// with `addDependency` (S2), added as one batch, waited for with `waitUntilAllOperationsAreFinishedBlocking()`.
    case operationKitAsync
    /// S1: `withTaskGroup(of: Void.self)`, one `addTask` per body. S2: one child at a time
    /// (`addTask`, then `await group.next()` before the next one).
    case taskGroup
    /// S1 only: `withDiscardingTaskGroup`, one `addTask` per body (no results to collect).
    case discardingTaskGroup
    /// Unstructured `Task`s. S1: N Tasks, then each one's `.value` awaited. S2: each Task awaits its
    /// predecessor's `.value`, then runs its body; the last one is awaited.
    case taskGraph
    /// Reference: the existing `ClosureOperation` contender with synchronous bodies.
    case closureOperation
    /// Reference: the existing raw Dispatch contender with synchronous bodies.
    case dispatch

    var name: String {
        switch self {
        case .operationKitAsync: return "OK async"
        case .taskGroup: return "TaskGroup"
        case .discardingTaskGroup: return "discarding TG"
        case .taskGraph: return "Task graph"
        case .closureOperation: return "ClosureOp"
        case .dispatch: return "Dispatch"
        }
    }

    static func contenders(for scenario: Scenario) -> [AsyncContender] {
        switch scenario {
        case .independent: return allCases
        case .chain: return [.operationKitAsync, .taskGroup, .taskGraph, .closureOperation, .dispatch]
        default: return []
        }
    }

    /// Runs `scenario` once and returns the wall time in ms; fails the process on a wrong result.
    func run(_ scenario: Scenario, sizes: Sizes) -> Double {
        switch (scenario, self) {
        case (.independent, .closureOperation):
            return runIndependent(OperationKitContender.self, count: sizes.independent)
        case (.independent, .dispatch):
            return runIndependent(DispatchContender.self, count: sizes.independent)
        case (.chain, .closureOperation):
            return runChain(OperationKitContender.self, length: sizes.chain)
        case (.chain, .dispatch):
            return runChain(DispatchContender.self, length: sizes.chain)
        case (.independent, _):
            return runAsyncIndependent(count: sizes.independent)
        case (.chain, _):
            return runAsyncChain(length: sizes.chain)
        default:
            fail("the async section has no \(scenario) on \(name)")
        }
    }

    /// S1: `count` identical bodies, no dependencies. The closure is made once and shared, as in S1 of
    /// the main table.
    private func runAsyncIndependent(count: Int) -> Double {
        let probe = Probe()
        let body: AsyncBody = { probe.tick() }
        let start = ContinuousClock.now
        switch self {
        case .operationKitAsync:
            let queue = ConcurrentOperationQueue(name: "bench async")
            var operations: [ConcurrentOperation] = []
            operations.reserveCapacity(count)
            for _ in 0..<count {
                operations.append(makeAsyncOperation(body))
            }
            addAndWait(operations, on: queue, probe: probe)
        case .taskGroup:
            blockUntilDone {
                await withTaskGroup(of: Void.self) { group in
                    for _ in 0..<count {
                        group.addTask(operation: body)
                    }
                }
            }
        case .discardingTaskGroup:
            blockUntilDone {
                await withDiscardingTaskGroup { group in
                    for _ in 0..<count {
                        group.addTask(operation: body)
                    }
                }
            }
        case .taskGraph:
            var tasks: [Task<Void, Never>] = []
            tasks.reserveCapacity(count)
            for _ in 0..<count {
                tasks.append(Task(priority: asyncPriority, operation: body))
            }
            let all = tasks
            blockUntilDone {
                for task in all {
                    await task.value
                }
            }
        case .closureOperation, .dispatch:
            fail("unreachable")
        }
        let elapsed = start.duration(to: .now)
        probe.verify(executed: count, in: "async S1 on \(name)")
        return milliseconds(elapsed)
    }

    /// S2: body i checks it runs exactly i-th. One closure per node, made in the timed part as in S2 of
    /// the main table.
    private func runAsyncChain(length: Int) -> Double {
        let probe = Probe()
        let start = ContinuousClock.now
        switch self {
        case .operationKitAsync:
            let queue = ConcurrentOperationQueue(name: "bench async")
            var operations: [ConcurrentOperation] = []
            operations.reserveCapacity(length)
            for index in 0..<length {
                let operation = makeAsyncOperation { probe.tick(expectingBefore: index) }
                if let previous = operations.last {
                    do {
                        try operation.addDependency(previous)
                    } catch {
                        fail("OK async refused a dependency: \(error)")
                    }
                }
                operations.append(operation)
            }
            addAndWait(operations, on: queue, probe: probe)
        case .taskGroup:
            // The honest chain for a group: a child is added only after the previous one has finished.
            blockUntilDone {
                await withTaskGroup(of: Void.self) { group in
                    for index in 0..<length {
                        group.addTask { probe.tick(expectingBefore: index) }
                        await group.next()
                    }
                }
            }
        case .taskGraph:
            var previous: Task<Void, Never>?
            for index in 0..<length {
                let predecessor = previous
                let body: AsyncBody = { probe.tick(expectingBefore: index) }
                previous = Task(priority: asyncPriority) {
                    await predecessor?.value
                    await body()
                }
            }
            let last = previous
            blockUntilDone {
                await last?.value
            }
        case .discardingTaskGroup, .closureOperation, .dispatch:
            fail("unreachable")
        }
        let elapsed = start.duration(to: .now)
        probe.verify(executed: length, in: "async S2 (\(length)) on \(name)")
        return milliseconds(elapsed)
    }
}

/// How long any one run of the section may take before it counts as hung (a normal full-size run takes
/// well under a second): the run fails with a description instead of hanging CI.
let asyncRunTimeout = Duration.seconds(60)

private func addAndWait(_ operations: [ConcurrentOperation], on queue: ConcurrentOperationQueue, probe: Probe) {
    do {
        try queue.addOperations(operations, waitUntilFinished: false)
    } catch {
        fail("OK async refused a batch of \(operations.count) operations: \(error)")
    }
    guard queue.waitUntilAllOperationsAreFinishedBlocking(timeout: asyncRunTimeout) else {
        let unfinished = operations.indices.filter { !operations[$0].isFinished }
        let described = unfinished.prefix(4).map { index in
            let operation = operations[index]
            return "#\(index) executing \(operation.isExecuting) ready \(operation.isReady) cancelled \(operation.isCancelled)"
        }
        fail("OK async: hung: after \(asyncRunTimeout) \(probe.executedCount) of \(operations.count) bodies ran, "
            + "\(unfinished.count) operations unfinished, queue operationCount \(queue.operationCount); first: "
            + described.joined(separator: "; "))
    }
    for operation in operations where !operation.isFinished {
        fail("OK async: \(operation.displayName) not finished after the queue's wait")
    }
}

/// Runs `work` in a detached Task and blocks the calling thread (the main thread, which is not one of
/// the cooperative pool's) until it is done. OK async blocks the same thread in
/// `waitUntilAllOperationsAreFinishedBlocking()`, so every contender ends with one cross-thread wake-up.
func blockUntilDone(_ work: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task.detached(priority: asyncPriority) {
        await work()
        done.signal()
    }
    let (seconds, attoseconds) = asyncRunTimeout.components
    let timeout = DispatchTime.now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    if done.wait(timeout: timeout) == .timedOut {
        fail("a Swift-concurrency contender hung (no result after \(asyncRunTimeout))")
    }
}

// MARK: - Report

/// The async section target on S1: OK async / TaskGroup.
let asyncIndependentTarget = 1.5
/// The async section target on S2: OK async / Task graph must be below this.
let asyncChainTarget = 1.0

/// Runs the async section and returns its result table and target lines.
func asyncReport(sizes: Sizes) -> [String] {
    var medians: [Scenario: [AsyncContender: Double]] = [:]
    let scenarios: [Scenario] = [.independent, .chain]
    for scenario in scenarios {
        report("## Async closures: \(scenario.title(sizes))")
        let contenders = AsyncContender.contenders(for: scenario)
        for contender in contenders {
            _ = contender.run(scenario, sizes: sizes)
        }
        var samples: [AsyncContender: [Double]] = [:]
        for _ in 0..<sizes.runs {
            for contender in contenders {
                samples[contender, default: []].append(contender.run(scenario, sizes: sizes))
            }
        }
        let plan = Plan(warmUp: true, runs: sizes.runs)
        for contender in contenders {
            medians[scenario, default: [:]][contender] = summarize(contender.name, samples[contender] ?? [], plan: plan)
        }
    }

    func cell(_ scenario: Scenario, _ contender: AsyncContender) -> String {
        medians[scenario]?[contender].map { format($0) } ?? "–"
    }
    func ratio(_ scenario: Scenario, _ contender: AsyncContender) -> Double {
        (medians[scenario]?[.operationKitAsync] ?? .nan) / (medians[scenario]?[contender] ?? .nan)
    }

    let s1 = ratio(.independent, .taskGroup)
    let s2 = ratio(.chain, .taskGraph)
    var lines = [
        "### Swift concurrency: async closures (OK async: \(asyncOperationImplementation))",
        "",
        "| scenario | OK async ms | TaskGroup ms | Task graph ms | discarding TaskGroup ms "
            + "| ClosureOperation (sync) ms | Dispatch (sync) ms | OK async / TaskGroup | OK async / Task graph "
            + "| OK async / ClosureOperation |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in scenarios {
        let cells = [
            scenario.title(sizes),
            cell(scenario, .operationKitAsync),
            cell(scenario, .taskGroup),
            cell(scenario, .taskGraph),
            cell(scenario, .discardingTaskGroup),
            cell(scenario, .closureOperation),
            cell(scenario, .dispatch),
            format(ratio(scenario, .taskGroup)),
            format(ratio(scenario, .taskGraph)),
            format(ratio(scenario, .closureOperation)),
        ]
        lines.append("| " + cells.joined(separator: " | ") + " |")
    }
    lines += [
        "",
        "S2's TaskGroup adds one child at a time, awaiting `next()` before the next `addTask`.",
        "Target S1: OK async / TaskGroup = \(format(s1)) (target <= \(format(asyncIndependentTarget, decimals: 1))): "
            + (s1 <= asyncIndependentTarget ? "met" : "NOT met"),
        "Target S2: OK async / Task graph = \(format(s2)) (target < \(format(asyncChainTarget, decimals: 1)), "
            + "ahead of the Task graph): " + (s2 < asyncChainTarget ? "met" : "NOT met"),
    ]
    return lines
}
