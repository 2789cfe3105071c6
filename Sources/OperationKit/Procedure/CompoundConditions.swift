// Conditions made of other conditions — NegatedCondition, SilentCondition, AllConditions,
// AnyCondition — how their parts are evaluated, and the dependencies they produce.

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
public struct NegatedCondition: OperationCondition, CustomStringConvertible {
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
    /// The name.
    public var description: String { name }
    /// The inner condition's categories.
    public var mutuallyExclusiveCategories: Set<String> { inner.mutuallyExclusiveCategories }
    /// Made of the inner condition's identity (`nil` if it has none).
    public var identity: ConditionIdentity? { ConditionIdentity.compound("Not", [inner.identity]) }
    /// The inner condition's own dependencies.
    public var dependencies: [ConcurrentOperation] { inner.dependencies }

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
public struct SilentCondition: OperationCondition, CustomStringConvertible {
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
    /// The name.
    public var description: String { name }
    /// The inner condition's categories.
    public var mutuallyExclusiveCategories: Set<String> { inner.mutuallyExclusiveCategories }
    /// Made of the inner condition's identity (`nil` if it has none).
    public var identity: ConditionIdentity? { ConditionIdentity.compound("Silent", [inner.identity]) }
    /// The inner condition's own dependencies: only the one it would produce is left out.
    public var dependencies: [ConcurrentOperation] { inner.dependencies }

    /// Evaluates the inner condition and answers as it does.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called with the inner condition's answer.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        inner.evaluate(for: procedure, completion: completion)
    }
}

/// Several conditions that must all be satisfied (AND).
///
/// The parts are evaluated together, and the compound answers once every part has answered: it
/// is satisfied when all are; otherwise it fails with the error of the first failed part, in the
/// order given; otherwise (some part ignored, none failed) it is ignored. With no parts it is
/// ignored. The queue adds the dependencies of every part (but not those of a ``SilentCondition``
/// part), the compound waits for every part's own ``OperationCondition/dependencies``, and the
/// categories of every part apply. A part given twice (the same ``OperationCondition/identity``)
/// is kept once: evaluated once, its dependency produced once.
public struct AllConditions: OperationCondition, CustomStringConvertible {
    /// The parts.
    public let conditions: [any OperationCondition]

    /// Creates the AND of `conditions`.
    ///
    /// - Parameter conditions: The parts, in order; the first failed part's error is the one
    ///   reported. A part the same as an earlier one is left out.
    public init(_ conditions: [any OperationCondition]) {
        self.conditions = ConditionIdentities.removingDuplicates(conditions)
    }

    /// `All<part, part, …>`.
    public var name: String { "All<\(conditions.map(\.name).joined(separator: ", "))>" }
    /// The name.
    public var description: String { name }
    /// Made of the parts' identities, in order (`nil` if a part has none).
    public var identity: ConditionIdentity? { ConditionIdentity.compound("All", conditions.map(\.identity)) }
    /// The parts' own dependencies, each operation once.
    public var dependencies: [ConcurrentOperation] { ConditionIdentities.dependencies(of: conditions) }
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
/// adds the dependencies of every part (but not those of a ``SilentCondition`` part), the compound
/// waits for every part's own ``OperationCondition/dependencies``, and the categories of every
/// part apply, whichever part was satisfied. A part given twice (the same
/// ``OperationCondition/identity``) is kept once: evaluated once, its dependency produced once.
public struct AnyCondition: OperationCondition, CustomStringConvertible {
    /// The parts.
    public let conditions: [any OperationCondition]

    /// Creates the OR of `conditions`.
    ///
    /// - Parameter conditions: The parts, in order; when none is satisfied, the first failed
    ///   part's error is the one reported. A part the same as an earlier one is left out.
    public init(_ conditions: [any OperationCondition]) {
        self.conditions = ConditionIdentities.removingDuplicates(conditions)
    }

    /// `Any<part, part, …>`.
    public var name: String { "Any<\(conditions.map(\.name).joined(separator: ", "))>" }
    /// The name.
    public var description: String { name }
    /// Made of the parts' identities, in order (`nil` if a part has none).
    public var identity: ConditionIdentity? { ConditionIdentity.compound("Any", conditions.map(\.identity)) }
    /// The parts' own dependencies, each operation once.
    public var dependencies: [ConcurrentOperation] { ConditionIdentities.dependencies(of: conditions) }
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
