/// What evaluating a condition decided.
public enum ConditionResult: Sendable {
    /// The procedure may run (if its other conditions agree).
    case satisfied
    /// The procedure must not run: it is cancelled with this error.
    case failed(any Error)
    /// The procedure must not run, but nothing went wrong: it is cancelled without an error.
    case ignored
}

/// A requirement a ``ProcedureOperation`` must meet before it executes.
///
/// Conditions are evaluated once all the procedure's dependencies have finished, asynchronously
/// and all at once; the procedure executes only if every one is satisfied, and the first failure
/// (or ignore) decides without waiting for the others. A condition may also produce a dependency
/// — an operation the queue adds, and runs before evaluation — and may make procedures mutually
/// exclusive.
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
    /// none. See ``MutuallyExclusive``.
    var mutuallyExclusiveCategories: Set<String> { get }
    /// An operation that must run before the condition is evaluated, or `nil` (the default). The
    /// queue adds it when it adds the procedure, as a dependency of the procedure; it runs after
    /// the procedure's own dependencies.
    func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation?
    /// Decides whether `procedure` may run and calls `completion` exactly once, now or later,
    /// from any thread. Called on a queue worker, without any lock held; start slow work
    /// asynchronously.
    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void)
}

extension OperationCondition {
    public var name: String { "\(type(of: self))" }
    public var mutuallyExclusiveCategories: Set<String> { [] }
    public func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? { nil }
}

/// A condition decided by a closure, synchronously.
///
/// ```swift
/// try upload.addCondition(ClosureCondition(name: "signed in") { _ in
///     session.isSignedIn ? .satisfied : .failed(NotSignedIn())
/// })
/// ```
public struct ClosureCondition: OperationCondition {
    public let name: String
    private let decide: @Sendable (ProcedureOperation) -> ConditionResult

    /// - Parameters:
    ///   - name: A name for logs.
    ///   - decide: Called on a queue worker when the condition is evaluated.
    public init(name: String = "ClosureCondition", _ decide: @escaping @Sendable (ProcedureOperation) -> ConditionResult) {
        self.name = name
        self.decide = decide
    }

    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(decide(procedure))
    }
}

/// The opposite of another condition: satisfied when it fails, failed (with
/// ``OperationError/Code-swift.struct/conditionFailed``) when it is satisfied; ignored stays
/// ignored. The inner condition's dependency is still produced.
public struct NegatedCondition: OperationCondition {
    public let inner: any OperationCondition

    public init(_ inner: any OperationCondition) {
        self.inner = inner
    }

    public var name: String { "Not<\(inner.name)>" }
    public var mutuallyExclusiveCategories: Set<String> { inner.mutuallyExclusiveCategories }

    public func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        inner.dependency(for: procedure)
    }

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
/// it would produce is never added.
public struct SilentCondition: OperationCondition {
    public let inner: any OperationCondition

    public init(_ inner: any OperationCondition) {
        self.inner = inner
    }

    public var name: String { "Silent<\(inner.name)>" }
    public var mutuallyExclusiveCategories: Set<String> { inner.mutuallyExclusiveCategories }

    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        inner.evaluate(for: procedure, completion: completion)
    }
}

/// Fails if any dependency finished with errors (``OperationError/Code-swift.struct/dependenciesFailed``)
/// or was cancelled (``OperationError/Code-swift.struct/dependenciesCancelled``).
///
/// With `ignoringCancellations`, a cancelled dependency makes the procedure cancel without an
/// error (ignored) instead — unless another dependency failed. A dependency cancelled without
/// errors does not count as failed. Failure means: a ``ProcedureOperation`` whose
/// ``ProcedureOperation/errors`` is not empty.
public struct NoFailedDependencies: OperationCondition {
    public let ignoringCancellations: Bool

    public init(ignoringCancellations: Bool = false) {
        self.ignoringCancellations = ignoringCancellations
    }

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
/// cancelled.
public struct NoCancelledDependencies: OperationCondition {
    public init() {}

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

/// Several conditions that must all be satisfied (AND): evaluated together, it is satisfied when
/// all are, fails with the first failure, and is otherwise ignored. With no conditions it is
/// ignored. The queue adds the dependencies of every part.
public struct AllConditions: OperationCondition {
    public let conditions: [any OperationCondition]

    public init(_ conditions: [any OperationCondition]) {
        self.conditions = conditions
    }

    public var name: String { "All<\(conditions.map(\.name).joined(separator: ", "))>" }
    public var mutuallyExclusiveCategories: Set<String> {
        conditions.reduce(into: []) { $0.formUnion($1.mutuallyExclusiveCategories) }
    }

    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        guard !conditions.isEmpty else { return completion(.ignored) }
        ConditionGroup.evaluate(conditions, for: procedure) { results in
            if results.allSatisfy({ if case .satisfied = $0 { true } else { false } }) { return .satisfied }
            for case .failed(let error) in results { return .failed(error) }
            return .ignored
        } completion: { completion($0) }
    }
}

/// Several conditions of which one must be satisfied (OR): satisfied when any is; otherwise it
/// fails with the first failure, or is ignored if none failed. With no conditions it is ignored.
/// The queue adds the dependencies of every part.
public struct AnyCondition: OperationCondition {
    public let conditions: [any OperationCondition]

    public init(_ conditions: [any OperationCondition]) {
        self.conditions = conditions
    }

    public var name: String { "Any<\(conditions.map(\.name).joined(separator: ", "))>" }
    public var mutuallyExclusiveCategories: Set<String> {
        conditions.reduce(into: []) { $0.formUnion($1.mutuallyExclusiveCategories) }
    }

    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        guard !conditions.isEmpty else { return completion(.ignored) }
        ConditionGroup.evaluate(conditions, for: procedure) { results in
            if results.contains(where: { if case .satisfied = $0 { true } else { false } }) { return .satisfied }
            for case .failed(let error) in results { return .failed(error) }
            return .ignored
        } completion: { completion($0) }
    }
}

/// At most one procedure with this condition and the same category runs at a time, across every
/// queue of the process. The category is taken (all of a procedure's categories at once) after its
/// conditions are satisfied, and given back when it finishes; procedures waiting for a category
/// get it in the order they asked. A procedure waiting for a category holds nothing else, so
/// exclusive procedures that also depend on each other cannot deadlock.
public struct MutuallyExclusive: OperationCondition {
    public let category: String

    /// - Parameter category: The category; procedures with the same one never run at once.
    public init(category: String) {
        self.category = category
    }

    /// Uses the name of `type` as the category, like PSOperations' `MutuallyExclusive<T>`.
    public init<T>(_ type: T.Type) {
        category = "\(type)"
    }

    public var name: String { "MutuallyExclusive<\(category)>" }
    public var mutuallyExclusiveCategories: Set<String> { [category] }

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
        switch condition {
        case is SilentCondition:
            return []
        case let all as AllConditions:
            return all.conditions.flatMap { of($0, for: procedure) }
        case let any as AnyCondition:
            return any.conditions.flatMap { of($0, for: procedure) }
        case let negated as NegatedCondition:
            return of(negated.inner, for: procedure)
        default:
            return condition.dependency(for: procedure).map { [$0] } ?? []
        }
    }
}
