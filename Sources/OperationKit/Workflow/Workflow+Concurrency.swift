/// How a ``Workflow`` settled, as seen by a Swift task awaiting it (``Workflow/outcome``).
///
/// A workflow is *settled* when it has finished — every task without dependents has finished —
/// or when no task is executing and one has failed or been cancelled: then nothing can change
/// until it is retried, reset or started again.
public enum WorkflowOutcome: Sendable {
    /// Every task without dependents has finished (at once for an empty workflow).
    case finished
    /// No task is executing and these tasks failed, in the order they were added, each with its
    /// error. Their dependents are pending.
    case failed([(task: WorkflowTask, error: any Error)])
    /// No task is executing, none failed, and these tasks were cancelled, in the order they were
    /// added.
    case cancelled([WorkflowTask])
}

extension Workflow {
    /// Waits until the workflow settles (see ``WorkflowOutcome``) and returns how.
    ///
    /// Returns at once if it has already settled: finished, or failed or cancelled with no task
    /// executing. While a task is executing, a failure elsewhere does not end the wait: the
    /// workflow settles once nothing runs any more. A workflow with no task executing and none
    /// failed or cancelled — not started yet, or reset — is waited for until it is started and
    /// settles. An ``ExternalConditionTask`` that failed only because it was not fulfilled yet
    /// counts as waiting, not failed: the wait goes on until it is fulfilled.
    ///
    /// The outcome is judged after each change has called its hooks and delegates, so a failure
    /// that a delegate retries at once does not end the wait.
    ///
    /// Cancelling the awaiting Swift task does not end the wait
    /// (``TaskCancellationPolicy/keepWaiting``); see ``outcome(whenCancelled:)``.
    public var outcome: WorkflowOutcome {
        get async {
            // keepWaiting never throws.
            (try? await outcome(whenCancelled: .keepWaiting)) ?? .cancelled([])
        }
    }

    /// Waits until the workflow settles, like ``outcome``, doing what `policy` says if the
    /// awaiting Swift task is cancelled.
    ///
    /// - Parameter policy: ``TaskCancellationPolicy/keepWaiting`` ignores the cancellation;
    ///   ``TaskCancellationPolicy/stopWaiting`` withdraws the wait and throws;
    ///   ``TaskCancellationPolicy/cancelAndWait`` cancels the workflow (``cancel()``, made on a
    ///   Dispatch queue) and goes on waiting — usually for ``WorkflowOutcome/cancelled(_:)``,
    ///   unless it finished first.
    /// - Returns: How the workflow settled.
    /// - Throws: `CancellationError` only with ``TaskCancellationPolicy/stopWaiting``, when the
    ///   awaiting task is cancelled (also if it already was).
    public func outcome(whenCancelled policy: TaskCancellationPolicy) async throws(CancellationError) -> WorkflowOutcome {
        try await WorkflowAwaiting.wait(
            policy: policy,
            attempt: { id, continuation, stop in
                lock.withLock {
                    WorkflowAwaiting.attemptLocked(stopIfCancelled: stop, outcome: outcomeLocked()) {
                        awaiters.insert(continuation, id: id)
                    }
                }
            },
            withdraw: { [self] id in lock.withLock { awaiters.remove(id: id) } },
            cancel: { [self] in cancel() }
        )
    }

    /// Starts the workflow (``start()``: every ready task) and waits until it settles.
    ///
    /// ```swift
    /// try await workflow.run()
    /// let feed = try await parse.value(as: Feed.self)
    /// ```
    ///
    /// Like ``start()`` it does not retry failed or cancelled tasks: run a workflow that failed
    /// again with ``retry()`` and ``outcome``, or ``reset()`` then `run()`. The start happens even
    /// if the calling Swift task is already cancelled; `policy` then applies at once.
    ///
    /// - Parameter policy: What cancelling the awaiting Swift task does; see
    ///   ``outcome(whenCancelled:)``. With ``TaskCancellationPolicy/cancelAndWait`` the workflow
    ///   is cancelled, so this usually throws ``OperationError/Code-swift.struct/cancelled``.
    /// - Throws: ``OperationError/Code-swift.struct/taskFailed``, naming the failed tasks, if
    ///   tasks failed (their dependents never ran); ``OperationError/Code-swift.struct/cancelled``,
    ///   naming the cancelled tasks, if tasks were cancelled and none failed; `CancellationError`
    ///   with ``TaskCancellationPolicy/stopWaiting`` when the awaiting task is
    ///   cancelled.
    public func run(whenCancelled policy: TaskCancellationPolicy = .keepWaiting) async throws {
        start()
        switch try await outcome(whenCancelled: policy) {
        case .finished:
            return
        case .failed(let failures):
            let what = failures.map { "\($0.task.name) (\($0.error))" }.joined(separator: ", ")
            throw OperationError(
                .taskFailed, operations: failures.map(\.task.name),
                "\(name) cannot finish: failed \(what)", underlying: failures.map(\.error))
        case .cancelled(let tasks):
            throw OperationError(
                .cancelled, operations: tasks.map(\.name),
                "\(name) cannot finish: cancelled \(tasks.map(\.name).joined(separator: ", "))")
        }
    }
}
