/// One change to a workflow: decided under the workflow's lock (the `mutating func`s), then
/// performed without it (``performEffects()``): first every event, then the hooks and
/// delegates, each pass in the order decided; then the new runners are queued and, last, the
/// runners of the ended runs finish.
struct WorkflowTransaction {
    /// An effect holds unretained references only (and one-byte announcements), so making,
    /// storing, copying and destroying one retains and releases nothing: a task is held by its
    /// workflow for good (`tasks`; a task never leaves it), which the transaction's caller keeps
    /// alive; a payload by `kept`. A finish's result and a
    /// failure's error, existentials of any size, are in a ``WorkflowOutcomePayload`` or
    /// ``WorkflowFailurePayload``, made only for a finish with a result or a delegate, a failure,
    /// or a cancel with a delegate.
    enum Effect {
        case announce(Announcement)
        /// A run of the task started: only for its event, so only noted when someone listens.
        case startRun(Unmanaged<WorkflowTask>)
        /// The finished, failed or cancelled task, with its delegate read when the change was
        /// decided (under the lock the change already holds).
        case finished(Unmanaged<WorkflowTask>, Unmanaged<WorkflowOutcomePayload>?)
        case failed(Unmanaged<WorkflowTask>, Unmanaged<WorkflowFailurePayload>)
        /// The payload carries the task's delegate (no result), if it has one.
        case cancelled(Unmanaged<WorkflowTask>, Unmanaged<WorkflowOutcomePayload>?)
        case retried(Unmanaged<WorkflowTask>)
        case reset(Unmanaged<WorkflowTask>)
        /// A cancel reached a task whose state it did not change (a sub-workflow task passes it on).
        case cancelPassedOn(Unmanaged<WorkflowTask>)
        case workflowFinished
    }

    /// The workflow changed, neither retained nor released: a transaction lives only inside
    /// ``Workflow/perform(_:)``, whose caller keeps the workflow alive. Each method reaches it
    /// through ``with(_:_:)``, at +0: a retain and a release of a workflow both take the
    /// runtime's slow path (its tasks' weak references give it a side table), and a stored
    /// strong or `unowned(unsafe)` reference costs a pair per transaction or per use.
    let workflowReference: Unmanaged<Workflow>
    private(set) var effects = WorkflowSmallList<Effect>()
    /// The runners made for the runs started, to add to the queue.
    private var startedRuns = WorkflowSmallList<ConcurrentOperation>()
    /// The runner whose run this change ended on the runner's own thread: it is handed its next
    /// run at the end of the change (``Workflow/perform(_:)``). `execute()` keeps it alive.
    var freedRunner: Unmanaged<WorkflowRunOperation>?
    /// Whether a run this change started counts on `freedRunner` to take it.
    private var freedRunnerTakesOne = false
    /// The runner whose run's `main()` runs on the thread making the change, if the caller knows
    /// it (``Workflow/perform(onRunner:_:)``): a run it executes ends on its own thread, and any
    /// other runner's run on another's.
    var runnerOnThread: Unmanaged<WorkflowRunOperation>?
    /// The change's ``CoarseClock`` stamp, 0 until read: read before the lock for a change on a
    /// runner's thread (for the run handed to it), or at the first run the change starts. One
    /// stamp serves every run the change starts or hands over: the change is one instant to
    /// anyone reading the stamps (under the same lock), and a start of many tasks reads the clock
    /// once.
    var stamp: UInt32 = 0
    /// The workflow's instrument, read once (one atomic load).
    private let instrument: (any OperationInstrument)?
    /// What many changes do without, in one optional: destroying a transaction without any of it
    /// is one test, not a release per field.
    private var rare: Rare?

