import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// Fixtures for awaiting workflows and workflow tasks from Swift concurrency. Every wait has a
// timeout that fails the test; nothing sleeps to let things happen.

/// How many Swift tasks await `task` (registered continuations).
func awaiterCount(_ task: WorkflowTask) -> Int {
    task.withTaskLock { task.awaiters.count }
}

/// How many Swift tasks await `workflow` (registered continuations).
func awaiterCount(_ workflow: Workflow) -> Int {
    workflow.lock.withLock { workflow.awaiters.count }
}

/// Whether `condition` becomes true within `timeout`, checked between yields. For states that
/// have no callback to wait on (an awaiter has registered); it never stands in for an ordering.
func awaitEventually(within timeout: Duration = workflowTimeout, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    var pause = PollPause()
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        await pause.next()
    }
    return true
}

/// The outcome of `body`, run in a new Swift task, if it ends within `timeout`; `nil` otherwise
/// (the stuck task is abandoned, and the test fails instead of hanging).
func awaitResult<T: Sendable>(
    within timeout: Duration = workflowTimeout, _ body: @escaping @Sendable () async throws -> T
) async -> Result<T, any Error>? {
    await outcome(within: timeout, of: body)
}

/// The result of `task` (a Swift task) if it ends within `timeout`, `nil` otherwise.
func awaitEnd<T: Sendable>(
    of task: Task<T, any Error>, within timeout: Duration = workflowTimeout
) async -> Result<T, any Error>? {
    await awaitResult(within: timeout) { try await task.value }
}

/// A description of an outcome, for comparisons: `finished(R)`, `failed(E)`, `cancelled`,
/// `prerequisiteFailed(P, E)`.
func describeOutcome(_ outcome: WorkflowTaskOutcome) -> String {
    switch outcome {
    case .finished(let result): "finished(\(result.map { "\($0)" } ?? "nil"))"
    case .failed(let error): "failed(\(error))"
    case .cancelled: "cancelled"
    case .prerequisiteFailed(let task, let error): "prerequisiteFailed(\(task.name), \(error))"
    }
}

/// A description of a workflow outcome: `finished`, `failed(A: E, …)`, `cancelled(A, …)`.
func describeOutcome(_ outcome: WorkflowOutcome) -> String {
    switch outcome {
    case .finished: "finished"
    case .failed(let failures): "failed(\(failures.map { "\($0.task.name): \($0.error)" }.joined(separator: ", ")))"
    case .cancelled(let tasks): "cancelled(\(tasks.map(\.name).joined(separator: ", ")))"
    }
}

/// A counter shared by many Swift tasks (an `Atomic`, which the thread sanitizer understands).
final class WorkflowAwaitCounter: Sendable {
    private let count = Atomic<Int>(0)
    init() {}
    func increment() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
