/// The dependency graph of enqueued operations, kept in a topological order so that
/// a cycle is found when the edge that closes it is registered, at O(1) for the usual edge.
///
/// An edge "`dependent` waits for `dependency`" is registered when the dependent is added to a
/// queue (or when a dependency is added to an operation that is already in one). Only edges
/// between unfinished operations are kept; an operation's successors are its `dependents` and its
/// predecessors are its first `processedDependencyCount` dependencies that are unfinished.
/// The `dependents` lists are protected by the lock of their component (see `LifeFlags`).
///
/// Every operation that takes part in an edge has a `graphOrder`, and every registered edge goes
/// from a lower order to a higher one. A new edge that already respects the order cannot close a
/// cycle and costs O(1); so does one whose ends are new to the graph, or whose dependency has no
/// predecessors (it moves below everything), or whose dependent has no successors (it moves
/// above everything). Otherwise the Pearce–Kelly dynamic topological sort visits only the
/// operations whose order lies between the two ends: it finds the cycle if there is one, else
/// it reorders just those operations.
///
/// The graph is split into its connected components (`GraphComponent`), each with its own lock
/// and its own order space, so that unrelated operations — of one queue or of several — never
/// contend; the functions below run on the locked root of the component that holds the edge.
///
/// Lock order: a component's lock, then a queue's lock, then an operation's lock. No code
/// takes a component lock while holding another lock (except `GraphComponent.merge`).
enum DependencyGraph {
    static let unassigned = Int.min

    /// Registers the unprocessed dependencies of `operation`, which must already know its queue.
    /// On a cycle, undoes what this call registered and throws; the caller rolls back the rest.
    /// The caller holds the `enqueuing` flag, so nothing here can make the operation runnable.
    ///
    /// `anchor` is what ``anchorBits(ofDependenciesOf:)`` returned under the operation's lock, if
    /// the caller read it there already (it only chooses which component to lock first).
    static func registerDependencies(of operation: ConcurrentOperation, anchor: UInt? = nil) throws(OperationError) {
        let (locked, dependencies, start) = lockComponent(ofDependenciesOf: operation, anchor: anchor)
        // Not retained: the operation is a member now, and keeps its component's root alive.
        let failure = locked._withUnsafeGuaranteedRef { graph -> OperationError? in
            defer { graph.lock.unlock() }
            return register(operation, dependencies, from: start, in: graph)
        }
        if let failure { throw failure }
    }

    /// The body of ``registerDependencies(of:anchor:)``, on the locked root: returns the error
    /// of a cycle after undoing what it registered.
    private static func register(
        _ operation: ConcurrentOperation, _ dependencies: OperationList, from start: Int, in graph: GraphComponent
    ) -> OperationError? {
        // Indices, not a slice: `Slice<OperationList>` runs unspecialised here (a generic
        // metadata lookup per call).
        let end = dependencies.count
        let pendingCount = end - start
        if pendingCount <= 0 { return nil }
        operation.readiness.add(pendingCount, ordering: .acquiringAndReleasing)
        var skipped = 0
        // The usual edge already respects the order: checked here, without a call, against the
        // dependent's order read once (only `order(_:before:)` changes orders).
        var dependentOrder = graph.order(of: operation)
        for index in start..<end {
            let dependency = dependencies[index]
            let dependencyOrder = graph.order(of: dependency)
            if dependencyOrder == DependencyGraph.unassigned || dependentOrder == DependencyGraph.unassigned
                || dependencyOrder >= dependentOrder
            {
                do {
                    try graph.order(dependency, before: operation)
                    dependentOrder = operation.graphOrder
                } catch {
                    // Release the count of every dependency, except those registered here that have
                    // finished since: their finish released their count already.
                    var absent = 0
                    for doneIndex in start..<index where !graph.unregister(operation, from: dependencies[doneIndex]) {
                        absent += 1
                    }
                    let releasedByFinish = absent - skipped
                    operation.readiness.subtract(pendingCount - releasedByFinish, ordering: .acquiringAndReleasing)
                    operation.lock.withLock { operation.processedDependencyCount = start }
                    return error
                }
            }
            if !dependency.registerDependent(operation) { skipped += 1 }
        }
        if skipped > 0 {
            operation.readiness.subtract(skipped, ordering: .acquiringAndReleasing)
        }
        return nil
    }

