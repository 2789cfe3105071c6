/// How a ``WorkflowTask`` ended, as seen by a Swift task awaiting it (``WorkflowTask/outcome``).
///
/// A workflow task can run again after a retry or a reset, so this is the outcome of one wait:
/// the first the task reached at or after the call.
public enum WorkflowTaskOutcome: Sendable {
    /// A run finished with this result (which may be `nil`).
    case finished((any Sendable)?)
    /// A run failed with this error.
    case failed(any Error)
    /// The task was cancelled — or it is pending behind a prerequisite that was cancelled (after
    /// a reset of the task alone), so it cannot run until that one is retried.
    case cancelled
    /// The task is pending and `prerequisite`, one of its prerequisites (directly or through
    /// pending ones), failed with `error`: the task cannot run until that one is retried.
    case prerequisiteFailed(WorkflowTask, error: any Error)
}

extension WorkflowTask {
    /// Waits for the task's next outcome: how it ends at or after the call.
    ///
    /// Returns at once if the task is finished, failed or cancelled, or pending behind a
    /// prerequisite that failed or was cancelled. Otherwise — it is executing, ready or pending —
    /// it waits until the task reaches one of those: so it waits for the run in progress, or for
    /// the next run if none is (a ready task that nobody starts is waited for until it is
    /// started). A reset while waiting ends the run without an outcome, and the wait goes on to
    /// the next run. An ``ExternalConditionTask`` that failed only because it was not fulfilled
    /// yet has no outcome: it is waited for until it is fulfilled, retried and finishes.
    ///
    /// The outcome is judged after the change that brought it has called its hooks and delegates:
    /// a failure that the task's delegate retries at once is not an outcome.
    ///
    /// Cancelling the awaiting Swift task does not end the wait
    /// (``TaskCancellationPolicy/keepWaiting``); see ``outcome(whenCancelled:)``.
    public var outcome: WorkflowTaskOutcome {
        get async {
            // keepWaiting never throws.
            (try? await outcome(whenCancelled: .keepWaiting)) ?? .cancelled
        }
    }

    /// Waits for the task's next outcome, like ``outcome``, doing what `policy` says if the
    /// awaiting Swift task is cancelled.
    ///
    /// - Parameter policy: ``TaskCancellationPolicy/keepWaiting`` ignores the cancellation;
    ///   ``TaskCancellationPolicy/stopWaiting`` withdraws the wait and throws;
    ///   ``TaskCancellationPolicy/cancelAndWait`` cancels this workflow task (``cancel()``, with
    ///   its dependents; made on a Dispatch queue) and goes on waiting — usually for
    ///   ``WorkflowTaskOutcome/cancelled``, unless the run ended first.
    /// - Returns: The outcome.
    /// - Throws: `CancellationError` only with ``TaskCancellationPolicy/stopWaiting``, when the
    ///   awaiting task is cancelled (also if it already was).
    public func outcome(whenCancelled policy: TaskCancellationPolicy) async throws(CancellationError) -> WorkflowTaskOutcome {
        // The workflow cannot go away while one of its tasks is awaited (a task holds it weakly).
        let workflow = attachedWorkflow
        defer { withExtendedLifetime(workflow) {} }
        return try await WorkflowAwaiting.wait(
            policy: policy,
            attempt: { id, continuation, stop in
                withTaskLock {
                    WorkflowAwaiting.attemptLocked(stopIfCancelled: stop, outcome: outcomeLocked()) {
                        awaiters.insert(continuation, id: id)
                    }
                }
            },
            withdraw: { [self] id in withTaskLock { awaiters.remove(id: id) } },
            cancel: { [self] in cancel() }
        )
    }

    /// The result of the task's next outcome (see ``outcome``): waits until the task finishes and
    /// returns its result, or throws if it does not.
    ///
    /// Cancelling the awaiting Swift task does not end the wait
    /// (``TaskCancellationPolicy/keepWaiting``); see ``value(whenCancelled:)``.
    ///
    /// - Throws: The run's error if it failed; ``OperationError/Code-swift.struct/cancelled`` if
    ///   the task was cancelled (or is pending behind a cancelled prerequisite);
    ///   ``OperationError/Code-swift.struct/prerequisiteFailed`` if it is pending behind a failed
    ///   prerequisite.
    public var value: (any Sendable)? {
        get async throws { try await value(whenCancelled: .keepWaiting) }
    }

    /// The result of the task's next outcome, like ``value``, doing what `policy` says if the
    /// awaiting Swift task is cancelled.
    ///
    /// - Parameter policy: What cancelling the awaiting Swift task does; see
    ///   ``outcome(whenCancelled:)``. With ``TaskCancellationPolicy/cancelAndWait`` the task is
    ///   cancelled, so this usually throws ``OperationError/Code-swift.struct/cancelled``.
    /// - Returns: The result the run finished with.
    /// - Throws: As ``value``; and `CancellationError` with ``TaskCancellationPolicy/stopWaiting``
    ///   when the awaiting task is cancelled.
    public func value(whenCancelled policy: TaskCancellationPolicy) async throws -> (any Sendable)? {
        switch try await outcome(whenCancelled: policy) {
        case .finished(let result):
            return result
        case .failed(let error):
            throw error
        case .cancelled:
            throw OperationError(.cancelled, operations: [name], "\(name) was cancelled")
        case .prerequisiteFailed(let prerequisite, let error):
            throw OperationError(
                .prerequisiteFailed, operations: [name, prerequisite.name],
                "\(name) cannot run: its prerequisite \(prerequisite.name) failed (\(error))",
                underlying: [error])
        }
    }

    /// The result of the task's next outcome cast to `T`, like ``value(whenCancelled:)``.
    ///
    /// - Parameters:
    ///   - type: The type expected.
    ///   - policy: What cancelling the awaiting Swift task does; by default
    ///     ``TaskCancellationPolicy/keepWaiting``.
    /// - Returns: The result as a `T`, or `nil` if the run finished without a result or with a
    ///   result of another type (as ``prerequisiteResult(forKey:as:)``).
    /// - Throws: As ``value(whenCancelled:)``.
    public func value<T: Sendable>(
        as type: T.Type, whenCancelled policy: TaskCancellationPolicy = .keepWaiting
    ) async throws -> T? {
        try await value(whenCancelled: policy) as? T
    }
}
