// The condition protocol: what evaluating one decides (ConditionResult), OperationCondition
// itself, and ClosureCondition; the built-in conditions are in files of their own.

/// What evaluating an ``OperationCondition`` decided.
public enum ConditionResult: Sendable {
    /// The procedure may run (if its other conditions agree).
    case satisfied
    /// The procedure must not run: it is cancelled with this error, which appears in its
    /// ``ProcedureOperation/errors``.
    case failed(any Error)
    /// The procedure must not run, but nothing went wrong: it is cancelled without an error.
    case ignored
}

/// A requirement a ``ProcedureOperation`` must meet before it executes.
///
/// A procedure's conditions are evaluated once its dependencies have finished (from the queue
/// worker that takes it — never while the queue is suspended, and not at all for a procedure
/// cancelled before then). Each condition's ``evaluate(for:completion:)`` is called as soon as
/// the condition is *evaluable* — the procedure's dependencies and the condition's own produced
/// dependency (``dependency(for:)``) have finished — in the order the conditions were added
/// (result injections first), without waiting for earlier answers, so asynchronous conditions are
/// evaluated concurrently; a condition still waiting for its produced dependency is overtaken by
/// those after it. The procedure executes only if every condition is satisfied (it waits for all
/// of them). The first answer that is a failure (or an ignore) decides at once: the procedure is
/// cancelled, the produced dependencies still running are cancelled, no condition is called any
/// more, and later answers are ignored. So when a condition is called, no condition has failed
/// and every condition added before it has answered satisfied, is still answering, or is waiting
/// for its produced dependency.
///
/// A condition may also produce a dependency (``dependency(for:)``) — an operation the queue adds
/// with the procedure and runs before the condition is evaluated — and may make procedures
/// mutually exclusive (``mutuallyExclusiveCategories``).
///
/// ```swift
/// struct Reachable: OperationCondition {
///     func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
///         network.isReachable ? completion(.satisfied) : completion(.failed(NotReachable()))
///     }
/// }
/// ```
public protocol OperationCondition: Sendable {
    /// A name for logs and errors; by default the type's name.
    var name: String { get }
    /// Categories in which at most one procedure runs at a time, across all queues; by default
    /// none. The procedure takes them after all its conditions are satisfied and holds them until
    /// it has finished. See ``MutuallyExclusive``.
    var mutuallyExclusiveCategories: Set<String> { get }
    /// An operation that must run before the condition is evaluated, or `nil` (the default).
    ///
    /// Called once, on the thread adding the procedure to a queue (or adding the condition to a
    /// procedure already in one; or, for a condition added while the queue was adding the
    /// procedure, on the worker that takes it, before evaluation); not called for a procedure
    /// cancelled before it is added. The queue adds the operation before the procedure; when the
    /// procedure is added, the operation also waits for the procedure's own dependencies. The
    /// condition — not the procedure — waits for it: the procedure's other conditions may decide
    /// first. It is cancelled if the procedure is cancelled (or a condition fails) before
    /// executing.
    ///
    /// - Parameter procedure: The procedure the condition belongs to.
    /// - Returns: A new operation, in no queue, or `nil`.
    func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation?
    /// Decides whether `procedure` may run.
    ///
    /// Called at most once per procedure, without any lock held, after the procedure's
    /// dependencies and the one ``dependency(for:)`` made have finished: on a worker of its
    /// queue, or on the thread that finished that produced dependency. Not called once another
    /// condition has failed (or the procedure was cancelled). Do not block the calling thread:
    /// start slow work asynchronously and answer later.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Call it exactly once, now or later, from any thread, with the answer; later
    ///     calls are ignored. A procedure cancelled meanwhile no longer waits for it.
    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void)
    /// Not for use outside OperationKit: the answer of a condition that decides synchronously,
    /// asked instead of ``evaluate(for:completion:)`` (no completion closure to allocate), or `nil`
    /// to be evaluated with ``evaluate(for:completion:)``. The default returns `nil`.
    func _evaluateImmediately(for procedure: ProcedureOperation) -> ConditionResult?
}

extension OperationCondition {
    /// The condition type's name.
    public var name: String { "\(type(of: self))" }
    /// No categories: the condition makes nothing mutually exclusive.
    public var mutuallyExclusiveCategories: Set<String> { [] }
    /// No dependency.
    ///
    /// - Parameter procedure: The procedure the condition belongs to.
    /// - Returns: `nil`.
    public func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? { nil }
    /// `nil`: evaluated with ``evaluate(for:completion:)``.
    public func _evaluateImmediately(for procedure: ProcedureOperation) -> ConditionResult? { nil }
}

/// A condition decided by a closure, synchronously.
///
/// ```swift
/// try upload.addCondition(ClosureCondition(name: "signed in") { _ in
///     session.isSignedIn ? .satisfied : .failed(NotSignedIn())
/// })
/// ```
public struct ClosureCondition: OperationCondition {
    /// The name and the closure, in one object: the condition is one reference, so an
    /// `any OperationCondition` holds it inline (no box per conversion).
    private final class Storage: Sendable {
        let name: String
        let decide: @Sendable (ProcedureOperation) -> ConditionResult

        init(name: String, decide: @escaping @Sendable (ProcedureOperation) -> ConditionResult) {
            self.name = name
            self.decide = decide
        }
    }

    private let storage: Storage

    /// A name for logs.
    public var name: String { storage.name }

    /// Creates a condition that asks `decide`.
    ///
    /// - Parameters:
    ///   - name: A name for logs.
    ///   - decide: Called once, on a queue worker, when the condition is evaluated; it receives the
    ///     procedure and returns the answer.
    public init(name: String = "ClosureCondition", _ decide: @escaping @Sendable (ProcedureOperation) -> ConditionResult) {
        storage = Storage(name: name, decide: decide)
    }

    /// Calls the closure and answers with what it returns.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called at once with the closure's answer.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(storage.decide(procedure))
    }

    /// The closure's answer (a procedure with this one condition asks it directly).
    public func _evaluateImmediately(for procedure: ProcedureOperation) -> ConditionResult? {
        storage.decide(procedure)
    }
}
