// WrappedProcedureRun: how AnyProcedure and IgnoreErrorsProcedure run the one procedure they
// wrap, on a queue of their own, and learn that it (and all it produced) has finished.

/// The procedure a wrapper (``AnyProcedure``, ``IgnoreErrorsProcedure``) runs, and the queue of
/// the wrapper's own it runs on: like a group's child, it is a descendant of the wrapper (it may
/// take the wrapper's ``MutuallyExclusive`` categories), what it produces goes to that queue, and
/// it may depend on operations outside.
struct WrappedProcedureRun: Sendable {
    let wrapped: ProcedureOperation
    let queue: ConcurrentOperationQueue

    init(_ wrapped: ProcedureOperation, wrapperName: String) {
        self.wrapped = wrapped
        queue = ConcurrentOperationQueue(name: "\(wrapperName).wrapped")
    }

    /// Makes `owner` the procedure the queue runs under. Called once, from the owner's `init`.
    func attach(to owner: ProcedureOperation) {
        queue.owningProcedure = owner
    }

    /// Adds the wrapped procedure to the queue and calls `then` once the queue is empty again:
    /// the procedure, and every operation it produced, has finished. Called once per wrapper:
    /// from its `execute()`, or as it finishes without executing (the procedure is cancelled
    /// then, so it finishes without executing too).
    ///
    /// - Parameter then: Called once, without any lock held.
    /// - Throws: What ``ConcurrentOperationQueue/addOperation(_:)`` throws (the procedure is in
    ///   a queue, has started or has finished); `then` is not called then.
    func start(then: @escaping @Sendable () -> Void) throws(OperationError) {
        try queue.addOperation(wrapped)
        queue.notifyWhenEmpty(then)
    }
}
