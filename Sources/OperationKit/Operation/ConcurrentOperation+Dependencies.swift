extension ConcurrentOperation {
    /// Makes this operation wait until `operation` has finished (executed, or cancelled and
    /// reached by its queue). The dependency may be in another queue or in none.
    ///
    /// Adding an edge is O(1). If this operation is already in a queue, the edge is checked at
    /// once; otherwise it is checked when the operation is added to a queue. Adding the same
    /// dependency twice records it twice, which is harmless.
    ///
    /// - Parameter operation: The operation to wait for.
    /// - Throws: ``OperationError/Code-swift.struct/selfDependency``;
    ///   ``OperationError/Code-swift.struct/dependencyCycle`` (naming the cycle) if `operation`
    ///   already waits for this one and both are in queues;
    ///   ``OperationError/Code-swift.struct/dependentAlreadyExecuting`` or
    ///   ``OperationError/Code-swift.struct/dependentAlreadyFinished`` if this operation has
    ///   started (or its queue is starting it). In every case nothing changed.
    public final func addDependency(_ operation: ConcurrentOperation) throws(OperationError) {
        if operation === self {
            throw OperationError(.selfDependency, operations: [displayName], "an operation cannot depend on itself")
        }
        let (refusal, enqueuedIn) = lock.withLock { () -> (OperationError.Code?, ConcurrentOperationQueue?) in
            if let refusal = refusalOfNewDependency() { return (refusal, nil) }
            if self.queue == nil { _dependencies.append(operation) }
            return (nil, self.queue)
        }
        if let refusal {
            throw OperationError(
                refusal, operations: [displayName, operation.displayName], "too late to add a dependency")
        }
        if let enqueuedIn {
            try addDependencyWhileEnqueued(operation, queue: enqueuedIn)
        }
    }

    /// Makes this operation wait for each of `operations`: the same as calling
    /// ``addDependency(_:)`` for each, in one step (one lock instead of one per edge) when this
    /// operation is not yet in a queue.
    ///
    /// - Throws: the first error ``addDependency(_:)`` would throw. When this operation is not in a
    ///   queue, a refusal adds none of the dependencies; otherwise those before the refused one
    ///   were added.
    public final func addDependencies(_ operations: [ConcurrentOperation]) throws(OperationError) {
        if operations.contains(where: { $0 === self }) {
            throw OperationError(.selfDependency, operations: [displayName], "an operation cannot depend on itself")
        }
        let (refusal, enqueuedIn) = lock.withLock { () -> (OperationError.Code?, ConcurrentOperationQueue?) in
            if let refusal = refusalOfNewDependency() { return (refusal, nil) }
            if self.queue == nil { _dependencies.append(contentsOf: operations) }
            return (nil, self.queue)
        }
        if let refusal {
            throw OperationError(refusal, operations: [displayName], "too late to add a dependency")
        }
        if enqueuedIn != nil {
            for operation in operations { try addDependency(operation) }
        }
    }

    /// Stops waiting for `operation`. If this was the last unfinished dependency of an enqueued
    /// operation, it becomes ready. Removing an operation that is not a dependency does nothing.
    ///
    /// The members of an ``OperationLayer`` are fixed: removing one from a layer does nothing.
    public final func removeDependency(_ operation: ConcurrentOperation) {
        guard allowsRemovingDependencies else { return }
        let graph = GraphComponent.lock(componentOf: self)
        defer { graph.lock.unlock() }
        let (registeredRemovals, isEnqueued) = lock.withLock { () -> (Int, Bool) in
            var registered = 0
            var index = _dependencies.count - 1
            while index >= 0 {
                if _dependencies[index] === operation {
                    _dependencies.remove(at: index)
                    if index < processedDependencyCount {
                        processedDependencyCount -= 1
                        registered += 1
                    }
                }
                index -= 1
            }
            return (registered, queue != nil)
        }
        guard isEnqueued else { return }
        for _ in 0..<registeredRemovals where graph.unregister(self, from: operation) {
            if dependencyDidFinish(), let queue = queueWhilePending {
                queue.makeReady([self])
            }
        }
    }

    /// Under `lock`: why a dependency can no longer be added, if it cannot.
    private func refusalOfNewDependency() -> OperationError.Code? {
        if lifecycle.isFinished { return .dependentAlreadyFinished }
        if !lifecycle.isReady { return .dependentAlreadyExecuting }
        return nil
    }

    private func addDependencyWhileEnqueued(
        _ operation: ConcurrentOperation, queue: ConcurrentOperationQueue
    ) throws(OperationError) {
        let graph = GraphComponent.lock(componentOf: self, and: operation)
        defer { graph.lock.unlock() }
        let (refusal, cancelled) = lock.withLock { () -> (OperationError.Code?, Bool) in
            if let refusal = refusalOfNewDependency() { return (refusal, false) }
            _dependencies.append(operation)
            return (nil, lifecycle.isCancelled)
        }
        if let refusal {
            throw OperationError(refusal, operations: [displayName, operation.displayName], "too late to add a dependency")
        }
        // A cancelled operation waits for no dependency: the edge is recorded, not registered,
        // and closes no cycle.
        if cancelled { return }
        func undo() {
            lock.withLock {
                if let index = _dependencies.lastIndex(where: { $0 === operation }) {
                    _dependencies.remove(at: index)
                }
            }
        }
        if operation.hasFinished {
            lock.withLock { processedDependencyCount += 1 }
            return
        }
        do {
            try graph.order(operation, before: self)
        } catch {
            undo()
            throw error
        }
        guard queue.holdBackIfNotDispatched(self) else {
            undo()
            throw OperationError(
                .dependentAlreadyExecuting, operations: [displayName, operation.displayName],
                "the queue is already starting this operation")
        }
        let appended = operation.registerDependent(self)
        lock.withLock { processedDependencyCount += 1 }
        if !appended, dependencyDidFinish() {
            queue.makeReady([self])
        }
    }
}
