@testable import OperationKit
import Testing

/// The reference model of OperationKit's dependency graph, for operations numbered 0..<count in a
/// suspended queue (so nothing finishes while it is used).
///
/// An operation's dependencies are what the user gave it. Its edges are *registered* — take part
/// in cycle detection — once it is enqueued: an edge "a waits for b" exists when `a` is enqueued
/// and `b` is one of its dependencies (`b` itself may be enqueued or not). A new edge "o waits for
/// d" closes a cycle exactly when `d` already waits, directly or not, for `o`, found here by a
/// plain depth-first search.
struct GraphModel {
    private(set) var dependencies: [[Int]]
    private(set) var isEnqueued: [Bool]

    init(count: Int) {
        dependencies = Array(repeating: [], count: count)
        isEnqueued = Array(repeating: false, count: count)
    }

    var count: Int { dependencies.count }

    /// The dependencies of `index` that take part in cycle detection.
    func registeredDependencies(of index: Int) -> [Int] { isEnqueued[index] ? dependencies[index] : [] }

    /// Whether some enqueued operation waits for `index`.
    func hasDependents(_ index: Int) -> Bool {
        (0..<count).contains { isEnqueued[$0] && dependencies[$0].contains(index) }
    }

    /// Whether `start` waits for `target`, directly or not, through registered edges.
    func waits(_ start: Int, for target: Int) -> Bool {
        var seen: Set<Int> = [start]
        var stack = [start]
        while let node = stack.popLast() {
            for next in registeredDependencies(of: node) {
                if next == target { return true }
                if seen.insert(next).inserted { stack.append(next) }
            }
        }
        return false
    }

    /// Whether the edge "`dependent` waits for `dependency`" would close a cycle.
    func closesCycle(dependent: Int, dependency: Int) -> Bool {
        dependent == dependency || waits(dependency, for: dependent)
    }

    /// Whether enqueueing `index` would be refused because one of its dependencies closes a cycle.
    func refusesEnqueueing(_ index: Int) -> Bool {
        dependencies[index].contains { closesCycle(dependent: index, dependency: $0) }
    }

    mutating func addDependency(dependent: Int, dependency: Int) { dependencies[dependent].append(dependency) }

    mutating func enqueue(_ index: Int) { isEnqueued[index] = true }

    mutating func removeAllDependencies(of index: Int) { dependencies[index] = [] }

    /// Why `indices` (the operations an error named) do not describe the cycle that the edge
    /// "`dependent` waits for one of `closing`" would close, or `nil` if they do: each waits for
    /// the next through a registered edge, the last is `dependent`, and the first is in `closing`.
    func cycleProblem(_ indices: [Int], dependent: Int, closing: [Int]) -> String? {
        guard indices.count >= 2 else { return "a cycle of \(indices.count) operations" }
        guard Set(indices).count == indices.count else { return "an operation appears twice" }
        guard indices.last == dependent else { return "ends with \(indices.last!), not \(dependent)" }
        guard closing.contains(indices[0]) else { return "starts with \(indices[0]), not one of \(closing)" }
        for (waiter, awaited) in zip(indices, indices.dropFirst())
        where !registeredDependencies(of: waiter).contains(awaited) {
            return "\(waiter) does not wait for \(awaited)"
        }
        return nil
    }
}

/// White-box access to the dependency graph's topological order (`@testable`), to check its
/// invariant and to aim edges at the Pearce–Kelly slow path. Only used with nothing running.
enum GraphProbe {
    /// The graph order of each operation, `nil` if it never took part in an edge.
    /// Orders of operations of different components are not comparable (see `sameComponent`).
    static func orders(_ operations: [ConcurrentOperation]) -> [Int?] {
        operations.map { operation in
            guard let component = operation.componentForReading else { return nil }
            let graph = GraphComponent.lockedRoot(from: component)
            defer { graph.lock.unlock() }
            let order = graph.order(of: operation)
            return order == DependencyGraph.unassigned ? nil : order
        }
    }

    /// Whether both operations belong to one component of the graph.
    static func sameComponent(_ first: ConcurrentOperation, _ second: ConcurrentOperation) -> Bool {
        guard let one = first.componentForReading, let other = second.componentForReading else { return false }
        return GraphComponent.root(from: one) === GraphComponent.root(from: other)
    }
}

