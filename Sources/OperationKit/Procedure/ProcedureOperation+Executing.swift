// ProcedureOperation: while it executes — did execute, producing operations — and the steps of
// a cancel (cancelCounting: the state change, did cancel, what the procedure's stage requires).

extension ProcedureOperation {
    // MARK: Executing

    func emitDidExecuteOnce() {
        // Usually told already, by a finish inside `execute()`: no need for the lock.
        if didExecuteTold.load(ordering: .acquiring) { return }
        let event = lock.withLock { () -> EventDisposition? in
            guard !didExecuteTold.load(ordering: .relaxed) else { return nil }
            didExecuteTold.store(true, ordering: .releasing)
            return enqueueEventLocked(.didExecute)
        }
        if let event { handle(event, delivering: .didExecute, then: .nothing) }
    }

    /// Adds `operation` to this procedure's queue: ``produce(_:before:)`` with no pending event.
    /// Call it while the procedure executes, from its work, on any thread. A finish that happens
    /// meanwhile is held back until the operation has been added and the observers were told, so
    /// did-produce never comes after did-finish.
    ///
    /// The procedure does not wait for the operation it produced (a ``GroupOperation`` does wait
    /// for what its children produce: they produce into the group's own queue).
    ///
    /// - Parameter operation: An operation that is in no queue and has not started.
    /// - Throws: ``OperationError/Code-swift.struct/notExecuting`` if the procedure is not
    ///   executing on a queue (including when it was started by hand); or what the queue's
    ///   `addOperation` throws. No did-add observer is told then.
    public func produce(_ operation: ConcurrentOperation) throws(OperationError) {
        try produce(operation, before: nil)
    }

    // MARK: Cancelling

    /// ``cancel(with:)``; returns whether this cancel counted (the procedure was not cancelled,
    /// finishing or finished already).
    @discardableResult
    func cancelCounting(with error: (any Error)?) -> Bool {
        typealias Taken = (
            ProcedureLifecycle.CancelAction, ConcurrentOperationQueue?, [ConcurrentOperation], Bool, Bool, EventDisposition?,
            Bool
        )
        var signal: ProcedureTakenSignal?
        let (action, queue, produced, finishes, baseCancelled, event, requested) = lock.withLock { () -> Taken in
            let action = procedureLifecycle.cancel()
            guard action != .none else { return (action, nil, [], false, false, nil, false) }
            signal = takeTakenSignalLocked()
            if let error { _errors.append(error) }
            // The cancelled flag, the state change and did cancel, in one step: no observer sees
            // did cancel before `isCancelled`, and no later event overtakes it.
            let baseCancelled = cancelLocked()
            let event = enqueueEventLocked(.didCancel(error))
            return (action, self.queue, producedDependencies, flags.contains(.finishesWhenCancelled), baseCancelled, event,
                    exclusivity.wasRequested)
        }
        guard action != .none else { return false }
        if baseCancelled {
            tellLifecycleEventStreams()
            tellCancelled(queue: queue, wasExecuting: action == .cancelledWhileExecuting)
            makeRunnableAfterCancel(in: queue)
        }
        if let event { handle(event, delivering: .didCancel(error), then: .nothing) }
        switch action {
        case .abandonEvaluation:
            // Its conditions may still wait for the dependencies they produced: cancel them too.
            for dependency in produced where !dependency.isFinished { dependency.cancel() }
            queue?.requeue(self)
        case .cancelledBeforeExecuting:
            for dependency in produced where !dependency.isFinished { dependency.cancel() }
            // Only a procedure that asked for categories can be waiting for them.
            if requested && ExclusivityController.withdraw(ObjectIdentifier(self)) { queue?.requeue(self) }
        case .cancelledWhileExecuting:
            if finishes { finish() }
        case .none:
            break
        }
        // The produced dependencies no longer wait for a worker to take the procedure (after
        // their cancel above: none starts in between).
        signal?.fire()
        return true
    }
}
