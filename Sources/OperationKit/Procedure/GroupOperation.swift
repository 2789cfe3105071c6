/// A procedure that runs child operations on a queue of its own and finishes when they — and
/// every operation they produced — have finished, with the errors of the child procedures.
///
/// ```swift
/// let sync = try GroupOperation(name: "sync", operations: [fetchContacts, fetchCalendars])
/// try sync.setMaxConcurrentOperationCount(1)
/// try queue.addOperation(sync)
/// ```
///
/// - The children wait until the group executes (the group's queue is suspended until then).
///   Children may depend on each other, and on operations outside the group.
/// - Operations the children produce (``ProcedureOperation/produce(_:)``), and the dependencies
///   their conditions produce, go to the group's queue, so the group waits for them too.
/// - The group's ``ProcedureOperation/errors`` are the error of a ``ProcedureOperation/cancel(with:)``
///   of the group, if any, then — if it executed — the errors of its child procedures, in the
///   order the children finished, as ``transformChildErrors`` and
///   ``child(_:didFinishWithErrors:)`` let them through. A child cancelled without an error adds
///   none.
/// - Cancelling the group cancels every child, and every child added later — also what a child
///   produces later, or while the group is being cancelled: it never runs. Cancelled while it
///   executes, it finishes once its children have. Cancelled before it executes, it lets its
///   cancelled children finish (their completion blocks run) and then finishes without
///   executing — unless it ``isSuspended``: then its children, and so the group, wait until it is
///   resumed.
/// - A group that holds a ``MutuallyExclusive`` category shares it with its descendants (its
///   children, what they produce, the children of nested groups): they may take it while the
///   group holds it, and still exclude each other.
/// - Once its ``execute()`` has returned, a group that only waits for its children holds no
///   concurrency slot of its queue: the queue runs other operations meanwhile (a serial queue
///   too); the children are limited by the group's own ``maxConcurrentOperationCount``.
///
/// Subclasses that override ``execute()``, ``procedureDidCancel(with:)`` or
/// ``procedureWillFinish(with:)`` must call `super`.
open class GroupOperation: ProcedureOperation, @unchecked Sendable {
    /// The queue the children run on.
    let childQueue: ConcurrentOperationQueue
    /// Guards adding children against the group closing (`closed`), so that no child is added
    /// after the group decided to finish. Recursive: adding a child may run a condition's
    /// `dependency(for:)`, which may add another.
    private let childLock = RecursiveLock()
    // protected by childLock
    private var closed = false
    // protected by childLock
    private var started = false
    // protected by childLock
    private var userSuspended = false
    // protected by childLock
    private var childErrors: [any Error] = []
    // protected by childLock: the group was cancelled, so new children are cancelled as they come
    private var cancelled = false
    // protected by childLock: `addChild` calls adding a child now
    private var activeAdds = 0
    // protected by childLock: `procedureDidCancel` calls cancelling the children now
    private var cancelsRunning = 0
    // protected by childLock: a check for "all children finished" that waits for those adds
    private var recheckAfterAdds: (@Sendable () -> Void)?
    // protected by childLock: see `transformChildErrors`
    private var childErrorTransform: (@Sendable (ConcurrentOperation, [any Error]) -> [any Error])?

    /// Creates a group with `operations` as its first children.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; the group's queue is named after it.
    ///   - operations: The first children; more can be added with ``addChild(_:)``.
    /// - Throws: what the group queue's
    ///   ``ConcurrentOperationQueue/addOperations(_:waitUntilFinished:)`` throws for the batch (an
    ///   operation in a queue, started or finished, listed twice, or closing a dependency cycle).
    ///   The group takes all the operations or none.
    public init(name: String? = nil, operations: [ConcurrentOperation] = []) throws(OperationError) {
        childQueue = ConcurrentOperationQueue(name: "\(name ?? "GroupOperation").children")
        childQueue.isSuspended = true
        super.init(name: name)
        childQueue.owningProcedure = self
        childQueue.eventHandlers = QueueEventHandlers(didFinish: { [weak self] child in
            self?.childDidFinish(child)
        })
        if !operations.isEmpty { try childQueue.addOperations(operations, waitUntilFinished: false) }
    }

    /// The children's queue takes the instrument of the queue the group was added to; the
    /// children it holds are told as added then, unless the group was cancelled (see
    /// `ConcurrentOperationQueue.adoptInstrument(_:tellHeld:)`).
    override func adoptInstrument(_ instrument: any OperationInstrument) {
        childQueue.adoptInstrument(instrument, tellHeld: !isCancelled)
    }

