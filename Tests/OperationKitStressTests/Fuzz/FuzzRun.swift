// The model-based fuzz test (see ModelFuzzTests.swift): running a scenario on real queues and
// checking what happened against the model.
import Dispatch
import Foundation
import OperationKit
import OperationKitTestSupport
import Testing

// MARK: - Running and checking

/// What happened, in one total order consistent with happens-before (each record call is
/// serialised, so an event that happened before another is recorded before it).
enum FuzzEvent: Equatable {
    case bodyStart(Int)
    case bodyEnd(Int)
    case completion(Int)
    case observer(Int, String)
    case barrierStart(queue: Int, index: Int)
    case cycleMemberRan(Int)
}

final class FuzzRun: @unchecked Sendable {  // fields set up before any operation runs, then only read
    let scenario: FuzzScenario
    let events = Recorder<FuzzEvent>()
    var queues: [ConcurrentOperationQueue] = []
    var operations: [ConcurrentOperation] = []
    var violations: [String] = []
    /// Per barrier: the nodes added to its queue before it.
    var barrierCovers: [(queue: Int, index: Int, nodes: [Int])] = []
    let timeout: Duration = .seconds(30)
    /// Installed on the queues of odd seeds: the test kit's recording instrument, whose
    /// lifecycle check says whether each operation's events came once each, in order.
    let instrument: RecordingInstrument?
    /// For seeds divisible by 3: one serial queue on which every procedure's observer is told
    /// its events (`observer.on(queue)`), so event-queue delivery meets every scenario.
    let eventQueue: DispatchQueue?

    init(_ scenario: FuzzScenario) {
        self.scenario = scenario
        instrument = scenario.seed % 2 == 1 ? RecordingInstrument() : nil
        eventQueue = scenario.seed % 3 == 0 ? DispatchQueue(label: "fuzz-events-\(scenario.seed)") : nil
    }

    func record(_ event: FuzzEvent) { events.record(event) }

    func run() -> [String] {
        defer { instrument?.removeAll() }  // its events hold the queues, which hold it
        for (index, limit) in scenario.limits.enumerated() {
            let queue = try! ConcurrentOperationQueue(name: "fuzz\(scenario.seed).q\(index)", maxConcurrentOperationCount: limit)
            queue.isSuspended = scenario.suspended[index]
            queue.instrument = instrument
            queues.append(queue)
        }
        build()
        if !violations.isEmpty { return violations }
        _ = lateAdds
        add()
        for queue in queues { queue.isSuspended = false }
        if !lateAdds.wait(timeout: timeout) { violations.append("a late addChild did not return") }
        let refusedLate = Set(lateRefused.values)
        // Every operation ends, within a bound (a hang is a failure naming what did not end).
        // One deadline for all (not one timeout each).
        let deadline = ContinuousClock.now + timeout
        let unfinished = operations.enumerated().filter {
            let left = max(deadline - ContinuousClock.now, .milliseconds(1))
            return !refusedLate.contains($0.offset) && !$0.element.waitUntilFinishedBlocking(timeout: left)
        }
        if !unfinished.isEmpty {
            let described = unfinished.map { index, operation in
                let state = (operation as? ProcedureOperation).map { "\($0.state)" } ?? (operation.isExecuting ? "executing" : "pending")
                return "#\(index) \(operation.displayName) (\(state), cancelled: \(operation.isCancelled))"
            }
            violations.append("did not finish within \(timeout): \(described.joined(separator: ", "))")
            return violations
        }
        for queue in queues where !queue.waitUntilAllOperationsAreFinishedBlocking(timeout: max(deadline - ContinuousClock.now, .seconds(1))) {
            violations.append("\(queue.displayName) did not empty")
        }
        check(events.values)
        if let instrument { violations += instrument.lifecycleViolations(of: operations).map { "instrument: " + $0 } }
        return violations
    }

    // MARK: Building

