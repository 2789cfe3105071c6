import Dispatch

/// An operation with conditions, observers, errors and the full procedure lifecycle — what users
/// of ProcedureKit, PSOperations and Operations subclass.
///
/// ```swift
/// final class Upload: ProcedureOperation, @unchecked Sendable {
///     override func execute() {
///         client.upload(file) { error in self.finish(with: error) }
///     }
/// }
///
/// let upload = Upload()
/// try upload.addCondition(NoFailedDependencies())
/// try upload.addObserver(TimeoutObserver(timeout: .seconds(30)))
/// try queue.addOperation(upload)
/// ```
///
/// Lifecycle (see ``ProcedureState``): initialized → pending (in a queue) → evaluatingConditions
/// (once its dependencies have finished; skipped without conditions) → ready → executing →
/// finishing → finished. A procedure that was cancelled, or whose conditions failed, goes from
/// ready to finishing without executing.
///
/// - Finish with ``finish()``, ``finish(with:)`` or ``finish(withErrors:)`` (and
///   ``ResultProcedure/finish(withValue:)`` for a typed result). Only the first call counts; later
///   ones change nothing and are recorded in ``diagnostics``.
/// - ``cancel()`` and ``cancel(with:)`` never finish an executing procedure behind its back: it is
///   told (``procedureDidCancel(with:)``, did-cancel observers) and finishes itself — unless
///   ``finishesWhenCancelled`` is set. A procedure cancelled before it executes never executes.
/// - A cancelled dependency still counts as finished, as in Foundation; add
///   ``NoFailedDependencies`` or ``NoCancelledDependencies`` to opt out.
/// - Conditions and observers are only evaluated and told on a queue; `start()` by hand refuses a
///   procedure with conditions (``OperationError/Code-swift.struct/requiresQueue``).
open class ProcedureOperation: ConcurrentOperation, @unchecked Sendable {
    // All the fields below are protected by `machine.lock`.
    var procedureLifecycle = ProcedureLifecycle()
    var _errors: [any Error] = []
    var _diagnostics: [String] = []
    var _finishesWhenCancelled = false
    var conditions: [any OperationCondition] = []
    var observers: [any OperationObserver] = []
    /// Whether the queue has asked for the conditions' dependencies (they are made once).
    var conditionDependenciesMade = false
    /// The operations the conditions produced, cancelled with the procedure.
    var producedDependencies: [ConcurrentOperation] = []
    var holdsExclusivity = false
    var didExecuteEmitted = false
    /// Events waiting to be delivered, and whether (and on which thread) they are being delivered.
    var pendingEvents: [PendingEvent] = []
    var deliveringEvents = false
    var deliveringThread: ThreadIdentity?

    /// Creates a procedure. Subclasses override ``execute()``.
    /// - Parameter name: A name for logs and errors.
    public override init(name: String? = nil) {
        super.init(name: name)
    }

    // MARK: Hooks of the queue (see ConcurrentOperation)

    override func didClaim() {
        _ = procedureLifecycle.enqueue()
    }

    override func didUnclaim() {
        procedureLifecycle = ProcedureLifecycle()
    }

    override func operationsToEnqueueFirst(in queue: ConcurrentOperationQueue) -> [ConcurrentOperation] {
        conditionDependenciesToEnqueue()
    }

    override func prepareToRun(on queue: ConcurrentOperationQueue) -> Bool {
        prepareConditions(queue: queue)
    }

    // MARK: State

    /// Where the procedure is in its lifecycle.
    public var state: ProcedureState {
        machine.lock.withLock {
            let state = procedureLifecycle.state
            return state == .initialized && queueReference != nil ? .pending : state
        }
    }

    /// The errors the procedure collected: from ``finish(with:)``, ``cancel(with:)`` and failed
    /// conditions, in that order of arrival. Complete once it has finished.
    public var errors: [any Error] { machine.lock.withLock { _errors } }

