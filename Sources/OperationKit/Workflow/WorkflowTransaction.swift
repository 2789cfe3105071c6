/// One change to a workflow: decided under the workflow's lock (the `mutating func`s), then
/// performed without it (``performEffects()``): first every event, then the hooks and
/// delegates, each pass in the order decided; then the new runners are queued and, last, the
/// runners of the ended runs finish.
struct WorkflowTransaction {
    /// An effect holds class references only (and one-byte announcements), so copying one is a
    /// few retains: a finish's result and a failure's error, existentials of any size, are in a
    /// ``WorkflowOutcomePayload``, made only for a finish with a result or a delegate.
    enum Effect {
        case announce(Announcement)
        /// A run of the task started: only for its event, so only noted when someone listens.
        case startRun(WorkflowTask)
        /// The finished, failed or cancelled task, with its delegate read when the change was
        /// decided (under the lock the change already holds).
        case finished(WorkflowTask, WorkflowOutcomePayload?)
        case failed(WorkflowTask, WorkflowFailurePayload)
        case cancelled(WorkflowTask, (any WorkflowTaskDelegate)?)
        case retried(WorkflowTask)
        case reset(WorkflowTask)
        /// A cancel reached a task whose state it did not change (a sub-workflow task passes it on).
        case cancelPassedOn(WorkflowTask)
        case workflowFinished
    }

    let workflow: Workflow
    private(set) var effects = WorkflowSmallList<Effect>()
    /// The runners made for the runs started, to add to the queue, and those of the runs ended,
    /// to finish.
    private var startedRuns = WorkflowSmallList<WorkflowRunOperation>()
    private var endedRuns = WorkflowSmallList<WorkflowRunOperation>()
    /// The event streams and listeners to tell, read under the lock at the end of the decisions
    /// (``Workflow/perform(_:)``); `nil` when nobody listens, which costs nothing more.
    var receivers: Receivers?
    /// The workflow's instrument, read once (one atomic load), and the task transitions to tell
    /// it, in the order they were made.
    private let instrument: (any OperationInstrument)?
    private var transitions: [WorkflowTaskEvent]?

    /// The event streams and listeners a change tells.
    struct Receivers {
        let streams: [AsyncStream<WorkflowEvent>.Continuation]
        let listeners: [@Sendable (WorkflowEvent) -> Void]
    }

    /// - Parameters:
    ///   - workflow: The workflow changed.
    ///   - instrument: Its instrument, read by the caller (reading it here, through the stored
    ///     reference, cost a retain and a release of the workflow, both on the runtime's slow
    ///     path since the tasks' weak references give a workflow a side table).
    init(workflow: Workflow, instrument: (any OperationInstrument)?) {
        self.workflow = workflow
        self.instrument = instrument
    }

    /// Notes a task's transition for the instrument, if there is one.
    private mutating func transitioned(
        _ task: WorkflowTask, from: WorkflowTaskState, to: WorkflowTaskState, error: (any Error)? = nil
    ) {
        guard instrument != nil else { return }
        let event = WorkflowTaskEvent(task: task, workflowName: workflow.name, from: from, to: to, error: error)
        if transitions == nil { transitions = [event] } else { transitions!.append(event) }
    }

    // MARK: Decisions, under the lock

    /// The events a whole-workflow call tells before any task changes.
    enum Announcement: UInt8 {
        case willStart, willCancel, willRetry, willReset

        var event: WorkflowEvent {
            switch self {
            case .willStart: .willStart
            case .willCancel: .willCancel
            case .willRetry: .willRetry
            case .willReset: .willReset
            }
        }
    }

    mutating func announce(_ event: Announcement) {
        effects.append(.announce(event))
    }

    mutating func workflowFinished() {
        effects.append(.workflowFinished)
    }

    /// Starts a run of `task` if it is ready; holds it instead while the workflow is suspended.
    mutating func start(_ task: WorkflowTask) {
        guard task.isIn(workflow) else { return }
        if workflow._isSuspended {
            if task.lifecycle.state == .ready && !task.isHeld {
                task.isHeld = true
                workflow.heldIndices.append(task.index)
            }
            return
        }
        guard let run = task.lifecycle.start() else { return }
        transitioned(task, from: .ready, to: .executing)
        workflow.executingCount += 1
        if let runner = workflow.queueRunLocked(task, run: run) { startedRuns.append(runner) }
        if !workflow.streams.isEmpty || !workflow.listeners.isEmpty { effects.append(.startRun(task)) }
    }

