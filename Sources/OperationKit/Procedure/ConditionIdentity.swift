// ConditionIdentity — what makes two conditions "the same", so that a condition given twice is
// evaluated once — and the helpers that find duplicates and a condition's own dependencies.

/// What makes two ``OperationCondition`` values the same condition: a condition given twice — to
/// one procedure (``ProcedureOperation/addCondition(_:)``), or among the parts of one
/// ``AllConditions`` or ``AnyCondition`` — is kept once, so it is evaluated once and its
/// dependency produced once.
///
/// An identity is an explicit key (``named(_:)``), an object (``init(_:)``: the same object is
/// the same condition), or, for the built-in compound conditions, made of their parts'
/// identities. A condition whose ``OperationCondition/identity`` is `nil` (a value type's
/// default) is never the same as another one.
///
/// ```swift
/// struct SignedIn: OperationCondition {
///     var identity: ConditionIdentity? { .named("signed in") }
///     func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
///         completion(.satisfied)
///     }
/// }
/// ```
public struct ConditionIdentity: Hashable, Sendable, CustomStringConvertible {
    private enum Key: Hashable, Sendable {
        case name(String)
        case object(ObjectIdentifier)
        case compound(String, [ConditionIdentity])
    }

    private let key: Key

    private init(key: Key) {
        self.key = key
    }

    /// The identity named `key`: every condition with this identity is the same condition.
    ///
    /// - Parameter key: The key, compared as a string.
    /// - Returns: The identity.
    public static func named(_ key: String) -> ConditionIdentity {
        ConditionIdentity(key: .name(key))
    }

    /// The identity of `object`: conditions with the identity of the same object are the same.
    /// The condition must keep the object alive (an object's identity may be reused once it is
    /// gone).
    ///
    /// - Parameter object: The object.
    public init(_ object: AnyObject) {
        key = .object(ObjectIdentifier(object))
    }

    /// The identity of a compound condition of kind `kind` (`All`, `Any`, `Not`, `Silent`): made
    /// of its parts' identities, or `nil` if a part has none.
    static func compound(_ kind: String, _ parts: [ConditionIdentity?]) -> ConditionIdentity? {
        var identities: [ConditionIdentity] = []
        identities.reserveCapacity(parts.count)
        for part in parts {
            guard let part else { return nil }
            identities.append(part)
        }
        return ConditionIdentity(key: .compound(kind, identities))
    }

    /// `named(key)`, `object(0x…)` or `All<…>`, for logs.
    public var description: String {
        switch key {
        case .name(let name): "named(\(name))"
        case .object(let object): "object(\(object.debugDescription))"
        case .compound(let kind, let parts): "\(kind)<\(parts.map(\.description).joined(separator: ", "))>"
        }
    }
}

enum ConditionIdentities {
    /// `conditions` without those the same as an earlier one (by ``OperationCondition/identity``),
    /// in their order.
    static func removingDuplicates(_ conditions: [any OperationCondition]) -> [any OperationCondition] {
        guard conditions.count > 1 else { return conditions }
        var seen = Set<ConditionIdentity>()
        return conditions.filter { condition in
            guard let identity = condition.identity else { return true }
            return seen.insert(identity).inserted
        }
    }

    /// The union of the conditions' own dependencies, each operation once, in order.
    static func dependencies(of conditions: [any OperationCondition]) -> [ConcurrentOperation] {
        var seen = Set<ObjectIdentifier>()
        var all: [ConcurrentOperation] = []
        for condition in conditions {
            for dependency in condition.dependencies where seen.insert(ObjectIdentifier(dependency)).inserted {
                all.append(dependency)
            }
        }
        return all
    }

    /// For a condition about to be added to a procedure, without any lock held: its identity,
    /// and whether it needs a gate (it may produce a dependency, or waits for its own). A
    /// ``ClosureCondition`` answers without a dynamic cast or user code.
    static func classify<Condition: OperationCondition>(_ condition: Condition) -> (identity: ConditionIdentity?, gated: Bool) {
        guard Condition.self == ClosureCondition.self else { return (condition.identity, true) }
        let closure = unsafeBitCast(condition, to: ClosureCondition.self)
        return (closure.identity, closure.waitsForDependencies)
    }
}