    /// Whether the procedure collected any error.
    public var isFailed: Bool { machine.lock.withLock { !_errors.isEmpty } }

    /// Notes about calls that changed nothing, such as a second `finish`, for debugging.
    public var diagnostics: [String] { machine.lock.withLock { _diagnostics } }

    /// Whether ``cancel()`` while executing finishes the procedure at once (PSOperations'
    /// behaviour) instead of only telling it. `false` by default.
    public var finishesWhenCancelled: Bool {
        get { machine.lock.withLock { _finishesWhenCancelled } }
        set { machine.lock.withLock { _finishesWhenCancelled = newValue } }
    }

    // MARK: For subclasses

    /// Called on the worker just before ``execute()``, before the will-execute observers.
    open func procedureWillExecute() {}
    /// Called when ``execute()`` returned (or the procedure finished first), before the
    /// did-execute observers.
    open func procedureDidExecute() {}
    /// Called when the procedure is cancelled, before the did-cancel observers. An executing
    /// procedure should stop its work and finish.
    open func procedureDidCancel(with error: (any Error)?) {}
    /// Called when the procedure is finishing, before the will-finish observers.
    open func procedureWillFinish(with errors: [any Error]) {}
    /// Called when the procedure has finished, before the did-finish observers.
    open func procedureDidFinish(with errors: [any Error]) {}

    // MARK: Finishing

    /// Finishes the procedure without an error. See ``finish(withErrors:)``.
    @discardableResult
    public override func finish() -> Bool {
        finishCollecting([], then: nil)
    }

    /// Finishes the procedure, with `error` if it is not `nil`. See ``finish(withErrors:)``.
    @discardableResult
    public func finish(with error: (any Error)?) -> Bool {
        finishCollecting(error.map { [$0] } ?? [], then: nil)
    }

    /// Finishes the procedure with `errors`: it moves to finishing (will-finish observers), then
    /// finished (completion block, dependents released, did-finish observers), on the calling
    /// thread. Only the first finish counts.
    ///
    /// - Returns: `true` if this call finished the procedure; `false` if it was not executing or
    ///   had already finished (the call is then recorded in ``diagnostics``).
    @discardableResult
    public func finish(withErrors errors: [any Error]) -> Bool {
        finishCollecting(errors, then: nil)
    }

    /// The first finish: records `errors` and runs `record` (under the lock, so that a typed
    /// result is set in the same step), then finishes.
    func finishCollecting(_ errors: [any Error], then record: (() -> Void)?) -> Bool {
        let action = machine.lock.withLock { () -> ProcedureLifecycle.FinishAction in
            let action = procedureLifecycle.finish()
            switch action {
            case .finish:
                _errors.append(contentsOf: errors)
                record?()
            case .ignoreAlreadyFinishing:
                _diagnostics.append("finish ignored: already \(procedureLifecycle.state) (errors given: \(errors.count))")
            case .refuseNotStarted:
                _diagnostics.append("finish ignored: not executing, state \(procedureLifecycle.state)")
            }
            return action
        }
        guard action == .finish else { return false }
        completeFinish(executed: true)
        return true
    }

    /// Finishing, from the state `finishing`: events, the base operation's finish, the release of
    /// mutual exclusivity.
    private func completeFinish(executed: Bool) {
        if executed { emitDidExecuteOnce() }
        let (errors, queue) = machine.lock.withLock { (_errors, self.queue) }
        queue?.notifyDelegate(willFinish: self)
        emit(.willFinish(errors), waitForDelivery: true)
        machine.lock.withLock { procedureLifecycle.finished() }
        finishAfterStart()
        didComplete(errors: errors)
    }

    override func finishWithoutExecuting() {
        let (action, errors, queue) = machine.lock.withLock {
            (procedureLifecycle.start(), _errors, self.queue)
        }
        precondition(action == .finishWithoutExecuting, "Internal inconsistency: \(action) for a cancelled procedure")
        queue?.notifyDelegate(willFinish: self)
        emit(.willFinish(errors), waitForDelivery: true)
        machine.lock.withLock { procedureLifecycle.finished() }
        super.finishWithoutExecuting()
        didComplete(errors: errors)
    }