    /// Resumes the workflow: starts the held tasks that are still ready, in the order they were
    /// held.
    mutating func resume() {
        guard workflow._isSuspended else { return }
        workflow._isSuspended = false
        let held = workflow.heldIndices
        workflow.heldIndices = []
        for index in held {
            let task = workflow.tasks[index]
            guard task.isHeld else { continue }
            task.isHeld = false
            start(task)
        }
    }

    /// Finishes run `run` (the current one if `nil`) of `task`.
    mutating func finish(_ task: WorkflowTask, run: Int?, result: (any Sendable)?) {
        guard task.isIn(workflow), task.lifecycle.finish(run: run ?? task.lifecycle.run) else { return }
        transitioned(task, from: .executing, to: .finished)
        task._result = result
        task._error = nil
        task._finishTime = .now
        endRun(task)
        let delegate = task._delegate
        effects.append(.finished(
            task, result == nil && delegate == nil ? nil : WorkflowOutcomePayload(result: result, delegate: delegate)))
        enteredFinished(task)
    }

    /// Fails run `run` (the current one if `nil`) of `task`.
    mutating func fail(_ task: WorkflowTask, run: Int?, error: any Error) {
        guard task.isIn(workflow), task.lifecycle.fail(run: run ?? task.lifecycle.run) else { return }
        transitioned(task, from: .executing, to: .failed, error: error)
        task._error = error
        task._result = nil
        task._finishTime = .now
        workflow.failedCount += 1
        endRun(task)
        effects.append(.failed(task, WorkflowFailurePayload(error: error, delegate: task._delegate)))
    }

    /// Cancels the runs waiting for a runner (a runner was cancelled on the queue), with their
    /// dependents.
    mutating func cancelPendingRuns() {
        var tasks: [WorkflowTask] = []
        while let next = workflow.takePendingRunLocked() { tasks.append(next.task) }
        if !tasks.isEmpty { cancel(from: tasks) }
    }

    /// Cancels `roots` and all their dependents.
    mutating func cancel(from roots: [WorkflowTask]) {
        for task in closure(from: roots) {
            let previous = task.lifecycle.state
            let wasExecuting = previous == .executing
            guard task.lifecycle.cancel() else {
                effects.append(.cancelPassedOn(task))
                continue
            }
            transitioned(task, from: previous, to: .cancelled)
            if wasExecuting { endRun(task) }
            effects.append(.cancelled(task, task._delegate))
        }
    }

    /// Retries `roots` and all their dependents: each failed or cancelled one becomes pending, then
    /// ready and started if its prerequisites have finished.
    mutating func retry(from roots: [WorkflowTask]) {
        for task in closure(from: roots) {
            let previous = task.lifecycle.state
            guard task.lifecycle.retry() else { continue }
            transitioned(task, from: previous, to: .pending)
            if previous == .failed { workflow.failedCount -= 1 }
            clearOutcome(task)
            effects.append(.retried(task))
            if task.lifecycle.prerequisitesChanged(allFinished: task.unfinishedPrerequisites == 0) {
                transitioned(task, from: .pending, to: .ready)
                start(task)
            }
        }
    }

    /// Resets `roots` and all their dependents: each becomes ready if its prerequisites have
    /// finished, else pending. Nothing starts.
    mutating func reset(from roots: [WorkflowTask]) {
        for task in closure(from: roots) {
            // Every task the reset reaches forgets what it keeps across runs (an external
            // condition's fulfilment), also one with no state to reset.
            task.resetReachedLocked()
            // A start held by the workflow's suspension is forgotten: a reset task waits for
            // the next start.
            task.isHeld = false
            let previous = task.lifecycle.state
            guard task.lifecycle.reset() else { continue }
            transitioned(task, from: previous, to: .pending)
            switch previous {
            case .executing: endRun(task)
            case .finished: leftFinished(task)
            case .failed: workflow.failedCount -= 1
            case .pending, .ready, .cancelled: break
            }
            clearOutcome(task)
            if task.lifecycle.prerequisitesChanged(allFinished: task.unfinishedPrerequisites == 0) {
                transitioned(task, from: .pending, to: .ready)
            }
            effects.append(.reset(task))
        }
    }