/// Operations, a suspended queue and the reference model, driven together: every mutation is
/// applied to both and the outcomes compared. Used from the test's thread only.
final class GraphHarness {
    let label: String
    let operations: [ClosureOperation]
    let tallies: [Tally]
    let queue: ConcurrentOperationQueue
    private(set) var model: GraphModel
    private let clock = LogicalClock()
    private let indexByName: [String: Int]

    /// Counters, for the tests to check that they exercised what they meant to.
    private(set) var acceptedEdges = 0
    private(set) var refusedEdges = 0
    private(set) var refusedOperations = 0
    private(set) var slowPathEdges = 0
    private(set) var slowPathCycles = 0
    /// Set when the queue and the model disagreed: running could then hang on a cycle.
    private(set) var diverged = false

    init(label: String, count: Int) {
        self.label = label
        let clock = self.clock
        let tallies = (0..<count).map { _ in Tally() }
        self.tallies = tallies
        operations = (0..<count).map { index in
            let tally = tallies[index]
            let operation = ClosureOperation(name: "\(label)#\(index)") { tally.recordStart(clock) }
            operation.completionBlock = { tally.recordCompletion(clock) }
            return operation
        }
        indexByName = Dictionary(uniqueKeysWithValues: operations.enumerated().map { ($1.name!, $0) })
        model = GraphModel(count: count)
        queue = ConcurrentOperationQueue(name: label)
        queue.isSuspended = true
    }

    var count: Int { operations.count }

    /// Whether the edge "`dependent` waits for `dependency`" goes against the current order between
    /// two operations that both have edges on the far side: the O(1) paths cannot take it.
    func isSlowPath(dependent: Int, dependency: Int) -> Bool {
        guard model.isEnqueued[dependent],
              GraphProbe.sameComponent(operations[dependent], operations[dependency]) else { return false }
        let orders = GraphProbe.orders([operations[dependent], operations[dependency]])
        guard let lower = orders[0], let upper = orders[1], upper > lower else { return false }
        return !model.registeredDependencies(of: dependency).isEmpty && model.hasDependents(dependent)
    }

    /// Adds the dependency to the operation and to the model, and checks the outcome against the model.
    func addDependency(_ dependent: Int, _ dependency: Int, sourceLocation: SourceLocation = #_sourceLocation) {
        let slow = isSlowPath(dependent: dependent, dependency: dependency)
        if slow { slowPathEdges += 1 }
        let edge = "\(label): \(dependent) waits for \(dependency)"
        do throws(OperationError) {
            try operations[dependent].addDependency(operations[dependency])
            if dependent == dependency {
                diverge()
                Issue.record("\(edge): a self-dependency was accepted", sourceLocation: sourceLocation)
            } else if model.isEnqueued[dependent] && model.closesCycle(dependent: dependent, dependency: dependency) {
                diverge()
                Issue.record("\(edge): accepted, but it closes a cycle", sourceLocation: sourceLocation)
            }
            model.addDependency(dependent: dependent, dependency: dependency)
            acceptedEdges += 1
        } catch {
            refusedEdges += 1
            if dependent == dependency {
                #expect(error.code == .selfDependency, "\(edge): \(error)", sourceLocation: sourceLocation)
            } else if !model.isEnqueued[dependent] || !model.closesCycle(dependent: dependent, dependency: dependency) {
                diverge()
                Issue.record("\(edge): refused, but it closes no cycle: \(error)", sourceLocation: sourceLocation)
            } else {
                if slow { slowPathCycles += 1 }
                checkCycle(error, dependent: dependent, closing: [dependency], edge, sourceLocation)
            }
        }
    }