    /// The children's queue takes the executor and clock of the queue the group was added to.
    override func adoptQueueSettings(of queue: ConcurrentOperationQueue) {
        childQueue.adoptSettings(of: queue)
    }

    /// The children the group's queue still holds, in the order they were added: those that have
    /// not finished, including operations the children produced (see
    /// ``ConcurrentOperationQueue/operations``).
    public var children: [ConcurrentOperation] { childQueue.operations }

    /// The most children that execute at once (the group queue's limit; 64 by default).
    public var maxConcurrentOperationCount: Int { childQueue.maxConcurrentOperationCount }

    /// Sets ``maxConcurrentOperationCount``; 1 runs the children one at a time.
    ///
    /// - Parameter count: The new limit, at least 1.
    /// - Throws: ``OperationError/Code-swift.struct/invalidMaxConcurrentOperationCount`` below 1;
    ///   the limit is then unchanged.
    public func setMaxConcurrentOperationCount(_ count: Int) throws(OperationError) {
        try childQueue.setMaxConcurrentOperationCount(count)
    }

    /// Whether the group holds back children that have not started, like a suspended queue;
    /// executing children carry on. `false` by default. While the group has not executed its
    /// children are held back anyway; a suspended group keeps holding them back once it executes,
    /// and does not finish until it is resumed and they have finished (cancelled or not).
    public var isSuspended: Bool {
        get { childLock.withLock { userSuspended } }
        set {
            childLock.withLock {
                userSuspended = newValue
                applySuspensionLocked()
            }
        }
    }

    /// Under `childLock`: suspends or resumes the group's queue from the group's state now (never
    /// from a snapshot, so that a cancel and a suspend or resume compose in any order). Held back
    /// while the group has not executed, while the group suspends it, while a cancel is cancelling
    /// the children, and while a cancelled group still has children being added (they are
    /// cancelled before they can start).
    private func applySuspensionLocked() {
        childQueue.isSuspended = userSuspended || !started || cancelsRunning > 0 || (cancelled && activeAdds > 0)
    }

    /// Adds a child. It runs on the group's queue once the group executes (at once, if it is
    /// executing). Call it from any thread, including a child's work; the group then waits for
    /// the new child too. A child added to a cancelled group — also one added while the group is
    /// being cancelled — is cancelled, and so never runs: it finishes without executing.
    ///
    /// No lock is held while the child is cancelled or added; its did-cancel hook and observers,
    /// and its conditions' ``OperationCondition/dependency(for:)``, may add children to the group.
    ///
    /// - Parameter operation: The child, in no queue.
    /// - Throws: ``OperationError/Code-swift.struct/alreadyFinished`` if the group has finished or
    ///   is finishing; or what the group queue's `addOperation` throws (the operation is in a
    ///   queue, has started or has finished, or closes a dependency cycle).
    public func addChild(_ operation: ConcurrentOperation) throws(OperationError) {
        try addChildren([operation])
    }

    /// Adds a child before `event` of the group (see ``PendingProcedureEvent``): with `.execute`,
    /// while the group has not executed yet (or from its will-execute hook or observer), its start
    /// waiting for the add; with `.finish`, as ``addChild(_:)`` — the group waits for its children,
    /// so the child is added, and finishes, before the group finishes. Otherwise as ``addChild(_:)``.
    ///
    /// - Parameters:
    ///   - operation: The child, in no queue.
    ///   - event: The event of the group the add must come before, or `nil`.
    /// - Throws: ``OperationError/Code-swift.struct/eventAlreadyPast`` if the group is past `event`;
    ///   otherwise as ``addChild(_:)``.
    public func addChild(_ operation: ConcurrentOperation, before event: PendingProcedureEvent?) throws(OperationError) {
        try addChildren([operation], before: event)
    }

    /// Adds children in one step before `event` of the group: as ``addChild(_:before:)``, all or
    /// none (see ``addChildren(_:)``).
    ///
    /// - Parameters:
    ///   - operations: The children, in no queue.
    ///   - event: The event of the group the adds must come before, or `nil`.
    /// - Throws: as ``addChild(_:before:)``, for the first operation refused; nothing was added then.
    public func addChildren(_ operations: [ConcurrentOperation], before event: PendingProcedureEvent?) throws(OperationError) {
        guard event == .execute else {
            do {
                try addChildren(operations)
            } catch where error.code == .alreadyFinished && event != nil {
                throw OperationError(.eventAlreadyPast, operations: error.operationNames,
                                     "addChild(_:before: .finish) on a group that is finishing or has finished")
            }
            return
        }
        // Counted like a produce before execute: the group's start waits for the add.
        let accepted = lock.withLock { () -> Bool in
            guard acceptsAddLocked(before: .execute, inQueue: false) else { return false }
            produceProgress.begin()
            return true
        }
        guard accepted else {
            throw OperationError(.eventAlreadyPast, operations: [displayName] + operations.map(\.displayName),
                                 "addChild(_:before: .execute) on a group that has executed (state \(state))")
        }
        defer { _ = lock.withLock { endAddLocked() } }
        try addChildren(operations)
    }

