/// What happens when the Swift task that is awaiting an operation, a workflow task or a workflow
/// is cancelled.
///
/// Operations are shared: several tasks may await the same one, and it runs on its queue whether
/// anybody waits or not. So, like `Task.value`, awaiting does not cancel what is awaited unless
/// you ask for it. The awaiting forms that take no policy use ``keepWaiting``.
public enum TaskCancellationPolicy: Sendable, Hashable, CaseIterable {
    /// Ignore the cancellation: keep waiting until the awaited work has finished. Like awaiting
    /// `Task.value` of an unstructured task.
    case keepWaiting
    /// Stop waiting at once and throw `CancellationError`; the awaited work carries on untouched.
    case stopWaiting
    /// Cancel the awaited work, then keep waiting until it has finished (it may still finish
    /// normally if it was about to). Like a child task of a task group when the group is cancelled.
    case cancelAndWait
}
