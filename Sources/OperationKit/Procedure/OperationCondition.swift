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

/// The opposite of another condition: satisfied when it fails, failed (with
/// ``OperationError/Code-swift.struct/conditionFailed``) when it is satisfied; ignored stays
/// ignored. The inner condition's dependency is still produced, and its mutually exclusive
/// categories still apply.
///
/// ```swift
/// try upload.addCondition(NegatedCondition(ClosureCondition { _ in
///     settings.isOffline ? .satisfied : .failed(Online())
/// }))
/// ```
public struct NegatedCondition: OperationCondition {
    /// The condition whose answer is reversed.
    public let inner: any OperationCondition

    /// Creates the negation of `inner`.
    ///
    /// - Parameter inner: The condition whose answer is reversed.
    public init(_ inner: any OperationCondition) {
        self.inner = inner
    }

    /// `Not<inner>`.
    public var name: String { "Not<\(inner.name)>" }
    /// The inner condition's categories.
    public var mutuallyExclusiveCategories: Set<String> { inner.mutuallyExclusiveCategories }

    /// The inner condition's dependency.
    ///
    /// - Parameter procedure: The procedure the condition belongs to.
    /// - Returns: What the inner condition returns.
    public func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        inner.dependency(for: procedure)
    }

    /// Evaluates the inner condition and reverses its answer.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called once the inner condition has answered, on the thread it answered on.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        let name = self.name
        inner.evaluate(for: procedure) { result in
            switch result {
            case .satisfied:
                completion(.failed(OperationError(
                    .conditionFailed, operations: [procedure.displayName], "\(name): the inner condition was satisfied")))
            case .failed:
                completion(.satisfied)
            case .ignored:
                completion(.ignored)
            }
        }
    }
}

/// Another condition without its dependency: the inner condition is evaluated, but the operation
/// it would produce is never made or added. Its mutually exclusive categories still apply.
public struct SilentCondition: OperationCondition {
    /// The condition evaluated without its dependency.
    public let inner: any OperationCondition

    /// Creates a silent version of `inner`.
    ///
    /// - Parameter inner: The condition to evaluate without its dependency.
    public init(_ inner: any OperationCondition) {
        self.inner = inner
    }

    /// `Silent<inner>`.
    public var name: String { "Silent<\(inner.name)>" }
    /// The inner condition's categories.
    public var mutuallyExclusiveCategories: Set<String> { inner.mutuallyExclusiveCategories }

    /// Evaluates the inner condition and answers as it does.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called with the inner condition's answer.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        inner.evaluate(for: procedure, completion: completion)
    }
}

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

/// Several conditions that must all be satisfied (AND).
///
/// The parts are evaluated together, and the compound answers once every part has answered: it
/// is satisfied when all are; otherwise it fails with the error of the first failed part, in the
/// order given; otherwise (some part ignored, none failed) it is ignored. With no parts it is
/// ignored. The queue adds the dependencies of every part (but not those of a ``SilentCondition``
/// part), and the categories of every part apply.
public struct AllConditions: OperationCondition {
    /// The parts.
    public let conditions: [any OperationCondition]

    /// Creates the AND of `conditions`.
    ///
    /// - Parameter conditions: The parts, in order; the first failed part's error is the one
    ///   reported.
    public init(_ conditions: [any OperationCondition]) {
        self.conditions = conditions
    }

    /// `All<part, part, …>`.
    public var name: String { "All<\(conditions.map(\.name).joined(separator: ", "))>" }
    /// The union of the parts' categories.
    public var mutuallyExclusiveCategories: Set<String> {
        conditions.reduce(into: []) { $0.formUnion($1.mutuallyExclusiveCategories) }
    }

    /// Evaluates every part and combines their answers.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called once the last part has answered, on the thread it answered on.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        guard !conditions.isEmpty else { return completion(.ignored) }
        ConditionGroup.evaluate(conditions, for: procedure) { results in
            if results.allSatisfy({ if case .satisfied = $0 { true } else { false } }) { return .satisfied }
            for case .failed(let error) in results { return .failed(error) }
            return .ignored
        } completion: { completion($0) }
    }
}

/// Several conditions of which one must be satisfied (OR).
///
/// The parts are evaluated together, and the compound answers once every part has answered: it
/// is satisfied when any part is; otherwise it fails with the error of the first failed part, in
/// the order given; otherwise (all ignored) it is ignored. With no parts it is ignored. The queue
/// adds the dependencies of every part (but not those of a ``SilentCondition`` part), and the
/// categories of every part apply, whichever part was satisfied.
public struct AnyCondition: OperationCondition {
    /// The parts.
    public let conditions: [any OperationCondition]

    /// Creates the OR of `conditions`.
    ///
    /// - Parameter conditions: The parts, in order; when none is satisfied, the first failed
    ///   part's error is the one reported.
    public init(_ conditions: [any OperationCondition]) {
        self.conditions = conditions
    }

