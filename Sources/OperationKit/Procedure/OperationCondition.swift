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
    /// What makes this condition the same as another, or `nil` (the default for a value type):
    /// then it is the same as no other. A class's default is its object identity
    /// (``ConditionIdentity/init(_:)``). A condition given twice to one procedure, or among the
    /// parts of one ``AllConditions`` / ``AnyCondition``, is kept once: evaluated once, its
    /// dependency produced once. Asked once, without any lock held, when the condition is added.
    var identity: ConditionIdentity? { get }
    /// Operations that must finish before the condition is evaluated, besides the one it
    /// produces (``dependency(for:)``); by default none.
    ///
    /// They gate this condition only — the procedure's other conditions may decide first — and
    /// are not added to any queue by the condition (add them yourself; one never started keeps
    /// the condition waiting). A dependency that failed or was cancelled does not stop the
    /// evaluation: the condition may look at it. They are not cancelled with the procedure.
    /// Asked once, without any lock held, when the condition's produced dependency is made.
    var dependencies: [ConcurrentOperation] { get }
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
    /// `nil`: the condition is the same as no other.
    public var identity: ConditionIdentity? { nil }
    /// None.
    public var dependencies: [ConcurrentOperation] { [] }
    /// Whether the condition makes procedures mutually exclusive (it has categories).
    public var isMutuallyExclusive: Bool { !mutuallyExclusiveCategories.isEmpty }
}

extension OperationCondition where Self: AnyObject {
    /// The object's identity: the same object is the same condition.
    public var identity: ConditionIdentity? { ConditionIdentity(self) }
}

/// A condition decided by a closure, synchronously.
///
/// Its identity is the value's: a copy of the same `ClosureCondition` given twice is the same
/// condition (evaluated once); two made separately are different, whatever their names. Its
/// name, unless given, says where it was made (`ClosureCondition(Upload.swift:12)`).
///
/// ```swift
/// try upload.addCondition(ClosureCondition(name: "signed in") { _ in
///     session.isSignedIn ? .satisfied : .failed(NotSignedIn())
/// })
/// ```
public struct ClosureCondition: OperationCondition, CustomStringConvertible {
    /// The name, the dependencies and the closure, in one object: the condition is one
    /// reference, so an `any OperationCondition` holds it inline (no box per conversion).
    final class Storage: Sendable {
        /// The name given, or `nil`: the default name is made when first asked for.
        let givenName: String?
        let fileID: StaticString
        let line: UInt
        let dependencies: [ConcurrentOperation]
        let decide: @Sendable (ProcedureOperation) -> ConditionResult

        init(
            name: String?, fileID: StaticString, line: UInt, dependencies: [ConcurrentOperation],
            decide: @escaping @Sendable (ProcedureOperation) -> ConditionResult
        ) {
            givenName = name
            self.fileID = fileID
            self.line = line
            self.dependencies = dependencies
            self.decide = decide
        }

        var name: String {
            if let givenName { return givenName }
            let path = "\(fileID)"
            let file = path.split(separator: "/").last.map(String.init) ?? path
            return "ClosureCondition(\(file):\(line))"
        }
    }

    private let storage: Storage

    /// A name for logs, errors and snapshots.
    public var name: String { storage.name }
    /// The name.
    public var description: String { storage.name }
    /// The value's identity (copies share it).
    public var identity: ConditionIdentity? { ConditionIdentity(storage) }
    /// The operations that must finish before the closure is asked.
    public var dependencies: [ConcurrentOperation] { storage.dependencies }
    /// Whether it waits for dependencies (read without user code).
    var waitsForDependencies: Bool { !storage.dependencies.isEmpty }

    /// Creates a condition that asks `decide`.
    ///
    /// - Parameters:
    ///   - name: A name for logs, errors and snapshots; by default `ClosureCondition(file:line)`
    ///     of the call.
    ///   - dependencies: Operations that must finish before `decide` is asked (see
    ///     ``OperationCondition/dependencies``); the condition does not add them to a queue.
    ///   - fileID: The file of the call, for the default name.
    ///   - line: The line of the call, for the default name.
    ///   - decide: Called once, when the condition is evaluated; it receives the procedure and
    ///     returns the answer.
    public init(
        name: String? = nil, dependencies: [ConcurrentOperation] = [], fileID: StaticString = #fileID, line: UInt = #line,
        _ decide: @escaping @Sendable (ProcedureOperation) -> ConditionResult
    ) {
        storage = Storage(name: name, fileID: fileID, line: line, dependencies: dependencies, decide: decide)
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

    /// Its one reference, not retained: for a caller that keeps the condition alive meanwhile
    /// (see `ProcedureOperation.prepareSingleClosureCondition`).
    @inline(__always)
    var unretainedStorage: Unmanaged<Storage> { Unmanaged.passUnretained(storage) }

    /// The closure's answer, asked through a reference that the caller keeps alive (see
    /// ``unretainedStorage``): no retain and release of the condition.
    @inline(__always)
    static func decide(lent storage: Unmanaged<Storage>, for procedure: ProcedureOperation) -> ConditionResult {
        storage._withUnsafeGuaranteedRef { $0.decide(procedure) }
    }
}
