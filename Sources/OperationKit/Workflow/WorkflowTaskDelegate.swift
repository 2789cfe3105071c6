// WorkflowTaskDelegate: what a workflow task tells its delegate when it finishes, fails or is
// cancelled, with empty defaults.

/// Told when a task finishes, fails or is cancelled (Task.framework's `TSKTaskDelegate`); set it
/// as ``WorkflowTask/delegate``, which holds it weakly.
///
/// Methods have empty defaults. They run on the thread that caused the change, after the
/// workflow's events and the task's hook and before the workflow's delegate, never under a lock.
public protocol WorkflowTaskDelegate: AnyObject, Sendable {
    /// A run of `task` finished.
    /// - Parameters:
    ///   - task: The task, now finished.
    ///   - result: The run's result.
    func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?)
    /// A run of `task` failed.
    /// - Parameters:
    ///   - task: The task, now failed.
    ///   - error: The run's error.
    func task(_ task: WorkflowTask, didFailWith error: any Error)
    /// `task` was cancelled, directly or because a prerequisite was.
    /// - Parameter task: The task, now cancelled.
    func taskDidCancel(_ task: WorkflowTask)
}

extension WorkflowTaskDelegate {
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - task: The task, now finished.
    ///   - result: The run's result.
    public func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?) {}
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - task: The task, now failed.
    ///   - error: The run's error.
    public func task(_ task: WorkflowTask, didFailWith error: any Error) {}
    /// Does nothing.
    ///
    /// - Parameter task: The task, now cancelled.
    public func taskDidCancel(_ task: WorkflowTask) {}
}