    /// `Any<part, part, …>`.
    public var name: String { "Any<\(conditions.map(\.name).joined(separator: ", "))>" }
    /// The union of the parts' categories.
    public var mutuallyExclusiveCategories: Set<String> {
        conditions.reduce(into: []) { $0.formUnion($1.mutuallyExclusiveCategories) }
    }

    /// Evaluates every part and combines their answers.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called once the last part has answered, on the thread it answered on.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        guard !conditions.isEmpty else { return completion(.ignored) }
        ConditionGroup.evaluate(conditions, for: procedure) { results in
            if results.contains(where: { if case .satisfied = $0 { true } else { false } }) { return .satisfied }
            for case .failed(let error) in results { return .failed(error) }
            return .ignored
        } completion: { completion($0) }
    }
}

/// At most one procedure with this condition and the same category executes at a time, across
/// every queue of the process.
///
/// A procedure takes all its categories at once, after its dependencies have finished and all its
/// conditions are satisfied, and gives them back when it has finished (after its completion
/// block, before its did-finish observers). Procedures waiting for a category get it in the order
/// they asked; a waiting procedure holds no category and no concurrency slot, and its state stays
/// ``ProcedureState/ready``. Cancelling it withdraws its request. So exclusive procedures that
/// also depend on each other cannot deadlock.
///
/// A hold covers the holder's subtree: the descendants of a ``GroupOperation`` that holds a
/// category (its children, what they produce, the children of nested groups) may take the
/// category under the group's hold, and still exclude each other. A procedure must not wait,
/// while it holds a category, for a procedure outside its subtree that needs the category.
///
/// ```swift
/// try showAlert.addCondition(MutuallyExclusive(category: "alert"))
/// ```
public struct MutuallyExclusive: OperationCondition {
    /// The category; procedures with the same one never execute at once.
    public let category: String

    /// Creates the condition for `category`.
    ///
    /// - Parameter category: The category; procedures with the same one never execute at once.
    public init(category: String) {
        self.category = category
    }

    /// Creates the condition with the name of `type` as its category, like PSOperations'
    /// `MutuallyExclusive<T>`.
    ///
    /// - Parameter type: The type whose name is the category.
    public init<T>(_ type: T.Type) {
        category = "\(type)"
    }

    /// `MutuallyExclusive<category>`.
    public var name: String { "MutuallyExclusive<\(category)>" }
    /// The one category.
    public var mutuallyExclusiveCategories: Set<String> { [category] }

    /// Always satisfied: the exclusivity is applied after every condition is satisfied.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called at once with ``ConditionResult/satisfied``.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(.satisfied)
    }
}

/// Evaluates all of a compound condition's parts, then combines their results.
enum ConditionGroup {
    static func evaluate(
        _ conditions: [any OperationCondition],
        for procedure: ProcedureOperation,
        combine: @escaping @Sendable ([ConditionResult]) -> ConditionResult,
        completion: @escaping @Sendable (ConditionResult) -> Void
    ) {
        let collector = ResultCollector(count: conditions.count) { completion(combine($0)) }
        for (index, condition) in conditions.enumerated() {
            condition.evaluate(for: procedure) { collector.set(index, $0) }
        }
    }

    /// Collects one result per index and calls `done` once, when the last one arrives.
    final class ResultCollector: @unchecked Sendable {  // `results` and `remaining` are protected by `lock`
        private let lock = Lock()
        private var results: [ConditionResult?]
        private var remaining: Int
        private let done: @Sendable ([ConditionResult]) -> Void

        init(count: Int, done: @escaping @Sendable ([ConditionResult]) -> Void) {
            results = Array(repeating: nil, count: count)
            remaining = count
            self.done = done
        }

        func set(_ index: Int, _ result: ConditionResult) {
            let finished: [ConditionResult]? = lock.withLock {
                guard results[index] == nil else { return nil }  // a second completion is ignored
                results[index] = result
                remaining -= 1
                return remaining == 0 ? results.map { $0! } : nil
            }
            if let finished { done(finished) }
        }
    }
}

/// The operations a condition makes the queue add before its procedure: its own dependency, or
/// for a compound condition those of its parts; none for a silent one.
enum ProducedDependencies {
    static func of(_ condition: any OperationCondition, for procedure: ProcedureOperation) -> [ConcurrentOperation] {
        // Compare the dynamic type (a pointer comparison) before casting: a dynamic cast of an
        // existential to each composite type costs a few hundred instructions, per condition.
        let type = ObjectIdentifier(Swift.type(of: condition))
        if type == ObjectIdentifier(SilentCondition.self) {
            return []
        } else if type == ObjectIdentifier(AllConditions.self), let all = condition as? AllConditions {
            return all.conditions.flatMap { of($0, for: procedure) }
        } else if type == ObjectIdentifier(AnyCondition.self), let any = condition as? AnyCondition {
            return any.conditions.flatMap { of($0, for: procedure) }
        } else if type == ObjectIdentifier(NegatedCondition.self), let negated = condition as? NegatedCondition {
            return of(negated.inner, for: procedure)
        }
        return condition.dependency(for: procedure).map { [$0] } ?? []
    }
}