    private func build() {
        operations = scenario.nodes.enumerated().map { index, node in make(index, node) }
        for (index, node) in scenario.nodes.enumerated() {
            let operation = operations[index]
            operation.completionBlock = { [self] in record(.completion(index)) }
            if node.viaLayer {
                let layer = OperationLayer(node.dependencies.map { operations[$0] }, name: "layer of #\(index)")
                do { try operation.addDependency(layer) } catch { violations.append("#\(index): addDependency(layer) threw \(error)") }
            }
            for dependency in node.dependencies where !node.viaLayer {
                do {
                    try operation.addDependency(operations[dependency])
                } catch {
                    violations.append("#\(index): addDependency(#\(dependency)) threw \(error)")
                }
            }
            if let procedure = operation as? ProcedureOperation, !attachesAtInit(index) {
                do { try procedure.addObserver(observer(for: index)) } catch { violations.append("#\(index): addObserver threw \(error)") }
            }
            if node.cancel == .beforeAdd { operation.cancel() }
        }
        // Groups take their children once those are set up.
        for (index, node) in scenario.nodes.enumerated() {
            guard case .group(let children, _, let limit, let suspended, _) = node.kind,
                  let group = operations[index] as? GroupOperation else { continue }
            do {
                try group.setMaxConcurrentOperationCount(limit)
                group.isSuspended = suspended
                try group.addChildren(children.map { operations[$0] })
            } catch {
                violations.append("#\(index): the group refused its children: \(error)")
            }
        }
    }

    /// The observer that records a procedure's events (told on `eventQueue` if there is one).
    private func observer(for index: Int) -> any OperationObserver {
        let observer = ClosureObserver(
            willExecute: { [self] _ in record(.observer(index, "willExecute")) },
            didExecute: { [self] _ in record(.observer(index, "didExecute")) },
            didCancel: { [self] _, _ in record(.observer(index, "didCancel")) },
            willFinish: { [self] _, _ in record(.observer(index, "willFinish")) },
            didFinish: { [self] _, _ in record(.observer(index, "didFinish")) })
        return eventQueue.map { observer.on($0) } ?? observer
    }

    /// Whether node `index` is a plain procedure given its conditions and observer at init
    /// (`ClosureProcedure(name:conditions:observers:_:)`): the even ones; the odd ones get them
    /// after init. The two forms must behave the same. (Chosen by index, not drawn: a seed's
    /// scenario stays what it was.)
    private func attachesAtInit(_ index: Int) -> Bool {
        guard case .procedure = scenario.nodes[index].kind else { return false }
        return index % 2 == 0
    }

    private func make(_ index: Int, _ node: FuzzScenario.Node) -> ConcurrentOperation {
        let name = "#\(index)"
        switch node.kind {
        case .sync:
            return ClosureOperation(name: name) { [self] in
                record(.bodyStart(index))
                record(.bodyEnd(index))
            }
        case .async:
            return AsyncOperation<Void>(name: name) { [self] in
                record(.bodyStart(index))
                await Task.yield()
                record(.bodyEnd(index))
            }
        case .procedure(let conditions):
            let body: @Sendable () -> Void = { [self] in
                record(.bodyStart(index))
                record(.bodyEnd(index))
            }
            if attachesAtInit(index) {
                return ClosureProcedure<Void>(
                    name: name, conditions: conditions.map { make($0, index: index) }, observers: [observer(for: index)], body)
            }
            let procedure = ClosureProcedure<Void>(name: name, body)
            add(conditions, to: procedure, index: index)
            return procedure
        case .callback(let finishes, let timeout):
            let procedure = ClosureProcedure<Void>(name: name, asynchronous: { [self] procedure in
                record(.bodyStart(index))
                guard finishes else { return }  // lost reply: only the timeout ends it
                DispatchQueue.global().async {
                    _ = procedure.finish(with: nil)
                }
            })
            if let timeout {
                do {
                    try procedure.addObserver(try TimeoutObserver(timeout: .milliseconds(timeout)))
                } catch {
                    violations.append("#\(index): TimeoutObserver threw \(error)")
                }
            }
            return procedure
        case .group(_, let category, _, _, _):
            let group = try! GroupOperation(name: name)
            if let category { try! group.addCondition(MutuallyExclusive(category: category)) }
            return group
        }
    }