    /// Adds children in one step, all or none: if the group's queue refuses one of them (see
    /// ``ConcurrentOperationQueue/addOperations(_:waitUntilFinished:)``), none is added and its
    /// error is thrown. Otherwise as ``addChild(_:)``.
    ///
    /// - Parameter operations: The children, in no queue.
    /// - Throws: as ``addChild(_:)``, for the first operation refused; nothing was added then
    ///   (to a cancelled group the operations are cancelled first, so they stay cancelled).
    public func addChildren(_ operations: [ConcurrentOperation]) throws(OperationError) {
        // `activeAdds` keeps the group from closing meanwhile, and, once it is cancelled, its
        // queue suspended until the children being added have been cancelled.
        let cancelIt = childLock.withLock { () -> Bool? in
            if closed { return nil }
            activeAdds += 1
            return cancelled
        }
        guard let cancelIt else {
            throw OperationError(.alreadyFinished, operations: [displayName] + operations.map(\.displayName),
                                 "the group has finished; it takes no more children")
        }
        // A child of a cancelled group is cancelled: it finishes without running.
        if cancelIt { for operation in operations { operation.cancel() } }
        for operation in operations { emitAddEvent(.willAdd(operation), waitForDelivery: true) }
        var failure: OperationError?
        do {
            if !operations.isEmpty { try childQueue.addOperations(operations, waitUntilFinished: false) }
        } catch {
            failure = error
        }
        if failure == nil { for operation in operations { emitAddEvent(.didAdd(operation), waitForDelivery: false) } }
        endAdd(operations, added: failure == nil, cancelledFirst: cancelIt)
        if let failure { throw failure }
    }

    /// Ends an add counted in `activeAdds`. A cancel of the group that ran during the add may
    /// have missed the operations (they were not in its queue yet); the queue stays suspended
    /// (`applySuspensionLocked`) until they are cancelled here.
    private func endAdd(_ operations: [ConcurrentOperation], added: Bool, cancelledFirst: Bool) {
        if added && !cancelledFirst && childLock.withLock({ cancelled }) {
            for operation in operations { operation.cancel() }
        }
        let recheck = childLock.withLock { () -> (@Sendable () -> Void)? in
            activeAdds -= 1
            applySuspensionLocked()
            guard activeAdds == 0, let recheck = recheckAfterAdds else { return nil }
            recheckAfterAdds = nil
            return recheck
        }
        recheck?()
    }

    /// A child produces an operation into the group's queue: counted as an add of a child
    /// (`activeAdds`), so that a cancel of the group cancels it too. Returns whether the group is
    /// cancelled already (the operation is then cancelled before it is added).
    override func producedIntoOwnQueueBegins() -> Bool {
        childLock.withLock {
            activeAdds += 1
            return cancelled
        }
    }

    /// The produce counted by `producedIntoOwnQueueBegins()` ended.
    override func producedIntoOwnQueueEnded(_ operation: ConcurrentOperation, added: Bool, cancelledFirst: Bool) {
        endAdd([operation], added: added, cancelledFirst: cancelledFirst)
    }

    /// The errors of the child procedures that have finished so far, in the order they finished.
    public var childErrorsSoFar: [any Error] { childLock.withLock { childErrors } }

    /// A closure that sees each child's errors before the group collects them, and returns the
    /// errors the group collects instead (`[]`: none). For groups not subclassed; a subclass
    /// overrides ``child(_:didFinishWithErrors:)``, which is called after this closure with what
    /// it returned. `nil` by default (the errors are collected as they are).
    ///
    /// Called once per child — every operation the group's queue runs: children added, operations
    /// they produced, cancelled children, nested groups (with their own collected errors) — with
    /// no lock held, on the thread that finished the child, after the child has finished and
    /// before the group counts it as gone: the group does not finish before it returns. A child
    /// that is not a ``ProcedureOperation`` has no errors (`[]`). Set it before the children
    /// finish: a child finishing while it is set sees the old or the new one.
    public var transformChildErrors: (@Sendable (ConcurrentOperation, [any Error]) -> [any Error])? {
        get { childLock.withLock { childErrorTransform } }
        set { childLock.withLock { childErrorTransform = newValue } }
    }