    private func didComplete(errors: [any Error]) {
        let (exclusive, released) = machine.lock.withLock { () -> (Bool, [any OperationCondition]) in
            defer {
                holdsExclusivity = false
                conditions = []
                producedDependencies = []
            }
            return (holdsExclusivity, conditions)
        }
        if exclusive { ExclusivityController.release(ObjectIdentifier(self)) }
        emit(.didFinish(errors))
        withExtendedLifetime(released) {}  // conditions are released without the lock
    }

    // MARK: Executing

    override func performExecute() {
        switch machine.lock.withLock({ procedureLifecycle.start() }) {
        case .execute:
            emit(.willExecute, waitForDelivery: true)
            execute()
            emitDidExecuteOnce()
        case .finishWithoutExecuting:
            // Cancelled between the queue's start and this point: finish without executing.
            completeFinish(executed: false)
        case .refuse:
            break
        }
    }

    func emitDidExecuteOnce() {
        let first = machine.lock.withLock {
            defer { didExecuteEmitted = true }
            return !didExecuteEmitted
        }
        if first { emit(.didExecute) }
    }

    override func refusalOfManualStart() -> OperationError? {
        machine.lock.withLock { conditions.isEmpty }
            ? nil
            : OperationError(.requiresQueue, operations: [displayName], "only a queue evaluates conditions")
    }

    /// Adds `operation` to this procedure's queue and tells the observers (did produce). Call it
    /// while the procedure executes.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/notExecuting`` if the procedure is not
    ///   executing on a queue; or what the queue's `addOperation` throws.
    public func produce(_ operation: ConcurrentOperation) throws(OperationError) {
        let (state, queue) = machine.lock.withLock { (procedureLifecycle.state, self.queue) }
        guard state == .executing, let queue else {
            throw OperationError(
                .notExecuting, operations: [displayName, operation.displayName],
                "produce() needs a procedure executing on a queue (state \(state))")
        }
        try queue.addOperation(operation)
        emit(.didProduce(operation))
    }

    // MARK: Cancelling

    /// Cancels the procedure without an error. See ``cancel(with:)``.
    public final override func cancel() {
        cancel(with: nil)
    }

    /// Cancels the procedure, recording `error` if it is not `nil`. Before it executes, it will
    /// not execute (the dependencies its conditions produced are cancelled too); while its
    /// conditions are being evaluated, it stops waiting for them; while it executes, it is told
    /// and finishes itself (or at once, with ``finishesWhenCancelled``). Cancelling a cancelled,
    /// finishing or finished procedure changes nothing.
    public func cancel(with error: (any Error)?) {
        typealias Taken = (ProcedureLifecycle.CancelAction, ConcurrentOperationQueue?, [ConcurrentOperation], Bool, Bool)
        let (action, queue, produced, finishes, deliver) = machine.lock.withLock { () -> Taken in
            let action = procedureLifecycle.cancel()
            guard action != .none else { return (action, nil, [], false, false) }
            if let error { _errors.append(error) }
            // Queued in the same step as the state change, so no later event overtakes it.
            let deliver = enqueueEventLocked(.didCancel(error), waitForDelivery: false).mustDeliver
            return (action, self.queue, producedDependencies, _finishesWhenCancelled, deliver)
        }
        guard action != .none else { return }
        super.cancel()
        if deliver { deliverEvents() }
        switch action {
        case .abandonEvaluation:
            queue?.requeue(self)
        case .cancelledBeforeExecuting:
            for dependency in produced where !dependency.isFinished { dependency.cancel() }
            if ExclusivityController.withdraw(ObjectIdentifier(self)) { queue?.requeue(self) }
        case .cancelledWhileExecuting:
            if finishes { finish() }
        case .none:
            break
        }
    }
}