    // MARK: Bookkeeping

    private mutating func clearOutcome(_ task: WorkflowTask) {
        task._result = nil
        task._error = nil
        task._finishTime = nil
    }

    /// `task` has just left executing (finished, failed, cancelled or reset).
    private mutating func endRun(_ task: WorkflowTask) {
        workflow.executingCount -= 1
        if let operation = task.runOperation {
            task.runOperation = nil
            if operation.endRunLocked() {
                endedRuns.append(operation)
                // Its runner is finished at the end of this change, even if the run's `main()`
                // has not returned yet: runs waiting get another runner now.
                if let replacement = workflow.runnerStoppedLocked(operation) { startedRuns.append(replacement) }
            }
        }
    }

    /// `task` has just finished: counts, the workflow's own finish, and the dependents whose last
    /// unfinished prerequisite it was, which start.
    private mutating func enteredFinished(_ task: WorkflowTask) {
        workflow.finishedCount += 1
        if task.dependentIndices.isEmpty {
            workflow.finishedSinkCount += 1
            if workflow.finishedSinkCount == workflow.sinkCount { workflowFinished() }
        }
        for index in task.dependentIndices {
            let dependent = workflow.tasks[index]
            dependent.unfinishedPrerequisites -= 1
            if dependent.unfinishedPrerequisites == 0 && dependent.lifecycle.prerequisitesChanged(allFinished: true) {
                transitioned(dependent, from: .pending, to: .ready)
                start(dependent)
            }
        }
    }

    /// `task` is no longer finished: its ready dependents become pending.
    private mutating func leftFinished(_ task: WorkflowTask) {
        workflow.finishedCount -= 1
        if task.dependentIndices.isEmpty { workflow.finishedSinkCount -= 1 }
        for index in task.dependentIndices {
            let dependent = workflow.tasks[index]
            dependent.unfinishedPrerequisites += 1
            if dependent.unfinishedPrerequisites == 1 && dependent.lifecycle.prerequisitesChanged(allFinished: false) {
                transitioned(dependent, from: .ready, to: .pending)
            }
        }
    }

    /// `roots` and every task that depends on them, directly or not, each once, breadth first:
    /// a task comes after the task through which it was first reached, but not necessarily after
    /// all its prerequisites (roots A and X, X → Y, A → B and Y → B give A, X, B, Y). The
    /// transitions do not depend on the order: they use the counts of unfinished prerequisites.
    private func closure(from roots: [WorkflowTask]) -> [WorkflowTask] {
        var visited = [Bool](repeating: false, count: workflow.tasks.count)
        var order: [WorkflowTask] = []
        for root in roots where root.isIn(workflow) && !visited[root.index] {
            visited[root.index] = true
            order.append(root)
        }
        var next = 0
        while next < order.count {
            for index in order[next].dependentIndices where !visited[index] {
                visited[index] = true
                order.append(workflow.tasks[index])
            }
            next += 1
        }
        return order
    }

    // MARK: Effects, without the lock