    private func add(_ conditions: [FuzzScenario.Condition], to procedure: ProcedureOperation, index: Int) {
        for condition in conditions {
            do {
                try procedure.addCondition(make(condition, index: index))
            } catch {
                violations.append("#\(index): addCondition threw \(error)")
            }
        }
    }

    private func make(_ condition: FuzzScenario.Condition, index: Int) -> any OperationCondition {
        switch condition {
        case .pass: ClosureCondition { _ in .satisfied }
        case .fail: ClosureCondition { _ in .failed(FuzzError(node: index)) }
        case .ignore: ClosureCondition { _ in .ignored }
        case .producing: FuzzProducingCondition(never: false)
        case .producingNever: FuzzProducingCondition(never: true)
        case .exclusive(let category): MutuallyExclusive(category: category)
        }
    }

    // MARK: Adding

    private func add() {
        var addedTo: [[Int]] = Array(repeating: [], count: queues.count)
        var afterAdd: [Int] = []
        for batch in scenario.batches {
            // The batch for each queue (a batch add is one queue's).
            for (queueIndex, queue) in queues.enumerated() {
                let members = batch.nodes.filter { scenario.nodes[$0].queue == queueIndex }
                guard !members.isEmpty else { continue }
                var batchOperations = members.map { operations[$0] }
                if batch.cycle {
                    let a = ClosureOperation(name: "cycle.a") { [self] in record(.cycleMemberRan(0)) }
                    let b = ClosureOperation(name: "cycle.b") { [self] in record(.cycleMemberRan(1)) }
                    try! a.addDependency(b)
                    try! b.addDependency(a)
                    if batch.breaksCycle { a.cancel() }
                    batchOperations += [a, b]
                    do {
                        try queue.addOperations(batchOperations, waitUntilFinished: false)
                        if !batch.breaksCycle { violations.append("a batch with a cycle was accepted: \(members)") }
                        extraOperations += [a, b]
                        if batch.breaksCycle { cancelledCycleMembers.append(a) }
                    } catch {
                        if batch.breaksCycle { violations.append("a cycle broken by a cancel was refused: \(error)") }
                        if error.code != .dependencyCycle { violations.append("batch \(members): \(error), not dependencyCycle") }
                        // All or nothing: nothing of it is in the queue.
                        let inQueue = Set(queue.operations.map(ObjectIdentifier.init))
                        for operation in batchOperations where inQueue.contains(ObjectIdentifier(operation)) {
                            violations.append("refused batch \(members): \(operation.displayName) is in the queue")
                        }
                        refusedCycleMembers += [a, b]
                        do {
                            try queue.addOperations(members.map { operations[$0] }, waitUntilFinished: false)
                        } catch {
                            violations.append("batch \(members) without its cycle was refused: \(error)")
                        }
                    }
                } else {
                    do {
                        try queue.addOperations(batchOperations, waitUntilFinished: false)
                    } catch {
                        violations.append("batch \(members) was refused: \(error)")
                    }
                }
                addedTo[queueIndex] += members
                afterAdd += members.filter { scenario.nodes[$0].cancel == .afterAdd }
                if batch.barrierAfter {
                    let barrierIndex = barrierCovers.count
                    barrierCovers.append((queueIndex, barrierIndex, addedTo[queueIndex]))
                    let barrier = queue.addBarrierBlock { [self] in record(.barrierStart(queue: queueIndex, index: barrierIndex)) }
                    extraOperations.append(barrier)
                }
            }
            // Cancels from other threads, at whatever moment they land.
            for index in afterAdd {
                let operation = operations[index]
                DispatchQueue.global().async { operation.cancel() }
            }
            afterAdd = []
            // Late children, and group resumes, from other threads.
            for index in batch.nodes {
                guard case .group(_, _, _, let suspended, let late) = scenario.nodes[index].kind,
                      let group = operations[index] as? GroupOperation else { continue }
                if let late {
                    let child = operations[late]
                    DispatchQueue.global().async { [self] in
                        do {
                            try group.addChild(child)
                        } catch {
                            // Refused only once the group finished: then it never runs.
                            lateRefused.record(late)
                        }
                        lateAdds.countDown()
                    }
                }
                if suspended { DispatchQueue.global().async { group.isSuspended = false } }
            }
        }
        for queue in queues { queue.isSuspended = false }
    }

