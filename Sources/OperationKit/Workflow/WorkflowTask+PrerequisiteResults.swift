// WorkflowTask: the results of its prerequisites, as a task reads them in main() (any, all,
// unkeyed, keyed, by task).

extension WorkflowTask {
    // MARK: Prerequisite results

    /// The result of the first prerequisite that has one, in the order of
    /// ``allPrerequisiteResults``; `nil` if none has one. Meant for a task with a single
    /// prerequisite.
    public var anyPrerequisiteResult: (any Sendable)? {
        withTaskLock { prerequisites().lazy.compactMap { $0._result }.first }
    }

    /// The results of all prerequisites, keyed and unkeyed, that have one: the unkeyed ones in the
    /// order they were given to ``Workflow/add(_:prerequisites:keyedPrerequisites:)``, then the
    /// keyed ones by key, each task once. A prerequisite that finished with `nil` (or has not
    /// finished) is left out.
    public var allPrerequisiteResults: [any Sendable] {
        withTaskLock { prerequisites().compactMap { $0._result } }
    }

    /// The results of the unkeyed prerequisites that have one, in the order they were given. A
    /// task given both unkeyed and under a key counts as keyed.
    public var allUnkeyedPrerequisiteResults: [any Sendable] {
        withTaskLock {
            let keyed = Set(keyedPrerequisiteIndices.values)
            return prerequisiteIndices.filter { !keyed.contains($0) }.compactMap { task(at: $0)?._result }
        }
    }

    /// The results of the keyed prerequisites, by key (keys whose task has no result are left out).
    public var keyedPrerequisiteResults: [String: any Sendable] {
        withTaskLock {
            keyedPrerequisiteIndices.compactMapValues { task(at: $0)?._result }
        }
    }

    /// The result of the prerequisite added under `key`.
    /// - Parameter key: A key of the keyed prerequisites given to
    ///   ``Workflow/add(_:prerequisites:keyedPrerequisites:)``.
    /// - Returns: Its result, or `nil` if no prerequisite has that key or it has no result.
    public func prerequisiteResult(forKey key: String) -> (any Sendable)? {
        withTaskLock { keyedPrerequisiteIndices[key].flatMap { task(at: $0)?._result } }
    }

    /// The result of the prerequisite added under `key`, if it has type `T`.
    /// - Parameters:
    ///   - key: A key of the keyed prerequisites.
    ///   - type: The type expected.
    /// - Returns: The result as a `T`, or `nil` if there is no such prerequisite, it has no result
    ///   or its result is not a `T`.
    public func prerequisiteResult<T>(forKey key: String, as type: T.Type) -> T? {
        prerequisiteResult(forKey: key) as? T
    }

    /// The prerequisites that have a result, each with its result, in the order of
    /// ``allPrerequisiteResults``.
    public var prerequisiteResultsByTask: [(task: WorkflowTask, result: any Sendable)] {
        withTaskLock { prerequisites().compactMap { task in task._result.map { (task, $0) } } }
    }
}