    /// Enqueues `indices` (one `addOperation`, or one `addOperations` for several) and checks which
    /// were refused, and the first error, against the model.
    func enqueue(_ indices: [Int], sourceLocation: SourceLocation = #_sourceLocation) {
        // The model prepares them one after the other, as the queue does; the first refusal
        // refuses the whole batch (all or nothing), and the model is left as it was.
        var firstRefused: (index: Int, closing: [Int], snapshot: GraphModel)?
        var trial = model
        for index in indices {
            if trial.refusesEnqueueing(index) {
                let closing = trial.dependencies[index].filter {
                    trial.closesCycle(dependent: index, dependency: $0)
                }
                firstRefused = (index, closing, trial)
                break
            }
            trial.enqueue(index)
        }
        let expectedRefused: Set<Int> = firstRefused == nil ? [] : Set(indices)
        if firstRefused == nil { model = trial }
        refusedOperations += expectedRefused.count
        let what = "\(label): enqueueing \(indices.count == 1 ? "\(indices[0])" : "\(indices.count) operations")"
        let error = captureError {
            if indices.count == 1 {
                try queue.addOperation(operations[indices[0]])
            } else {
                try queue.addOperations(indices.map { operations[$0] }, waitUntilFinished: false)
            }
        }
        switch (error, firstRefused) {
        case (nil, nil):
            break
        case (let error?, nil):
            diverge()
            Issue.record("\(what): refused, but it closes no cycle: \(error)", sourceLocation: sourceLocation)
        case (nil, let refused?):
            diverge()
            Issue.record("\(what): accepted, but \(refused.index) closes a cycle", sourceLocation: sourceLocation)
        case (let error?, let refused?):
            let saved = model
            model = refused.snapshot
            checkCycle(error, dependent: refused.index, closing: refused.closing, what, sourceLocation)
            model = saved
        }
        let inQueue = Set(queue.operations.map { ObjectIdentifier($0) })
        for index in indices {
            let refused = expectedRefused.contains(index)
            if inQueue.contains(ObjectIdentifier(operations[index])) == refused {
                diverge()
                let state = refused ? "in the queue, though refused" : "not in the queue"
                Issue.record("\(what): \(index) is \(state)", sourceLocation: sourceLocation)
            }
        }
    }

    private func captureError(_ body: () throws -> Void) -> OperationError? {
        do {
            try body()
        } catch let error as OperationError {
            return error
        } catch {
            Issue.record(error, "\(label): not an OperationError")
        }
        return nil
    }

    private func checkCycle(
        _ error: OperationError, dependent: Int, closing: [Int], _ what: String, _ sourceLocation: SourceLocation
    ) {
        if error.code != .dependencyCycle { diverge() }
        #expect(error.code == .dependencyCycle, "\(what): \(error)", sourceLocation: sourceLocation)
        let indices = error.operationNames.map { indexByName[$0] ?? -1 }
        if let problem = model.cycleProblem(indices, dependent: dependent, closing: closing) {
            diverge()
            Issue.record("\(what): \(indices) is not the cycle: \(problem)", sourceLocation: sourceLocation)
        }
    }

    private func diverge() { diverged = true }

    /// Checks the graph's invariant: every registered edge goes from a lower order to a higher one.
    func checkOrderInvariant(sourceLocation: SourceLocation = #_sourceLocation) {
        let orders = GraphProbe.orders(operations)
        for dependent in 0..<count {
            for dependency in model.registeredDependencies(of: dependent) {
                guard let low = orders[dependency], let high = orders[dependent], low < high else {
                    diverge()
                    let broken = "\(orders[dependency] as Any) < \(orders[dependent] as Any)"
                    Issue.record("\(label): edge \(dependency) → \(dependent) breaks the order: \(broken)",
                                 sourceLocation: sourceLocation)
                    return
                }
            }
        }
    }

    /// Gives each refused operation another try (the model decides), then drops its dependencies
    /// and enqueues it, so that whatever waits for it can run.
    func enqueueRefusedWithoutDependencies(sourceLocation: SourceLocation = #_sourceLocation) {
        for index in 0..<count where !model.isEnqueued[index] {
            enqueue([index], sourceLocation: sourceLocation)
            if model.isEnqueued[index] { continue }
            for dependency in model.dependencies[index] { operations[index].removeDependency(operations[dependency]) }
            model.removeAllDependencies(of: index)
            enqueue([index], sourceLocation: sourceLocation)
        }
    }

    /// Resumes the queue and checks that every operation ran once, after all its dependencies.
    func runAndCheck(sourceLocation: SourceLocation = #_sourceLocation) {
        if diverged {
            Issue.record("\(label): not run, since the queue disagreed with the model", sourceLocation: sourceLocation)
            return
        }
        queue.isSuspended = false
        guard queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout) else {
            Issue.record("\(label): the queue did not drain; \(queue.operationCount) left",
                         sourceLocation: sourceLocation)
            return
        }
        let notOnce = offenders(count) { tallies[$0].executionCount != 1 || tallies[$0].completionCount != 1 }
        #expect(notOnce.count == 0, "\(label): did not run exactly once: \(notOnce)", sourceLocation: sourceLocation)
        let early = offenders(count) { index in
            model.dependencies[index].contains { tallies[index].started <= tallies[$0].finished }
        }
        #expect(early.count == 0, "\(label): started before a dependency finished: \(early)",
                sourceLocation: sourceLocation)
    }
}
