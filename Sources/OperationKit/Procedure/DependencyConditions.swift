// The built-in conditions on a procedure's dependencies: NoFailedDependencies and
// NoCancelledDependencies.

/// Fails if any dependency finished with errors (``OperationError/Code-swift.struct/dependenciesFailed``,
/// whose ``OperationError/underlyingErrors`` are theirs) or was cancelled
/// (``OperationError/Code-swift.struct/dependenciesCancelled``).
///
/// A dependency has failed when it is a ``ProcedureOperation`` whose
/// ``ProcedureOperation/errors`` is not empty (a ``GroupOperation`` with a failed child, a
/// procedure cancelled with an error). A dependency cancelled without errors does not count as
/// failed, and a plain ``ConcurrentOperation`` can only be cancelled. With
/// `ignoringCancellations`, a cancelled dependency makes the procedure cancel without an error
/// (ignored) instead — unless another dependency failed.
///
/// ```swift
/// try save.addDependency(download)
/// try save.addCondition(NoFailedDependencies())
/// ```
public struct NoFailedDependencies: OperationCondition {
    /// Whether a cancelled dependency cancels the procedure without an error (`true`) or fails it
    /// with ``OperationError/Code-swift.struct/dependenciesCancelled`` (`false`).
    public let ignoringCancellations: Bool

    /// Creates the condition.
    ///
    /// - Parameter ignoringCancellations: Whether a cancelled dependency cancels the procedure
    ///   without an error instead of failing it; `false` by default.
    public init(ignoringCancellations: Bool = false) {
        self.ignoringCancellations = ignoringCancellations
    }

    /// Looks at the procedure's dependencies, all finished by now.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called at once with the answer.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        let dependencies = procedure.dependencies
        let failed = dependencies.compactMap { $0 as? ProcedureOperation }.filter { !$0.errors.isEmpty }
        let cancelled = dependencies.filter { $0.isCancelled }
        if !failed.isEmpty {
            completion(.failed(OperationError(
                .dependenciesFailed, operations: [procedure.displayName] + failed.map(\.displayName),
                "dependencies failed", underlying: failed.flatMap(\.errors))))
        } else if !cancelled.isEmpty {
            completion(ignoringCancellations ? .ignored : .failed(OperationError(
                .dependenciesCancelled, operations: [procedure.displayName] + cancelled.map(\.displayName),
                "dependencies cancelled")))
        } else {
            completion(.satisfied)
        }
    }
}

/// Fails with ``OperationError/Code-swift.struct/dependenciesCancelled`` if any dependency was
/// cancelled. A dependency that failed without being cancelled does not count.
public struct NoCancelledDependencies: OperationCondition {
    /// Creates the condition.
    public init() {}

    /// Looks at the procedure's dependencies, all finished by now.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called at once with the answer.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        let cancelled = procedure.dependencies.filter { $0.isCancelled }
        if cancelled.isEmpty {
            completion(.satisfied)
        } else {
            completion(.failed(OperationError(
                .dependenciesCancelled, operations: [procedure.displayName] + cancelled.map(\.displayName),
                "dependencies cancelled")))
        }
    }
}
