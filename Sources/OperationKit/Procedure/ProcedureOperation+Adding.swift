// ProcedureOperation: adding operations — produce(_:before:), the pending-event tokens that say
// which event of the procedure the add must come before, and the will-add / did-add events.

import Dispatch

/// An event of a procedure that an add must come before: passed to
/// ``ProcedureOperation/produce(_:before:)`` and ``GroupOperation/addChild(_:before:)``.
public enum PendingProcedureEvent: Hashable, Sendable, CustomStringConvertible {
    /// The procedure's execution: the operation is added before the procedure's
    /// ``ConcurrentOperation/execute()`` runs. Accepted while the procedure waits in its queue
    /// (pending, evaluating conditions, ready: its start then waits for the add), or from its own
    /// will-execute hook or observer, on the thread delivering it.
    case execute
    /// The procedure's finish: the operation is added before the procedure finishes (before its
    /// completion block, dependents and did-finish observers). Accepted while the procedure
    /// executes (a finish meanwhile waits for the add), or from its own will-finish hook or
    /// observer, on the thread delivering it.
    case finish

    /// `"execute"` or `"finish"`.
    public var description: String {
        switch self {
        case .execute: "execute"
        case .finish: "finish"
        }
    }
}

extension ProcedureOperation {
    /// Adds `operation` to this procedure's queue, before `event` of this procedure if one is
    /// given, and tells the hooks and observers: will add (``procedureWillAdd(_:)``,
    /// ``OperationObserver/procedure(_:willAdd:)``) before the add, then did add and did produce
    /// (``procedureDidAdd(_:)``, ``OperationObserver/procedure(_:didAdd:)``,
    /// ``OperationObserver/procedure(_:didProduce:)``) once the queue has taken it, all on the
    /// calling thread (or, if another thread is delivering this procedure's events, by that one).
    ///
    /// - `before: nil`: while the procedure executes, from its work, on any thread. A finish that
    ///   happens meanwhile is held back until the operation has been added and the observers were
    ///   told, so did add never comes after will finish.
    /// - `before: .execute`: also while the procedure waits in its queue (pending, evaluating its
    ///   conditions, ready, also cancelled), and from its will-execute hook or observer on the
    ///   thread delivering it; its start waits for the add, so the operation is in the queue before
    ///   will execute is told (or, from will execute, before the work runs).
    /// - `before: .finish`: while it executes (as `nil`), or from its will-finish hook or observer
    ///   on the thread delivering it: the operation is in the queue before the procedure finishes.
    ///
    /// The procedure does not wait for the operation it produced (a ``GroupOperation`` does wait
    /// for what its children produce: they produce into the group's own queue).
    ///
    /// - Parameters:
    ///   - operation: An operation that is in no queue and has not started.
    ///   - event: The event of this procedure the add must come before, or `nil`.
    /// - Throws: ``OperationError/Code-swift.struct/eventAlreadyPast`` if `event` is given and
    ///   the procedure is past it (or in no queue); ``OperationError/Code-swift.struct/notExecuting``
    ///   without `event` if the procedure is not executing on a queue; or what the queue's
    ///   `addOperation` throws (will add was told then, did add is not). Nothing is added then.
    public func produce(_ operation: ConcurrentOperation, before event: PendingProcedureEvent?) throws(OperationError) {
        let (state, queue) = lock.withLock { () -> (ProcedureState, ConcurrentOperationQueue?) in
            let state = procedureLifecycle.state
            guard let queue = self.queue, acceptsAddLocked(before: event, inQueue: true) else { return (state, nil) }
            produceProgress.begin()
            return (state, queue)
        }
        guard let queue else {
            if let event {
                throw OperationError(
                    .eventAlreadyPast, operations: [displayName, operation.displayName],
                    "produce(_:before: .\(event)) on a procedure past that event, or in no queue (state \(state))")
            }
            throw OperationError(
                .notExecuting, operations: [displayName, operation.displayName],
                "produce() needs a procedure executing on a queue (state \(state))")
        }
        // Into a group's queue: the group cancels what comes once it is cancelled, as it does a
        // child added then (also a produce under way while it is being cancelled).
        let owner = queue.owningProcedure
        let cancelFirst = owner?.producedIntoOwnQueueBegins() ?? false
        if cancelFirst { operation.cancel() }
        emitAddEvent(.willAdd(operation), waitForDelivery: true)
        var failure: OperationError?
        do {
            try queue.addOperation(operation)
            // Before the produce ends: a finish waits for it, so this comes before finished.
            if let instrument = queue.instrumentSlot.current { tell(.produced(operation), queue: queue, to: instrument) }
        } catch {
            failure = error
        }
        owner?.producedIntoOwnQueueEnded(operation, added: failure == nil, cancelledFirst: cancelFirst)
        let (event, ended) = lock.withLock { () -> (EventDisposition?, (finish: Bool, start: Bool)) in
            let event = failure == nil ? enqueueEventLocked(.didProduce(operation)) : nil
            return (event, endAddLocked())
        }
        if let event { handle(event, delivering: .didProduce(operation), then: .nothing) }
        if ended.finish { completeFinish(executed: true) }
        if let failure { throw failure }
    }

    /// Under `lock`: whether an add before `event` (or, without one, a plain produce) is
    /// accepted now. `inQueue`: the add goes to the procedure's own queue (a produce), which a
    /// procedure only has from `pending` on; a group's child goes to the group's queue.
    func acceptsAddLocked(before event: PendingProcedureEvent?, inQueue: Bool) -> Bool {
        let state = procedureLifecycle.state
        switch event {
        case nil:
            return state == .executing
        case .execute?:
            switch state {
            case .initialized: return !inQueue
            case .pending, .evaluatingConditions, .ready: return true
            case .executing:
                return eventDelivery.isDeliveringWillOnCurrentThread || isTellingEventQueueObserverLocked(.willExecute)
            case .finishing, .finished: return false
            }
        case .finish?:
            switch state {
            case .executing: return true
            case .finishing:
                return (eventDelivery.isDeliveringWillOnCurrentThread || isTellingEventQueueObserverLocked(.willFinish))
                    && !lifecycle.isFinished
            case .initialized, .pending, .evaluatingConditions, .ready, .finished: return false
            }
        }
    }

    /// Under `lock`: an add counted by `produceProgress.begin()` is done. If it was the
    /// last one and a worker waits to start the procedure, that worker is let go here.
    func endAddLocked() -> (finish: Bool, start: Bool) {
        let ended = produceProgress.end()
        if ended.start, let gate = conditionExtras?.startGate {
            conditionExtras?.startGate = nil
            gate.signal()
        }
        return ended
    }

    /// Under `lock`: the semaphore a worker waits on until the adds under way are done.
    func startGateLocked() -> DispatchSemaphore {
        if let gate = conditionExtras?.startGate { return gate }
        let gate = DispatchSemaphore(value: 0)
        extrasLocked.startGate = gate
        return gate
    }

    /// Raises a will-add or did-add event — unless the procedure has finished (no event comes
    /// after did finish).
    func emitAddEvent(_ event: ProcedureEvent, waitForDelivery: Bool) {
        let disposition = lock.withLock { () -> EventDisposition? in
            guard !lifecycle.isFinished else { return nil }
            return enqueueEventLocked(event, waitForDelivery: waitForDelivery)
        }
        if let disposition { handle(disposition, delivering: event, then: .nothing) }
        // Will add: the add waits until the observers with an event queue have been told too.
        if waitForDelivery { awaitEventQueues() }
    }
}