    /// The component bits of the first unprocessed dependency of `operation` that has a
    /// component, or 0. Call under the operation's lock; retains nothing.
    static func anchorBits(ofDependenciesOf operation: ConcurrentOperation) -> UInt {
        operation._dependencies.firstResult(from: operation.processedDependencyCount) { dependency in
            let bits = dependency.graphComponentBits.load(ordering: .acquiring)
            return bits != 0 ? bits : nil
        } ?? 0
    }

    /// Locks the root of a component holding `operation` and its unprocessed dependencies
    /// (merging components as needed) and returns it with those dependencies, read under it,
    /// and the index of the first of them; they count as processed from here on.
    /// The component is that of the operation or of its first dependency that has one, so that
    /// the usual edge — a new operation after one of the graph — creates and merges nothing.
    private static func lockComponent(
        ofDependenciesOf operation: ConcurrentOperation, anchor hint: UInt?
    ) -> (Unmanaged<GraphComponent>, OperationList, Int) {
        var hint = hint
        while true {
            var anchor = operation.graphComponentBits.load(ordering: .acquiring)
            if anchor == 0 {
                anchor = hint ?? operation.lock.withLock { anchorBits(ofDependenciesOf: operation) }
                hint = nil
            }
            // Not retained: alive while a member is — the dependency that gave `anchor`, or the
            // operation itself.
            let locked = anchor != 0
                ? GraphComponent.lockedRootUnretained(fromBits: anchor)
                : Unmanaged.passUnretained(GraphComponent.lock(componentOf: operation))
            if let ownForeign = locked._withUnsafeGuaranteedRef({ $0.adopt(operation) }) {
                let graph = locked.takeUnretainedValue()
                graph.lock.unlock()
                GraphComponent.merge(dependencySide: graph, dependentSide: ownForeign)
                continue
            }
            let (dependencies, start, foreign) = locked._withUnsafeGuaranteedRef { graph in
                operation.lock.withLock { () -> (OperationList, Int, GraphComponent?) in
                    let start = operation.processedDependencyCount
                    // Without retaining each dependency: S4 scans 990,000 of them.
                    let foreign = operation._dependencies.firstResult(from: start) { graph.adopt($0) }
                    // Counted as processed here rather than in a critical section of its own after
                    // the registration: every other reader of an enqueued operation's count holds
                    // the component's lock, which the registration holds throughout (a cycle puts
                    // the count back).
                    if foreign == nil { operation.processedDependencyCount = operation._dependencies.count }
                    return (operation._dependencies, start, foreign)
                }
            }
            guard let foreign else { return (locked, dependencies, start) }
            let graph = locked.takeUnretainedValue()
            graph.lock.unlock()
            GraphComponent.merge(dependencySide: foreign, dependentSide: graph)
        }
    }
}

// MARK: Edges (call on the locked root of the component)

extension GraphComponent {
    /// Removes `dependent` from the dependents of `dependency`. Returns `true` if it was there (so
    /// the caller owes the dependent's readiness one decrement).
    /// `dependent` is a member; `dependency` may be anywhere (if it is not a member, `dependent`
    /// is not in its list).
    func unregister(_ dependent: ConcurrentOperation, from dependency: ConcurrentOperation) -> Bool {
        guard holds(dependency) else { return false }
        let entry = Unmanaged.passUnretained(dependent).toOpaque()
        guard let index = dependency.dependents.firstIndex(where: { $0.toOpaque() == entry }) else { return false }
        dependency.dependents.remove(at: index)
        return true
    }