    func performEffects() {
        // The instrument first: the task transitions, in the order they were made.
        if let instrument, let transitions { for transition in transitions { instrument.record(transition) } }
        // Then every event of the transaction, in order: a hook or delegate that changes the
        // workflow again (second pass) then tells its own events after all of these, so the
        // stream stays in causal order. Then hooks and delegates, as Task.framework orders them;
        // runs start last, after the finish that made them ready has been told everywhere.
        if let receivers { tellEvents(to: receivers) }
        effects.forEachElement { effect in
            switch effect {
            case .finished(let task, let payload):
                let result = payload?.result
                task.didFinish(with: result)
                payload?.delegate?.task(task, didFinishWith: result)
            case .failed(let task, let payload):
                let error = payload.error
                task.didFail(with: error)
                payload.delegate?.task(task, didFailWith: error)
                workflow.delegate?.workflow(workflow, task: task, didFailWith: error)
            case .cancelled(let task, let delegate):
                task.didCancel()
                delegate?.taskDidCancel(task)
                workflow.delegate?.workflow(workflow, taskDidCancel: task)
            case .cancelPassedOn(let task):
                task.cancelPassedOn()
            case .retried(let task):
                task.didRetry()
            case .reset(let task):
                task.didReset()
            case .workflowFinished:
                workflow.delegate?.workflowDidFinish(workflow)
            case .announce, .startRun:
                break
            }
        }
        // New runners are added before the ended runs' runners finish, so the workflow's queue is
        // never empty in the middle of a workflow. They cannot be refused: each runner was just
        // made, is in no queue and nothing depends on it, so it closes no cycle (the workflow
        // orders its tasks itself). Several are added in one batch.
        if startedRuns.hasMoreThanOne {
            try? workflow.queue.addOperations(startedRuns.map { $0 as ConcurrentOperation }, waitUntilFinished: false)
        } else if let run = startedRuns.first {
            try? workflow.queue.addOperation(run)
        }
        // Only the runners of runs ended on another thread than the one running the run's
        // `main()`: the others go on to their next run (see WorkflowRunOperation).
        endedRuns.forEachElement { operation in operation.finish() }
        // Last, once the change's hooks and delegates have run (a failure retried by its
        // delegate is then no longer an outcome): resume the Swift tasks awaiting an outcome.
        resumeAwaiters()
    }

    /// Tells every event of the transaction to the streams and listeners, in order.
    private func tellEvents(to receivers: Receivers) {
        func tell(_ event: WorkflowEvent) {
            for stream in receivers.streams { stream.yield(event) }
            for listener in receivers.listeners { listener(event) }
        }
        for effect in effects {
            switch effect {
            case .announce(let announcement): tell(announcement.event)
            case .startRun(let task): tell(.taskStarted(task))
            case .finished(let task, let payload): tell(.taskFinished(task, result: payload?.result))
            case .failed(let task, let payload):
                tell(.taskFailed(task, error: payload.error))
            case .cancelled(let task, _): tell(.taskCancelled(task))
            case .retried(let task): tell(.taskRetried(task))
            case .reset(let task): tell(.taskReset(task))
            case .workflowFinished: tell(.workflowFinished)
            case .cancelPassedOn: break
            }
        }
    }

}

/// What a finish hands to its hooks, delegate and events: the run's result and the task's
/// delegate, read when the change was decided (a finish with neither has none).
final class WorkflowOutcomePayload {
    let result: (any Sendable)?
    let delegate: (any WorkflowTaskDelegate)?

    init(result: (any Sendable)?, delegate: (any WorkflowTaskDelegate)?) {
        self.result = result
        self.delegate = delegate
    }
}

/// What a failure hands to its hooks, delegates and events: the run's error and the task's
/// delegate, read when the change was decided.
final class WorkflowFailurePayload {
    let error: any Error
    let delegate: (any WorkflowTaskDelegate)?

    init(error: any Error, delegate: (any WorkflowTaskDelegate)?) {
        self.error = error
        self.delegate = delegate
    }
}

/// A list that keeps its first element inline: a change usually has one effect, one started run
/// and one ended run, and then makes no array.
struct WorkflowSmallList<Element>: Sequence {
    private(set) var first: Element?
    /// `nil` (not an empty array) until a second element comes: destroying a list then releases
    /// nothing more than its first element.
    private var rest: [Element]?

    var isEmpty: Bool { first == nil }
    var hasMoreThanOne: Bool { rest != nil }

    mutating func append(_ element: Element) {
        if first == nil {
            first = element
        } else if rest == nil {
            rest = [element]
        } else {
            rest!.append(element)
        }
    }

    func makeIterator() -> Iterator { Iterator(list: self) }

    /// Calls `body` with each element in order, without copying it out first (iterating copies
    /// each element, which for a ``WorkflowTransaction/Effect`` with a result is not cheap).
    @inline(__always)
    func forEachElement(_ body: (Element) -> Void) {
        guard let first else { return }
        body(first)
        guard let rest else { return }
        for index in rest.indices { body(rest[index]) }
    }

    struct Iterator: IteratorProtocol {
        let list: WorkflowSmallList
        var position = -1

        mutating func next() -> Element? {
            defer { position += 1 }
            if position < 0 { return list.first }
            guard let rest = list.rest else { return nil }
            return position < rest.count ? rest[position] : nil
        }
    }
}