    var extraOperations: [ConcurrentOperation] = []
    var cancelledCycleMembers: [ConcurrentOperation] = []
    var refusedCycleMembers: [ConcurrentOperation] = []
    /// Late children the group refused (it had finished): they never run, nor finish.
    let lateRefused = Recorder<Int>()
    lazy var lateAdds = Latch(count: scenario.nodes.filter {
        if case .group(_, _, _, _, let late?) = $0.kind { _ = late; return true } else { return false }
    }.count)

    // MARK: Checking

    private func check(_ log: [FuzzEvent]) {
        var starts: [Int: Int] = [:]
        var bodyStarts: [Int: Int] = [:]
        var completions: [Int: Int] = [:]
        var completionAt: [Int: Int] = [:]
        var startAt: [Int: Int] = [:]
        var observed: [Int: [String]] = [:]
        for (position, event) in log.enumerated() {
            switch event {
            case .bodyStart(let node):
                bodyStarts[node, default: 0] += 1
                starts[node, default: 0] += 1
                if startAt[node] == nil { startAt[node] = position }
            case .bodyEnd:
                break
            case .completion(let node):
                completions[node, default: 0] += 1
                completionAt[node] = position
            case .observer(let node, let name):
                observed[node, default: []].append(name)
                if name == "willExecute", startAt[node] == nil { startAt[node] = position }
            case .barrierStart(let queue, let index):
                for node in barrierCovers[index].nodes where barrierCovers[index].queue == queue {
                    if completionAt[node] == nil { violations.append("barrier \(index) started before #\(node) finished") }
                }
            case .cycleMemberRan(let member):
                _ = member
            }
        }
        let late = Set(lateRefused.values)
        for (index, node) in scenario.nodes.enumerated() {
            let refusedLate = late.contains(index)
            // Exactly once.
            if (completions[index] ?? 0) != (refusedLate ? 0 : 1) {
                violations.append("#\(index): completion block ran \(completions[index] ?? 0) times")
            }
            if (bodyStarts[index] ?? 0) > 1 { violations.append("#\(index): its work ran \(bodyStarts[index]!) times") }
            // Never before its dependencies finished.
            if let started = startAt[index] {
                for dependency in node.dependencies {
                    guard let finished = completionAt[dependency], finished < started else {
                        violations.append("#\(index) started before its dependency #\(dependency) finished")
                        continue
                    }
                }
                if node.cancel == .beforeAdd { violations.append("#\(index) was cancelled before it was added, yet ran") }
            }
            // A failed or ignored condition: it does not run; a failure is among its errors.
            if case .procedure(let conditions) = node.kind, let procedure = operations[index] as? ProcedureOperation {
                if conditions.contains(where: \.failsOrIgnores), bodyStarts[index] != nil {
                    violations.append("#\(index) ran although a condition fails or ignores")
                }
                if conditions.contains(where: { if case .fail = $0 { true } else { false } }),
                   !conditions.contains(where: { if case .ignore = $0 { true } else { false } }),
                   node.cancel == .none, procedure.errors.isEmpty, node.parent == nil {
                    violations.append("#\(index): a condition failed, yet it has no error")
                }
            }
            // A lost reply ends by its timeout, with timedOut.
            if case .callback(false, _) = node.kind, node.cancel == .none, bodyStarts[index] != nil,
               let procedure = operations[index] as? ProcedureOperation {
                let codes = procedure.errors.compactMap { ($0 as? OperationError)?.code }
                if !codes.contains(.timedOut) {
                    violations.append("#\(index): a lost reply ended without timedOut: \(procedure.errors)")
                }
            }
            // Observers: once each, in order.
            if let events = observed[index] {
                let order = ["willExecute", "didExecute", "willFinish", "didFinish"]
                let ordered = events.filter { $0 != "didCancel" }
                if ordered != order.filter({ ordered.contains($0) }) || Set(ordered).count != ordered.count {
                    violations.append("#\(index): observer events out of order or repeated: \(events)")
                }
                if events.filter({ $0 == "didCancel" }).count > 1 { violations.append("#\(index): did cancel told twice") }
                if !refusedLate && !events.contains("didFinish") { violations.append("#\(index): no did finish before the wait returned") }
            } else if operations[index] is ProcedureOperation && !refusedLate {
                violations.append("#\(index): no observer event before the wait returned")
            }
            // A group finishes after its children.
            if case .group(let children, _, _, _, let lateChild) = node.kind, let groupDone = completionAt[index] {
                for child in children + (lateChild.map { [$0] } ?? []) where !late.contains(child) {
                    if let childDone = completionAt[child], childDone > groupDone {
                        violations.append("group #\(index) finished before its child #\(child)")
                    }
                }
                // A group that never executed ran none of its children.
                if observed[index]?.contains("willExecute") != true {
                    for child in children + (lateChild.map { [$0] } ?? []) where bodyStarts[child] != nil {
                        violations.append("group #\(index) never executed, yet its child #\(child) ran")
                    }
                }
            }
        }
        // Cycle members: refused ones never ran; a cancelled one never ran either.
        for operation in refusedCycleMembers where operation.isFinished || operation.isExecuting {
            violations.append("a member of a refused batch ran: \(operation.displayName)")
        }
        for operation in cancelledCycleMembers where !operation.isFinished {
            violations.append("a cancelled cycle member did not finish")
        }
        let cycleRuns = log.filter { if case .cycleMemberRan(0) = $0 { true } else { false } }.count
        if cycleRuns > 0 && !cancelledCycleMembers.isEmpty && refusedCycleMembers.isEmpty {
            violations.append("a cancelled cycle member ran")
        }
        checkLimits(log)
    }

