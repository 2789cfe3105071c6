// The MutuallyExclusive condition: at most one procedure per category executes at a time
// (ExclusivityController holds the categories).

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