    private struct Rare {
        /// The runners of the runs ended on another thread than theirs, to finish.
        var endedRuns = WorkflowSmallList<WorkflowRunOperation>()
        /// The payloads the effects refer to, kept until the transaction ends.
        var kept = WorkflowSmallList<AnyObject>()
        /// See ``WorkflowTransaction/receivers``.
        var receivers: Receivers?
        /// The task transitions to tell the instrument, in the order they were made.
        var transitions: [WorkflowTaskEvent]?
    }

    /// The event streams and listeners to tell, read under the lock at the end of the decisions
    /// (``Workflow/perform(_:)``); `nil` when nobody listens, which costs nothing more.
    var receivers: Receivers? {
        get { rare?.receivers }
        set {
            if rare == nil { rare = Rare() }
            rare!.receivers = newValue
        }
    }

    /// `rare`, made if it was not.
    private var madeRare: Rare {
        get { rare ?? Rare() }
        _modify {
            if rare == nil { rare = Rare() }
            yield &rare!
        }
    }

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
        workflowReference = Unmanaged.passUnretained(workflow)
        self.instrument = instrument
    }

    /// Calls `body` with the workflow of `reference` (the transaction's `workflowReference`,
    /// copied out first so that `body` may change the transaction), at +0.
    @inline(__always)
    static func with<Result>(
        _ reference: Unmanaged<Workflow>, _ body: (Workflow) throws -> Result
    ) rethrows -> Result {
        try reference._withUnsafeGuaranteedRef(body)
    }

    /// Keeps `payload` until the transaction ends, for an effect to refer to it unretained.
    private mutating func keep<Payload: AnyObject>(_ payload: Payload) -> Unmanaged<Payload> {
        madeRare.kept.append(payload)
        return Unmanaged.passUnretained(payload)
    }

    /// Notes a task's transition for the instrument, if there is one.
    @inline(__always)
    private mutating func transitioned(
        _ task: WorkflowTask, from: WorkflowTaskState, to: WorkflowTaskState, error: (any Error)? = nil
    ) {
        guard instrument != nil else { return }
        noteTransition(task, from: from, to: to, error: error)
    }

    /// Notes a task's transition for the instrument (kept out of line: most changes have none).
    @inline(never)
    private mutating func noteTransition(
        _ task: WorkflowTask, from: WorkflowTaskState, to: WorkflowTaskState, error: (any Error)?
    ) {
        let name = Self.with(workflowReference) { $0.name }
        let event = WorkflowTaskEvent(task: task, workflowName: name, from: from, to: to, error: error)
        if madeRare.transitions == nil { madeRare.transitions = [event] } else { madeRare.transitions!.append(event) }
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
        Self.with(workflowReference) { workflow in
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
            // The first run started by a change that freed a runner on its thread goes to that
            // runner (``Workflow/perform(onRunner:_:)``), not to a new one; if the runner cannot
            // take it, the runner stops and is replaced, since a run waits.
            let runnerFreed = freedRunner != nil && !freedRunnerTakesOne
            if runnerFreed { freedRunnerTakesOne = true }
            // The change's stamp (see `stamp`).
            if stamp == 0 { stamp = CoarseClock.stamp() }
            if let runner = workflow.queueRunLocked(task, run: run, stamp: stamp, mayMakeRunner: !runnerFreed) {
                startedRuns.append(runner)
            }
            if !workflow.streams.isEmpty || !workflow.listeners.isEmpty {
                effects.append(.startRun(Unmanaged.passUnretained(task)))
            }
        }
    }

    /// Resumes the workflow: starts the held tasks that are still ready, in the order they were
    /// held.
    mutating func resume() {
        Self.with(workflowReference) { workflow in
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
    }

    /// Finishes run `run` (the current one if `nil`) of `task`.
    /// `now`: the finish time, read by the caller before the lock, so that the clock is not read
    /// with the lock held.
    mutating func finish(_ task: WorkflowTask, run: Int?, result: (any Sendable)?, now: WorkflowInstant = .now) {
        Self.with(workflowReference) { workflow in
            guard task.isIn(workflow), task.lifecycle.finish(run: run ?? task.lifecycle.run) else { return }
            transitioned(task, from: .executing, to: .finished)
            // An executing task has no outcome (a finish or failure sets it, and only a reset or a
            // retry, which clear it, lead back to executing): a nil result is not assigned, since
            // assigning an optional existential goes through its type's value witnesses.
            assert(task._result == nil && task._error == nil, "an executing task has no outcome")
            if result != nil { task._result = result }
            task._finishTime = now
            endRun(task)
            let delegate = task._delegate
            let payload = result == nil && delegate == nil
                ? nil : keep(WorkflowOutcomePayload(result: result, delegate: delegate))
            effects.append(.finished(Unmanaged.passUnretained(task), payload))
            enteredFinished(task)
        }
    }

    /// Fails run `run` (the current one if `nil`) of `task`.
    mutating func fail(_ task: WorkflowTask, run: Int?, error: any Error, now: WorkflowInstant = .now) {
        Self.with(workflowReference) { workflow in
            guard task.isIn(workflow), task.lifecycle.fail(run: run ?? task.lifecycle.run) else { return }
            transitioned(task, from: .executing, to: .failed, error: error)
            assert(task._result == nil && task._error == nil, "an executing task has no outcome")
            task._error = error
            task._finishTime = now
            workflow.failedCount += 1
            endRun(task)
            let payload = keep(WorkflowFailurePayload(error: error, delegate: task._delegate))
            effects.append(.failed(Unmanaged.passUnretained(task), payload))
        }
    }

    /// Cancels the runs waiting for a runner (a runner was cancelled on the queue), with their
    /// dependents.
    mutating func cancelPendingRuns() {
        let tasks = Self.with(workflowReference) { workflow -> [WorkflowTask] in
            var tasks: [WorkflowTask] = []
            while let next = workflow.takePendingRunLocked() { tasks.append(next.task.takeUnretainedValue()) }
            return tasks
        }
        if !tasks.isEmpty { cancel(from: tasks) }
    }

    /// Cancels `roots` and all their dependents.
    mutating func cancel(from roots: [WorkflowTask]) {
        for task in closure(from: roots) {
            let previous = task.lifecycle.state
            let wasExecuting = previous == .executing
            guard task.lifecycle.cancel() else {
                effects.append(.cancelPassedOn(Unmanaged.passUnretained(task)))
                continue
            }
            transitioned(task, from: previous, to: .cancelled)
            if wasExecuting { endRun(task) }
            let payload = task._delegate.map { keep(WorkflowOutcomePayload(result: nil, delegate: $0)) }
            effects.append(.cancelled(Unmanaged.passUnretained(task), payload))
        }
    }

    /// Retries `roots` and all their dependents: each failed or cancelled one becomes pending, then
    /// ready and started if its prerequisites have finished.
    mutating func retry(from roots: [WorkflowTask]) {
        Self.with(workflowReference) { workflow in
            for task in closure(from: roots) {
                let previous = task.lifecycle.state
                guard task.lifecycle.retry() else { continue }
                transitioned(task, from: previous, to: .pending)
                if previous == .failed { workflow.failedCount -= 1 }
                clearOutcome(task)
                effects.append(.retried(Unmanaged.passUnretained(task)))
                if task.lifecycle.prerequisitesChanged(allFinished: task.unfinishedPrerequisites == 0) {
                    transitioned(task, from: .pending, to: .ready)
                    start(task)
                }
            }
        }
    }

    /// Resets `roots` and all their dependents: each becomes ready if its prerequisites have
    /// finished, else pending. Nothing starts.
    mutating func reset(from roots: [WorkflowTask]) {
        Self.with(workflowReference) { workflow in
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
                effects.append(.reset(Unmanaged.passUnretained(task)))
            }
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
        Self.with(workflowReference) { workflow in
            workflow.executingCount -= 1
            if let runner = task.runOperation {
                task.runOperation = nil
                let onThread = runnerOnThread.map { $0.toOpaque() == runner.toOpaque() }
                switch runner._withUnsafeGuaranteedRef({ $0.endRunLocked(onThread: onThread) }) {
                case .finishRunner:
                    let operation = runner.takeUnretainedValue()
                    madeRare.endedRuns.append(operation)
                    // Its runner is finished at the end of this change, even if the run's
                    // `main()` has not returned yet: runs waiting get another runner now.
                    if let replacement = workflow.runnerStoppedLocked(operation) { startedRuns.append(replacement) }
                case .onRunner:
                    // Its next run is taken at the end of the change, under the same lock.
                    freedRunner = runner
                case .none:
                    break
                }
            }
        }
    }

    /// `task` has just finished: counts, the workflow's own finish, and the dependents whose last
    /// unfinished prerequisite it was, which start.
    private mutating func enteredFinished(_ task: WorkflowTask) {
        Self.with(workflowReference) { workflow in
            workflow.finishedCount += 1
            if task.dependentIndices.isEmpty {
                workflow.finishedSinkCount += 1
                if workflow.finishedSinkCount == workflow.sinkCount { workflowFinished() }
            }
            task.dependentIndices.forEachIndex { index in
                let dependent = workflow.tasks[index]
                dependent.unfinishedPrerequisites -= 1
                if dependent.unfinishedPrerequisites == 0 && dependent.lifecycle.prerequisitesChanged(allFinished: true) {
                    transitioned(dependent, from: .pending, to: .ready)
                    start(dependent)
                }
            }
        }
    }

    /// `task` is no longer finished: its ready dependents become pending.
    private mutating func leftFinished(_ task: WorkflowTask) {
        Self.with(workflowReference) { workflow in
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
    }

    /// `roots` and every task that depends on them, directly or not, each once, breadth first:
    /// a task comes after the task through which it was first reached, but not necessarily after
    /// all its prerequisites (roots A and X, X → Y, A → B and Y → B give A, X, B, Y). The
    /// transitions do not depend on the order: they use the counts of unfinished prerequisites.
    private func closure(from roots: [WorkflowTask]) -> [WorkflowTask] {
        return Self.with(workflowReference) { workflow in
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
    }

    // MARK: Effects, without the lock

    func performEffects() {
        Self.with(workflowReference) { workflow in
            // The instrument first: the task transitions, in the order they were made.
            if let instrument, let transitions = rare?.transitions {
                for transition in transitions { instrument.record(transition) }
            }
            // Then every event of the transaction, in order: a hook or delegate that changes the
            // workflow again (second pass) then tells its own events after all of these, so the
            // stream stays in causal order. Then hooks and delegates, as Task.framework orders them;
            // runs start last, after the finish that made them ready has been told everywhere.
            if let receivers { tellEvents(to: receivers) }
            effects.forEachElement { effect in
                switch effect {
                case .finished(let task, let payload):
                    task._withUnsafeGuaranteedRef { task in
                        guard let payload else { return task.didFinish(with: WorkflowOutcomePayload.noResult) }
                        payload._withUnsafeGuaranteedRef { payload in
                            task.didFinish(with: payload.result)
                            payload.delegate?.task(task, didFinishWith: payload.result)
                        }
                    }
                case .failed(let task, let payload):
                    task._withUnsafeGuaranteedRef { task in
                        payload._withUnsafeGuaranteedRef { payload in
                            task.didFail(with: payload.error)
                            payload.delegate?.task(task, didFailWith: payload.error)
                            workflow.delegate?.workflow(workflow, task: task, didFailWith: payload.error)
                        }
                    }
                case .cancelled(let task, let payload):
                    task._withUnsafeGuaranteedRef { task in
                        task.didCancel()
                        payload?._withUnsafeGuaranteedRef { $0.delegate?.taskDidCancel(task) }
                        workflow.delegate?.workflow(workflow, taskDidCancel: task)
                    }
                case .cancelPassedOn(let task):
                    task._withUnsafeGuaranteedRef { $0.cancelPassedOn() }
                case .retried(let task):
                    task._withUnsafeGuaranteedRef { $0.didRetry() }
                case .reset(let task):
                    task._withUnsafeGuaranteedRef { $0.didReset() }
                case .workflowFinished:
                    workflow.delegate?.workflowDidFinish(workflow)
                case .announce, .startRun:
                    break
                }
            }
            // New runners are added before the ended runs' runners finish, so the workflow's queue
            // is never empty in the middle of a workflow. They cannot be refused: each runner was
            // just made, is in no queue and nothing depends on it, so it closes no cycle (the
            // workflow orders its tasks itself). Several are added in one batch.
            if let runs = startedRuns.many {
                try? workflow.queue.addOperations(runs, waitUntilFinished: false)
            } else if let run = startedRuns.first {
                try? workflow.queue.addOperation(run)
            }
            // Only the runners of runs ended on another thread than the one running the run's
            // `main()`: the others go on to their next run (see WorkflowRunOperation).
            rare?.endedRuns.forEachElement { operation in operation.finish() }
            // Last, once the change's hooks and delegates have run (a failure retried by its
            // delegate is then no longer an outcome): resume the Swift tasks awaiting an outcome.
            if WorkflowAwaiting.anyRegistered { resumeAwaiters() }
        }
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
            case .startRun(let task): tell(.taskStarted(task.takeUnretainedValue()))
            case .finished(let task, let payload):
                tell(.taskFinished(task.takeUnretainedValue(), result: payload?.takeUnretainedValue().result))
            case .failed(let task, let payload):
                tell(.taskFailed(task.takeUnretainedValue(), error: payload.takeUnretainedValue().error))
            case .cancelled(let task, _): tell(.taskCancelled(task.takeUnretainedValue()))
            case .retried(let task): tell(.taskRetried(task.takeUnretainedValue()))
            case .reset(let task): tell(.taskReset(task.takeUnretainedValue()))
            case .workflowFinished: tell(.workflowFinished)
            case .cancelPassedOn: break
            }
        }
    }

}