    /// The concurrency limit of each queue (and each group) is never exceeded by the bodies of
    /// its synchronous operations; no two bodies of procedures sharing a category overlap.
    private func checkLimits(_ log: [FuzzEvent]) {
        var running: [String: Int] = [:]
        var limits: [String: Int] = [:]
        func key(of node: Int) -> String? {
            let described = scenario.nodes[node]
            switch described.kind {
            case .sync: break
            case .procedure: break
            default: return nil
            }
            if let parent = described.parent {
                guard case .group(_, _, let limit, _, _) = scenario.nodes[parent].kind else { return nil }
                limits["g\(parent)"] = limit
                return "g\(parent)"
            }
            limits["q\(described.queue)"] = scenario.limits[described.queue]
            return "q\(described.queue)"
        }
        func categories(of node: Int) -> [String] {
            guard case .procedure(let conditions) = scenario.nodes[node].kind else { return [] }
            return Array(Set(conditions.compactMap { if case .exclusive(let category) = $0 { category } else { nil } }))
        }
        var holding: [String: Int] = [:]
        for event in log {
            switch event {
            case .bodyStart(let node):
                if let key = key(of: node) {
                    running[key, default: 0] += 1
                    if running[key]! > limits[key]! { violations.append("\(key): \(running[key]!) bodies at once, limit \(limits[key]!)") }
                }
                for category in categories(of: node) {
                    holding[category, default: 0] += 1
                    if holding[category]! > 1 { violations.append("two bodies of category \(category) at once (#\(node))") }
                }
            case .bodyEnd(let node):
                if let key = key(of: node) { running[key, default: 0] -= 1 }
                for category in categories(of: node) { holding[category, default: 0] -= 1 }
            default:
                break
            }
        }
    }
}

/// A condition that produces an operation: a quick one, or one that only a cancel ends.
struct FuzzProducingCondition: OperationCondition {
    let never: Bool

    func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        if !never { return ClosureOperation(name: "\(procedure.displayName).produced") {} }
        let endless = ClosureProcedure<Void>(name: "\(procedure.displayName).endless", asynchronous: { _ in })
        try? endless.addObserver(ClosureObserver(didCancel: { procedure, _ in _ = procedure.finish(with: nil) }))
        return endless
    }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(.satisfied)
    }
}
