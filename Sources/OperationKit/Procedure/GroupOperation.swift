/// A procedure that runs child operations on a queue of its own and finishes when they — and
/// every operation they produced — have finished, with the errors of the child procedures.
///
/// ```swift
/// let sync = GroupOperation(name: "sync", operations: [fetchContacts, fetchCalendars])
/// try sync.setMaxConcurrentOperationCount(1)
/// try queue.addOperation(sync)
/// ```
///
/// The children wait until the group executes (the group's queue is suspended until then).
/// Cancelling the group cancels every child; a group cancelled before it executes lets its
/// cancelled children finish (their completion blocks run) and finishes without executing.
open class GroupOperation: ProcedureOperation, @unchecked Sendable {
    /// The queue the children run on.
    let childQueue: ConcurrentOperationQueue
    /// Guards adding children against the group closing (`closed`), so that no child is added
    /// after the group decided to finish. Recursive: adding a child may run a condition's
    /// `dependency(for:)`, which may add another.
    private let childLock = Lock(recursive: true)
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

    /// Creates a group with `operations` as its first children.
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - operations: The first children; more can be added with ``addChild(_:)``.
    public init(name: String? = nil, operations: [ConcurrentOperation] = []) {
        childQueue = ConcurrentOperationQueue(name: "\(name ?? "GroupOperation").children")
        childQueue.isSuspended = true
        super.init(name: name)
        childQueue.eventHandlers = QueueEventHandlers(didFinish: { [weak self] child in
            self?.childDidFinish(child)
        })
        for operation in operations { try? addChild(operation) }
    }

    /// The children that have not finished yet (the group's queue's operations).
    public var children: [ConcurrentOperation] { childQueue.operations }

    /// The most children that run at once (the group queue's limit).
    public var maxConcurrentOperationCount: Int { childQueue.maxConcurrentOperationCount }

    /// Sets ``maxConcurrentOperationCount``.
    /// - Throws: ``OperationError/Code-swift.struct/invalidMaxConcurrentOperationCount`` below 1.
    public func setMaxConcurrentOperationCount(_ count: Int) throws(OperationError) {
        try childQueue.setMaxConcurrentOperationCount(count)
    }

    /// Whether the group holds back children that have not started (like a suspended queue).
    public var isSuspended: Bool {
        get { childLock.withLock { userSuspended } }
        set {
            childLock.withLock {
                userSuspended = newValue
                childQueue.isSuspended = newValue || !started
            }
        }
    }

    /// Adds a child. It runs on the group's queue once the group executes.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/alreadyFinished`` if the group has finished or
    ///   is finishing; or what the group queue's `addOperation` throws.
    public func addChild(_ operation: ConcurrentOperation) throws(OperationError) {
        childLock.lock()
        defer { childLock.unlock() }
        if closed {
            throw OperationError(.alreadyFinished, operations: [displayName, operation.displayName],
                                 "the group has finished; it takes no more children")
        }
        // A child of a cancelled group is cancelled: it finishes without running.
        if cancelled { operation.cancel() }
        try childQueue.addOperation(operation)
    }

    /// Adds several children. See ``addChild(_:)``.
    public func addChildren(_ operations: [ConcurrentOperation]) throws(OperationError) {
        for operation in operations { try addChild(operation) }
    }

    /// The errors of the child procedures that have finished so far.
    public var childErrorsSoFar: [any Error] { childLock.withLock { childErrors } }

    private func childDidFinish(_ child: ConcurrentOperation) {
        guard let procedure = child as? ProcedureOperation else { return }
        let errors = procedure.errors
        if !errors.isEmpty { childLock.withLock { childErrors.append(contentsOf: errors) } }
    }

    open override func execute() {
        childLock.withLock {
            started = true
            childQueue.isSuspended = userSuspended
        }
        finishWhenChildrenFinish()
    }

    private func finishWhenChildrenFinish() {
        childQueue.notifyWhenEmpty { [self] in
            let errors = childLock.withLock { () -> [any Error]? in
                // A child added meanwhile: wait for it too.
                guard childQueue.operationCount == 0 else { return nil }
                closed = true
                return childErrors
            }
            guard let errors else { return finishWhenChildrenFinish() }
            finish(withErrors: errors)
        }
    }

    open override func procedureDidCancel(with error: (any Error)?) {
        childLock.withLock {
            cancelled = true
            // Not started: let the cancelled children finish (their completion blocks run); the
            // group finishes without executing once they have (see `finishWithoutExecuting`).
            if !started {
                started = true
                childQueue.isSuspended = userSuspended
            }
        }
        childQueue.cancelAllOperations()
    }

    open override func procedureWillFinish(with errors: [any Error]) {
        childLock.withLock { closed = true }
    }

    /// A group cancelled before it executed finishes without executing — after its cancelled
    /// children have finished, so that it never finishes before a child.
    override func finishWithoutExecuting() {
        childQueue.notifyWhenEmpty { [self] in
            let empty = childLock.withLock { () -> Bool in
                guard childQueue.operationCount == 0 else { return false }
                closed = true
                return true
            }
            if empty { finishWithoutExecutingAsProcedure() } else { finishWithoutExecuting() }
        }
    }

    private func finishWithoutExecutingAsProcedure() {
        super.finishWithoutExecuting()
    }
}