    /// Decides which of a child's errors the group collects (ProcedureKit's
    /// `child(_:willFinishWithError:)`); by default all of them. Override it to inspect, replace
    /// or ignore (return `[]`) a child's errors; called as ``transformChildErrors`` (once per
    /// child, no lock held, on the thread that finished the child, before the group collects and
    /// before it may finish), with the errors that closure returned. No need to call `super`.
    ///
    /// - Parameters:
    ///   - child: The child, finished.
    ///   - errors: Its errors (after ``transformChildErrors``), `[]` for a plain operation.
    /// - Returns: The errors the group collects for this child, in its ``ProcedureOperation/errors``.
    open func child(_ child: ConcurrentOperation, didFinishWithErrors errors: [any Error]) -> [any Error] {
        errors
    }

    private func childDidFinish(_ child: ConcurrentOperation) {
        var errors = (child as? ProcedureOperation)?.errors ?? []
        if let transform = childLock.withLock({ childErrorTransform }) { errors = transform(child, errors) }
        errors = self.child(child, didFinishWithErrors: errors)
        if !errors.isEmpty { childLock.withLock { childErrors.append(contentsOf: errors) } }
    }

    /// Lets the children run (unless the group ``isSuspended``) and finishes the group once its
    /// queue is empty, with the children's errors. Overrides must call `super.execute()`.
    open override func execute() {
        childLock.withLock {
            started = true
            applySuspensionLocked()
        }
        whenChildrenFinish { [self] in
            finish(withErrors: childLock.withLock { childErrors })
        }
    }

    /// Calls `then` once the group's queue is empty and no child is being added, closing the group
    /// to new children in the same step.
    private func whenChildrenFinish(_ then: @escaping @Sendable () -> Void) {
        childQueue.notifyWhenEmpty { [self] in
            enum Decision { case close, waitForChildren, waitForAdds }
            let decision = childLock.withLock { () -> Decision in
                if activeAdds > 0 {
                    recheckAfterAdds = { self.whenChildrenFinish(then) }
                    return .waitForAdds
                }
                // A child added meanwhile: wait for it too.
                guard childQueue.operationCount == 0 else { return .waitForChildren }
                closed = true
                return .close
            }
            switch decision {
            case .close: then()
            case .waitForChildren: whenChildrenFinish(then)
            case .waitForAdds: break
            }
        }
    }

    /// Cancels every child (and makes children added later cancelled). Overrides must call
    /// `super`.
    ///
    /// - Parameter error: The error the group was cancelled with, or `nil`.
    open override func procedureDidCancel(with error: (any Error)?) {
        // Held back while the children are cancelled: otherwise a cancelled child that finishes
        // at once frees a slot, and a child not cancelled yet may start (and finish) meanwhile.
        childLock.withLock {
            cancelled = true
            // Not started: the cancelled children finish (their completion blocks run); the
            // group finishes without executing once they have (see `finishWithoutExecuting`).
            started = true
            cancelsRunning += 1
            applySuspensionLocked()
        }
        childQueue.cancelAllOperations()
        // The suspension the group has now: a child's did-cancel observer may have suspended or
        // resumed the group meanwhile.
        childLock.withLock {
            cancelsRunning -= 1
            applySuspensionLocked()
        }
    }

    /// A group whose `execute()` has returned only waits for its children: it gives its slot back.
    override var waitsWithoutSlot: Bool { true }

    /// Stops the group from taking more children. Overrides must call `super`.
    ///
    /// - Parameter errors: The group's errors.
    open override func procedureWillFinish(with errors: [any Error]) {
        childLock.withLock { closed = true }
        closeChildrenProgress()
    }

    /// A group cancelled before it executed finishes without executing — after its cancelled
    /// children have finished, so that it never finishes before a child.
    override func finishWithoutExecuting() {
        whenChildrenFinish { [self] in finishWithoutExecutingAsProcedure() }
    }

    /// Cancelled between its queue's start and its execution: also after the children.
    override func finishCancelledAtStart() {
        whenChildrenFinish { [self] in finishCancelledAtStartAsProcedure() }
    }

    private func finishWithoutExecutingAsProcedure() {
        super.finishWithoutExecuting()
    }

    private func finishCancelledAtStartAsProcedure() {
        super.finishCancelledAtStart()
    }
}

extension ProcedureOperation {
    /// The procedures this procedure runs under, innermost first: the group (or retry) whose
    /// child queue it is in, that group's own group, and so on.
    var exclusivityAncestors: [ObjectIdentifier] {
        var ancestors: [ObjectIdentifier] = []
        var queue = queueWhilePending
        while let owner = queue?.owningProcedure {
            ancestors.append(ObjectIdentifier(owner))
            queue = owner.queueWhilePending
        }
        return ancestors
    }
}
