/// A task whose work is a closure, handed the run (Task.framework's `TSKBlockTask`). The closure
/// finishes or fails the run, now or later, from any thread.
///
/// The closure runs on a worker of the workflow's queue, once per run. It reaches the task, and
/// so its prerequisites' results, through ``WorkflowTaskRun/task``.
///
/// ```swift
/// let parse = ClosureTask(name: "parse") { run in
///     guard let data = run.task.prerequisiteResult(forKey: "data", as: Data.self) else {
///         return run.fail(with: ParseError.noData)
///     }
///     run.finish(with: try? decode(data))
/// }
/// ```
public final class ClosureTask: WorkflowTask, @unchecked Sendable {
    private let body: @Sendable (WorkflowTaskRun) -> Void
    private let requiredKeys: Set<String>

    /// Creates a task that runs `body`.
    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - requiredPrerequisiteKeys: Keys that must be among the keyed prerequisites when the task
    ///     is added.
    ///   - body: The work of one run; it receives the run to finish or fail. Runs on a worker of
    ///     the workflow's queue.
    public init(name: String, requiredPrerequisiteKeys: Set<String> = [], _ body: @escaping @Sendable (WorkflowTaskRun) -> Void) {
        self.body = body
        requiredKeys = requiredPrerequisiteKeys
        super.init(name: name)
    }

    /// The keys given to ``init(name:requiredPrerequisiteKeys:_:)``.
    public override var requiredPrerequisiteKeys: Set<String> { requiredKeys }

    override func missingPrerequisiteKeys(in keyed: [String: WorkflowTask]) -> Set<String>? {
        requiredKeys.isEmpty ? nil : super.missingPrerequisiteKeys(in: keyed)
    }

    /// Calls the closure with ``WorkflowTask/currentRun``.
    public override func main() {
        body(currentRun)
    }

    /// Calls the closure with the run being executed, which is what ``main()`` reads as
    /// ``WorkflowTask/currentRun`` there, without looking it up.
    override func main(executing run: WorkflowTaskRun) {
        body(run)
    }
}

/// A task that calls a method of an object (Task.framework's `TSKSelectorTask`): the method takes
/// the run and finishes or fails it, now or later, from any thread. The object is held strongly.
///
/// The method runs on a worker of the workflow's queue, once per run.
///
/// ```swift
/// let sync = MethodTask(name: "sync", target: store, method: Store.sync(_:))
/// ```
public final class MethodTask<Target: AnyObject & Sendable>: WorkflowTask, @unchecked Sendable {
    /// The object whose method runs.
    public let target: Target
    private let method: @Sendable (Target) -> (WorkflowTaskRun) -> Void
    private let requiredKeys: Set<String>

    /// Creates a task that calls `method` on `target`.
    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - target: The object, held strongly.
    ///   - method: The method, unapplied (`Type.method(_:)`): it receives the run.
    ///   - requiredPrerequisiteKeys: Keys that must be among the keyed prerequisites when the task
    ///     is added.
    public init(
        name: String, target: Target, method: @escaping @Sendable (Target) -> (WorkflowTaskRun) -> Void,
        requiredPrerequisiteKeys: Set<String> = []
    ) {
        self.target = target
        self.method = method
        requiredKeys = requiredPrerequisiteKeys
        super.init(name: name)
    }

    /// The keys given to ``init(name:target:method:requiredPrerequisiteKeys:)``.
    public override var requiredPrerequisiteKeys: Set<String> { requiredKeys }

    /// Calls the method on the target with ``WorkflowTask/currentRun``.
    public override func main() {
        method(target)(currentRun)
    }
}

/// A task fulfilled from outside with a value (Task.framework's `TSKExternalConditionTask`): for
/// a user's choice, a permission, a notification.
///
/// Started before it is fulfilled, it fails with
/// ``OperationError/Code-swift.struct/externalConditionNotFulfilled``. ``fulfill(with:)`` counts
/// once: a failed or cancelled task is retried, a ready one started, and it finishes with the
/// value; a pending one finishes with it once its prerequisites have finished. A reset that
/// reaches the task clears the fulfilment, whatever the task's state.
///
/// ```swift
/// let input = ExternalConditionTask(name: "input")
/// try workflow.add(input)
/// try workflow.add(request, keyedPrerequisites: ["input": input])
/// workflow.start()             // input fails: not fulfilled yet
/// input.fulfill(with: answer)  // input is retried and finishes with answer; request runs
/// ```
public final class ExternalConditionTask: WorkflowTask, @unchecked Sendable {
    // protected by `withTaskLock` (internal for snapshots)
    var fulfilment: (value: (any Sendable)?, Void)?

    /// Whether the condition has been fulfilled (since the last reset).
    public var isFulfilled: Bool { withTaskLock { fulfilment != nil } }

    /// Fulfils the condition with `value`. Only the first fulfilment counts (until a reset).
    ///
    /// If the task is failed or cancelled it is retried, if ready started, in both cases on the
    /// calling thread; the run then finishes with `value`. A run in progress checks the
    /// fulfilment and finishes or fails in one step, so either it sees this fulfilment and
    /// finishes with it, or it has already failed and this call retries it.
    /// - Parameter value: The task's result once it runs.
    public func fulfill(with value: (any Sendable)?) {
        let state = withTaskLock { () -> WorkflowTaskState? in
            guard fulfilment == nil else { return nil }
            fulfilment = (value, ())
            return lifecycle.state
        }
        switch state {
        case .failed, .cancelled: retry()
        case .ready: start()
        default: break
        }
    }