/// What a finish hands to its hooks, delegate and events: the run's result and the task's
/// delegate, read when the change was decided (a finish with neither has none); for a cancel,
/// the task's delegate only.
final class WorkflowOutcomePayload {
    /// `nil`, as a constant: passing a literal `nil` makes a temporary the caller then destroys
    /// through the value witnesses of `(any Sendable)?`.
    static let noResult: (any Sendable)? = nil

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
    /// Every element, the first included, once there are two or more; `nil` (not an empty array)
    /// until then: destroying a list then releases nothing more than its first element, and a
    /// list of many hands its array over as it is (``many``).
    private var all: [Element]?

    var isEmpty: Bool { first == nil }
    /// Every element, in order, if there are more than one; `nil` otherwise.
    var many: [Element]? { all }

    mutating func append(_ element: Element) {
        if first == nil {
            first = element
        } else if all == nil {
            all = [first!, element]
        } else {
            all!.append(element)
        }
    }

    func makeIterator() -> Iterator { Iterator(list: self) }

    /// Calls `body` with each element in order, without making an iterator (which copies the
    /// list, retaining its array).
    @inline(__always)
    func forEachElement(_ body: (Element) -> Void) {
        if let all {
            for index in all.indices { body(all[index]) }
        } else if let first {
            body(first)
        }
    }

    struct Iterator: IteratorProtocol {
        let list: WorkflowSmallList
        var position = 0

        mutating func next() -> Element? {
            defer { position += 1 }
            guard let all = list.all else { return position == 0 ? list.first : nil }
            return position < all.count ? all[position] : nil
        }
    }
}
