// ComposedProcedure: wraps any ConcurrentOperation (a ClosureOperation, a Foundation-style
// subclass) in a group, so that it gets conditions, observers and errors.

/// A procedure that runs one operation of any kind — a ``ClosureOperation``, a
/// ``ConcurrentOperation`` subclass you cannot change — so that it gets what procedures have:
/// conditions, observers, ``MutuallyExclusive`` categories, errors, timeouts.
///
/// ```swift
/// let legacy = ClosureOperation(name: "legacy export") { log("exported") }
/// let export = try ComposedProcedure(name: "export", legacy)
/// try export.addCondition(NoFailedDependencies())
/// try export.addObserver(TimeoutObserver(timeout: .seconds(30)))
/// try queue.addOperation(export)
/// ```
///
/// It is a ``GroupOperation`` with ``operation`` as its only child, and behaves as one:
///
/// - The operation runs on the group's queue once the procedure executes; the procedure finishes
///   when it — and whatever it produced — has finished.
/// - A condition that fails, or a cancel before the procedure executes, cancels the operation: it
///   never runs its work (it finishes without executing), and the procedure finishes after it.
/// - Cancelling the procedure while it executes cancels the operation, which finishes as its
///   class does when cancelled.
/// - The procedure's errors: the error of its own ``ProcedureOperation/cancel(with:)``, if any,
///   then those of the operation if it is a ``ProcedureOperation`` (a plain operation has none).
open class ComposedProcedure<Wrapped: ConcurrentOperation>: GroupOperation, @unchecked Sendable {
    /// The wrapped operation.
    public let operation: Wrapped

    /// Wraps `operation`.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default `Composed(` the operation's name `)`.
    ///   - operation: The operation to run: in no queue, not started, not finished.
    /// - Throws: What ``GroupOperation/init(name:operations:)`` throws for it
    ///   (``OperationError/Code-swift.struct/alreadyEnqueued``,
    ///   ``OperationError/Code-swift.struct/alreadyStarted``…).
    public init(name: String? = nil, _ operation: Wrapped) throws(OperationError) {
        self.operation = operation
        try super.init(name: name ?? "Composed(\(operation.displayName))", operations: [operation])
    }
}
