/// A task whose work is a closure, handed the run (Task.framework's `TSKBlockTask`). The closure
/// finishes or fails the run, now or later.
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

    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - requiredPrerequisiteKeys: Keys that must be among the keyed prerequisites.
    ///   - body: The work of one run; it receives the run to finish or fail.
    public init(name: String, requiredPrerequisiteKeys: Set<String> = [], _ body: @escaping @Sendable (WorkflowTaskRun) -> Void) {
        self.body = body
        requiredKeys = requiredPrerequisiteKeys
        super.init(name: name)
    }

    public override var requiredPrerequisiteKeys: Set<String> { requiredKeys }

    public override func main() {
        body(currentRun)
    }
}

/// A task that calls a method of an object (Task.framework's `TSKSelectorTask`): the method takes
/// the run and finishes or fails it. The object is held strongly.
///
/// ```swift
/// let sync = MethodTask(name: "sync", target: store, method: Store.sync(_:))
/// ```
public final class MethodTask<Target: AnyObject & Sendable>: WorkflowTask, @unchecked Sendable {
    /// The object whose method runs.
    public let target: Target
    private let method: @Sendable (Target) -> (WorkflowTaskRun) -> Void
    private let requiredKeys: Set<String>

    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - target: The object.
    ///   - method: The method, unapplied (`Type.method(_:)`): it receives the run.
    ///   - requiredPrerequisiteKeys: Keys that must be among the keyed prerequisites.
    public init(
        name: String, target: Target, method: @escaping @Sendable (Target) -> (WorkflowTaskRun) -> Void,
        requiredPrerequisiteKeys: Set<String> = []
    ) {
        self.target = target
        self.method = method
        requiredKeys = requiredPrerequisiteKeys
        super.init(name: name)
    }

    public override var requiredPrerequisiteKeys: Set<String> { requiredKeys }

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
/// value. ``WorkflowTask/reset()`` clears the fulfilment.
public final class ExternalConditionTask: WorkflowTask, @unchecked Sendable {
    // protected by WorkflowLock.lock
    private var fulfilment: (value: (any Sendable)?, Void)?

    /// Whether the condition has been fulfilled (since the last reset).
    public var isFulfilled: Bool { WorkflowLock.lock.withLock { fulfilment != nil } }

    /// Fulfils the condition with `value`. Only the first fulfilment counts (until a reset).
    public func fulfill(with value: (any Sendable)?) {
        let state = WorkflowLock.lock.withLock { () -> WorkflowTaskState? in
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

    public override func main() {
        let value = WorkflowLock.lock.withLock { fulfilment }
        if let value {
            finish(with: value.value)
        } else {
            fail(with: OperationError(.externalConditionNotFulfilled, operations: [name], "the external condition is not fulfilled"))
        }
    }

    public override func didReset() {
        WorkflowLock.lock.withLock { fulfilment = nil }
    }
}

/// A task that runs a whole workflow as one step (Task.framework's `TSKSubworkflowTask`). Its
/// result is the sub-workflow.
///
/// Started: if the sub-workflow has no unfinished task it finishes at once; if a sub-task failed
/// it fails with the error of the one that failed first; if a sub-task was cancelled it is
/// cancelled; otherwise it starts the sub-workflow and finishes when it does, fails when a
/// sub-task fails, and is cancelled when a sub-task is (failure wins). Cancelling, retrying or
/// resetting the task does the same to the sub-workflow.
public final class SubworkflowTask: WorkflowTask, @unchecked Sendable {
    /// The workflow this task runs.
    public let subworkflow: Workflow
    private let listenerID: Int
    // protected by WorkflowLock.lock: this task is cancelled because a sub-task was, so the
    // sub-workflow is left as it is
    private var cancellingSelfOnly = false

    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - subworkflow: The workflow to run as one step.
    public init(name: String, subworkflow: Workflow) {
        self.subworkflow = subworkflow
        listenerID = WorkflowLock.lock.withLock {
            subworkflow.nextStreamID += 1
            return subworkflow.nextStreamID
        }
        super.init(name: name)
        let id = listenerID
        WorkflowLock.lock.withLock {
            subworkflow.listeners[id] = { [weak self] event in self?.subworkflowEvent(event) }
        }
    }

    deinit {
        let (subworkflow, id) = (self.subworkflow, listenerID)
        _ = WorkflowLock.lock.withLock { subworkflow.listeners.removeValue(forKey: id) }
    }

    public override func main() {
        let run = currentRun
        let (unfinished, failure, cancelled) = WorkflowLock.lock.withLock { () -> (Bool, (any Error)?, Bool) in
            let tasks = subworkflow.tasks
            let failed = tasks.filter { $0.lifecycle.state == .failed }
                .min { ($0._finishTime ?? .now) < ($1._finishTime ?? .now) }
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
            cancellingSelfOnly = true
            transaction.cancel(from: [self])
        }
    }

    public override func didCancel() {
        let selfOnly = WorkflowLock.lock.withLock {
            defer { cancellingSelfOnly = false }
            return cancellingSelfOnly
        }
        if !selfOnly { subworkflow.cancel() }
    }

    public override func didReset() {
        subworkflow.reset()
    }

    public override func didRetry() {
        subworkflow.retry()
    }
}
