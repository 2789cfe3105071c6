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
    /// for what its children produce: they produce into the group's own queue; once the group is
    /// cancelled, it cancels what they produce, which then finishes without running).
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
        // The usual cancel of a procedure that has not executed (the queue's `cancelAllOperations`):
        // nobody to tell did cancel, no produced dependency, no taken signal and no categories to
        // withdraw (no `conditionExtras`, nothing requested) — the base operation's cancel with
        // the procedure's state change, in one critical section, without the steps below that
        // would find nothing to do.
        lock.lock()
        let state = procedureLifecycle.state
        if state == .initialized || state == .pending || state == .ready, conditionExtras == nil,
            !exclusivity.wasRequested, !observedEvents.union(hookEvents).contains(.didCancel)
        {
            // (From these states: cancelled before executing, or already cancelled.)
            guard procedureLifecycle.cancel() == .cancelledBeforeExecuting else {
                lock.unlock()
                return false
            }
            if let error { appendErrorsLocked([error]) }
            let baseCancelled = cancelLocked()
            let queue = self.queue
            lock.unlock()
            if baseCancelled {
                tellLifecycleEventStreams()
                tellCancelled(queue: queue, wasExecuting: false)
                makeRunnableAfterCancel(in: queue)
            }
            return true
        }
        typealias Taken = (
            ProcedureLifecycle.CancelAction, ConcurrentOperationQueue?, [ConcurrentOperation], Bool, Bool, EventDisposition?,
            Bool
        )
        var signal: ProcedureTakenSignal?
        // (Still under the lock taken above.)
        let (action, queue, produced, finishes, baseCancelled, event, requested) = { () -> Taken in
            let action = procedureLifecycle.cancel()
            guard action != .none else { return (action, nil, [], false, false, nil, false) }
            signal = takeTakenSignalLocked()
            if let error { appendErrorsLocked([error]) }
            // The cancelled flag, the state change and did cancel, in one step: no observer sees
            // did cancel before `isCancelled`, and no later event overtakes it.
            let baseCancelled = cancelLocked()
            let event = enqueueEventLocked(.didCancel(error))
            return (action, self.queue, producedDependencies, flags.contains(.finishesWhenCancelled), baseCancelled, event,
                    exclusivity.wasRequested)
        }()
        lock.unlock()
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