    /// Finishes with the fulfilment's value, or fails with
    /// ``OperationError/Code-swift.struct/externalConditionNotFulfilled``.
    public override func main() {
        let run = currentRun.number
        let notFulfilled = OperationError(.externalConditionNotFulfilled, operations: [name], "the external condition is not fulfilled")
        // The check and the finish (or fail) in one step: a fulfilment arriving meanwhile either
        // comes first (the run finishes with it) or finds the task failed (and retries it).
        attachedWorkflow?.perform { transaction in
            if let value = fulfilment {
                transaction.finish(self, run: run, result: value.value)
            } else {
                transaction.fail(self, run: run, error: notFulfilled)
            }
        }
    }

    /// Clears the fulfilment.
    override func resetReachedLocked() {
        fulfilment = nil
    }
}

/// A task that runs a whole workflow as one step (Task.framework's `TSKSubworkflowTask`). Its
/// result is the sub-workflow.
///
/// Started: if the sub-workflow has no unfinished task it finishes at once; if a sub-task failed
/// it fails with the error of the one that failed first; if a sub-task was cancelled it is
/// cancelled; otherwise it starts the sub-workflow and finishes when it does, fails when a
/// sub-task fails, and is cancelled when a sub-task is (failure wins). The sub-workflow's tasks
/// run on the sub-workflow's own queue.
///
/// A cancel that reaches this task cancels the sub-workflow too, whatever the task's state
/// (as Task.framework does), except a cancel caused by a sub-task, which leaves the sub-workflow
/// as it is. A retry or reset that changes this task's state does the same to the sub-workflow;
/// one that leaves it alone — a retry of a finished task, a reset of a pending one — does not.
/// All of this happens after the change, on the same thread.
public final class SubworkflowTask: WorkflowTask, @unchecked Sendable {
    /// The workflow this task runs.
    public let subworkflow: Workflow
    private let listenerID: Int
    // protected by `withTaskLock`: this task is cancelled because a sub-task was, so the
    // sub-workflow is left as it is
    private var cancellingSelfOnly = false

    /// Creates a task that runs `subworkflow`.
    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - subworkflow: The workflow to run as one step, held strongly.
    public init(name: String, subworkflow: Workflow) {
        self.subworkflow = subworkflow
        listenerID = subworkflow.lock.withLock {
            subworkflow.nextStreamID += 1
            return subworkflow.nextStreamID
        }
        super.init(name: name)
        let id = listenerID
        subworkflow.lock.withLock {
            subworkflow.listeners[id] = { [weak self] event in self?.subworkflowEvent(event) }
        }
    }

    // No deinit removing the listener: a deinit may run under the sub-workflow's lock (when the
    // last reference goes while the lock is held), which it would then take again. The listener holds
    // this task weakly, so after the task is gone it does nothing.

    /// Finishes, fails or cancels the task from the sub-workflow's state, or starts the
    /// sub-workflow (see ``SubworkflowTask``).
    public override func main() {
        let run = currentRun
        // Under the sub-workflow's lock only: this task's own workflow lock is not held here.
        let (unfinished, failure, cancelled) = subworkflow.lock.withLock { () -> (Bool, (any Error)?, Bool) in
            let tasks = subworkflow.tasks
            let failed = tasks.filter { $0.lifecycle.state == .failed }
                .min { ($0._finishTime?.instant ?? .now) < ($1._finishTime?.instant ?? .now) }
            return (subworkflow.finishedCount < tasks.count, failed?._error,
                    tasks.contains { $0.lifecycle.state == .cancelled })
        }
        if !unfinished {
            run.finish(with: subworkflow)
        } else if let failure {
            run.fail(with: failure)
        } else if cancelled {
            cancelSelfOnly()
        } else {
            subworkflow.start()
        }
    }

    private func subworkflowEvent(_ event: WorkflowEvent) {
        guard state == .executing else { return }
        switch event {
        case .workflowFinished:
            currentRun.finish(with: subworkflow)
        case .taskFailed(_, let error):
            currentRun.fail(with: error)
        case .taskCancelled:
            if !subworkflow.hasFailedTasks { cancelSelfOnly() }
        default:
            break
        }
    }

    /// Cancels this task (and its dependents) without cancelling the sub-workflow.
    private func cancelSelfOnly() {
        attachedWorkflow?.perform { transaction in
            // Only if the cancel changes this task's state: then `didCancel` runs and clears the
            // flag (and no `cancelPassedOn` reaches the sub-workflow).
            switch lifecycle.state {
            case .pending, .ready, .executing:
                cancellingSelfOnly = true
                transaction.cancel(from: [self])
            case .finished, .failed, .cancelled:
                break
            }
        }
    }

    /// Cancels the sub-workflow, unless the cancel came from one of its tasks.
    public override func didCancel() {
        let selfOnly = withTaskLock {
            defer { cancellingSelfOnly = false }
            return cancellingSelfOnly
        }
        if !selfOnly { subworkflow.cancel() }
    }

    /// A cancel that found this task already finished, failed or cancelled still reaches the
    /// sub-workflow (Task.framework cancels the sub-workflow first, always).
    override func cancelPassedOn() {
        subworkflow.cancel()
    }

    /// Resets the sub-workflow.
    public override func didReset() {
        subworkflow.reset()
    }

    /// Retries the sub-workflow.
    public override func didRetry() {
        subworkflow.retry()
    }
}
