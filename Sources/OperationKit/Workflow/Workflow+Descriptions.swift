// How workflows, tasks, runs and outcomes print: by the names you gave them, so that a log line
// or a failed expectation reads `failed([upload: Disk full])`, not a list of class names.

extension Workflow: CustomStringConvertible {
    /// The workflow's name.
    public var description: String { name }
}

extension WorkflowTask: CustomStringConvertible {
    /// The task's name.
    public var description: String { name }
}

extension WorkflowTaskRun: CustomStringConvertible {
    /// The task's name and the run's number, for example `upload run 2`.
    public var description: String { "\(task.name) run \(number)" }
}

extension WorkflowTaskOutcome: CustomStringConvertible {
    /// The case with its payload: `finished(42)`, `finished(nil)`, `failed(Disk full)`,
    /// `cancelled`, `prerequisiteFailed(upload, Disk full)`.
    public var description: String {
        switch self {
        case .finished(let result):
            return "finished(\(result.map { String(describing: $0) } ?? "nil"))"
        case .failed(let error):
            return "failed(\(error))"
        case .cancelled:
            return "cancelled"
        case .prerequisiteFailed(let prerequisite, let error):
            return "prerequisiteFailed(\(prerequisite.name), \(error))"
        }
    }
}

extension WorkflowOutcome: CustomStringConvertible {
    /// The case with the tasks' names: `finished`, `failed([upload: Disk full, resize: …])`,
    /// `cancelled([upload, resize])`.
    public var description: String {
        switch self {
        case .finished:
            return "finished"
        case .failed(let failures):
            return "failed([\(failures.map { "\($0.task.name): \($0.error)" }.joined(separator: ", "))])"
        case .cancelled(let tasks):
            return "cancelled([\(tasks.map(\.name).joined(separator: ", "))])"
        }
    }
}