    /// Makes `graphOrder(dependency) < graphOrder(dependent)`, or throws if `dependency` already
    /// waits, directly or not, for `dependent`.
    func order(_ dependency: ConcurrentOperation, before dependent: ConcurrentOperation) throws(OperationError) {
        let unassigned = DependencyGraph.unassigned
        if order(of: dependency) == unassigned { moveToBottom(dependency) }
        if order(of: dependent) == unassigned { moveToTop(dependent) }
        if dependency.graphOrder < dependent.graphOrder { return }
        if predecessors(of: dependency).isEmpty {
            moveToBottom(dependency)
            return
        }
        if successors(of: dependent).isEmpty {
            moveToTop(dependent)
            return
        }
        try reorder(dependency, before: dependent)
    }

    /// Operations that wait for `operation`: not finished, and not cancelled (a cancelled
    /// operation waits for none of its dependencies, so its edges close no cycle).
    func successors(of operation: ConcurrentOperation) -> [ConcurrentOperation] {
        operation.dependents.map { $0.takeUnretainedValue() }.filter { !$0.hasFinished && !$0.isCancelled }
    }

    /// Registered, unfinished dependencies of `operation`; none if it was cancelled.
    func predecessors(of operation: ConcurrentOperation) -> [ConcurrentOperation] {
        let (registered, count) = operation.lock.withLock {
            (operation._dependencies, operation.lifecycle.isCancelled ? 0 : operation.processedDependencyCount)
        }
        return registered.prefix(count).filter { !$0.hasFinished }
    }

    /// Pearce–Kelly: the edge `dependency → dependent` violates the order.
    private func reorder(_ dependency: ConcurrentOperation, before dependent: ConcurrentOperation) throws(OperationError) {
        let upper = dependency.graphOrder  // both normalised by `order(_:before:)`
        let lower = dependent.graphOrder

        // Forward from the dependent, through orders below the dependency's. Reaching the
        // dependency means it already waits for the dependent: a cycle.
        var forward: [ConcurrentOperation] = [dependent]
        var parent: [ObjectIdentifier: ConcurrentOperation] = [:]
        var seen: Set<ObjectIdentifier> = [ObjectIdentifier(dependent)]
        var stack: [ConcurrentOperation] = [dependent]
        while let node = stack.popLast() {
            for next in successors(of: node) {
                if next === dependency {
                    // `dependency` waits for `node`, which waits for its parent, … back to
                    // `dependent`, which would wait for `dependency`.
                    var path = [node]
                    while let previous = parent[ObjectIdentifier(path[path.count - 1])] { path.append(previous) }
                    throw OperationError(
                        .dependencyCycle,
                        operations: ([dependency] + path).map(\.displayName),
                        "dependency cycle: each operation waits for the one after it, and the last for the first")
                }
                if order(of: next) < upper, seen.insert(ObjectIdentifier(next)).inserted {
                    parent[ObjectIdentifier(next)] = node
                    forward.append(next)
                    stack.append(next)
                }
            }
        }

        // Backward from the dependency, through orders above the dependent's.
        var backward: [ConcurrentOperation] = [dependency]
        seen = [ObjectIdentifier(dependency)]
        stack = [dependency]
        while let node = stack.popLast() {
            for previous in predecessors(of: node)
            where order(of: previous) > lower && seen.insert(ObjectIdentifier(previous)).inserted {
                backward.append(previous)
                stack.append(previous)
            }
        }

        // Give the backward set the lowest of the pooled orders, then the forward set.
        backward.sort { $0.graphOrder < $1.graphOrder }
        forward.sort { $0.graphOrder < $1.graphOrder }
        let pool = (backward + forward).map(\.graphOrder).sorted()
        for (operation, order) in zip(backward + forward, pool) { operation.graphOrder = order }
    }
}
