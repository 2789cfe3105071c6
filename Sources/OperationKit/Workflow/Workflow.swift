import Dispatch
import Synchronization

/// A re-runnable graph of ``WorkflowTask``s with prerequisites — Task.framework's `TSKWorkflow`.
///
/// ```swift
/// let workflow = Workflow(name: "sign in")
/// try workflow.add(fetchToken)
/// try workflow.add(fetchProfile, prerequisites: [fetchToken])
/// try workflow.add(fetchSettings, prerequisites: [fetchToken])
/// workflow.start()
/// ```
///
/// Tasks run as soon as their prerequisites have finished successfully, independent ones
/// concurrently, on ``queue``: the workflow's runners, operations on that queue, take the started
/// runs in the order they started, each holding one of its places while it executes a run (see
/// `Documentation/Workflows.md`, "Runs share runners"). A failed task stops its dependents (they
/// stay pending); a cancelled one cancels them. The workflow has finished when every task without
/// dependents has finished. It can be cancelled, retried, reset and started again.
///
/// Every method may be called from any thread. Each workflow has one lock for its state and its
/// tasks' (a sub-workflow has its own), and no code of yours runs under it: hooks, delegates and events are called on the thread that
/// caused the change, after it. Tasks hold their workflow weakly; its runners hold it while they
/// are in its queue, and a run keeps its runner until it ends, so a running workflow stays alive.
public final class Workflow: @unchecked Sendable {  // mutable state is protected by `lock`
    /// A name for logs, errors and diagrams.
    public let name: String
    /// The queue the tasks' runs execute on, taken by the workflow's runners: operations on it
    /// named "runs of" and the workflow's name, each holding one place while it executes a run.
    /// Suspending the queue holds back the runs that have not begun; its limit bounds the runs in
    /// progress; cancelling its operations cancels the runs waiting for a runner.
    public let queue: ConcurrentOperationQueue

    /// The lock of the workflow's state and of its tasks' (WorkflowLock.swift).
    let lock = WorkflowLock()

    // protected by lock (the fields every change touches skip the dynamic exclusivity check, as
    // the task's do: see WorkflowTask)
    @exclusivity(unchecked) var tasks: [WorkflowTask] = []
    @exclusivity(unchecked) var finishedCount = 0
    @exclusivity(unchecked) var failedCount = 0
    @exclusivity(unchecked) var sinkCount = 0
    @exclusivity(unchecked) var finishedSinkCount = 0
    weak var _delegate: (any WorkflowDelegate)?
    @exclusivity(unchecked) var streams: [Int: AsyncStream<WorkflowEvent>.Continuation] = [:]
    var nextStreamID = 0
    /// Internal listeners (a sub-workflow task listening to its sub-workflow).
    @exclusivity(unchecked) var listeners: [Int: @Sendable (WorkflowEvent) -> Void] = [:]
    /// How many tasks are executing: 0 means nothing can change without a call from outside.
    @exclusivity(unchecked) var executingCount = 0
    /// Whether the workflow is suspended (``isSuspended``), and the indices of the tasks whose
    /// start it holds, in the order they were held (a task may appear again after a reset; its
    /// `isHeld` flag says whether it is still held).
    @exclusivity(unchecked) var _isSuspended = false
    @exclusivity(unchecked) var heldIndices: [Int] = []
    /// The started runs waiting for a runner, in the order they were started; those before
    /// `pendingHead` were taken (Workflow+Runners.swift).
    @exclusivity(unchecked) var pendingRuns: [PendingRun] = []
    @exclusivity(unchecked) var pendingHead = 0
    /// The runners taking runs: queued, or executing runs one after another (a runner that keeps
    /// a run whose `main()` returned without ending it no longer counts).
    @exclusivity(unchecked) var drainers = 0
    /// Swift tasks awaiting the workflow's outcome (WorkflowAwaiting.swift).
    var awaiters = WorkflowAwaiters<WorkflowOutcome>()
    /// The ``instrument`` (Observability/OperationInstrument+Telling.swift).
    let instrumentSlot = InstrumentSlot(OperationInstrumentation.default)
    /// The stall watchdog, while one is on (see `Workflow+Snapshot`).
    var _stallWatchdog: StallWatchdog?
    /// The broadcaster of the tasks' aggregate progress, made when it is first asked for, and the
    /// version of the last value computed (Workflow+Progress.swift).
    var _progressBroadcaster: ProgressBroadcaster?
    var progressVersion: UInt64 = 0
    /// Whether `_progressBroadcaster` was made: read without the lock.
    let followsProgress = Atomic<Bool>(false)

    /// Creates a workflow.
    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - queue: The queue the tasks run on; by default a new one named `Workflow.<name>`, with
    ///     the default concurrency limit.
    public init(name: String = "Workflow", queue: ConcurrentOperationQueue? = nil) {
        self.name = name
        self.queue = queue ?? ConcurrentOperationQueue(name: "Workflow.\(name)")
        lock.workflow = self
    }

    deinit {
        for continuation in streams.values { continuation.finish() }
    }

    // MARK: Building

    /// Adds `task` with its prerequisites. Keyed prerequisites are prerequisites too; their
    /// results can be read by key (``WorkflowTask/prerequisiteResult(forKey:)``).
    ///
    /// A task whose prerequisites have not all finished becomes pending; otherwise it stays ready,
    /// and does not start by itself. Since prerequisites must already be in the workflow and the
    /// task must not, no cycle can be built. May be called at any time, from any thread.
    ///
    /// - Parameters:
    ///   - task: The task to add; it must be in no workflow.
    ///   - prerequisites: Tasks of this workflow that must finish before `task` runs. A task
    ///     given twice counts once.
    ///   - keyedPrerequisites: More prerequisites, each under a key by which `task` can read its
    ///     result.
    /// - Throws: In the order checked, ``OperationError/Code-swift.struct/missingPrerequisiteKeys``
    ///   if a key of the task's ``WorkflowTask/requiredPrerequisiteKeys`` has no keyed
    ///   prerequisite; ``OperationError/Code-swift.struct/dependencyCycle`` if the task is its own
    ///   prerequisite; ``OperationError/Code-swift.struct/taskAlreadyInWorkflow`` if the task has
    ///   been added to a workflow (this one or another, even one since released);
    ///   ``OperationError/Code-swift.struct/prerequisiteNotInWorkflow`` if a prerequisite was not
    ///   added to this workflow first. Nothing was added.
    public func add(
        _ task: WorkflowTask,
        prerequisites: [WorkflowTask] = [],
        keyedPrerequisites: [String: WorkflowTask] = [:]
    ) throws(OperationError) {
        if let missing = task.missingPrerequisiteKeys(in: keyedPrerequisites) {
            throw OperationError(.missingPrerequisiteKeys, operations: [task.name],
                                 "missing keyed prerequisites: \(missing.sorted().joined(separator: ", "))")
        }
        // Without keyed prerequisites the array given is used as it is (borrowed, not copied).
        if keyedPrerequisites.isEmpty {
            try add(task, all: prerequisites, keyed: nil)
        } else {
            try add(task, all: prerequisites + keyedPrerequisites.sorted { $0.key < $1.key }.map(\.value),
                    keyed: keyedPrerequisites)
        }
    }

    /// `add(_:prerequisites:keyedPrerequisites:)` once the keys are checked: `all` holds every
    /// prerequisite, the keyed ones (`keyed`, `nil` if none) last.
    private func add(_ task: WorkflowTask, all: [WorkflowTask], keyed: [String: WorkflowTask]?) throws(OperationError) {
        if all.withUnsafeBufferPointer({ Workflow.firstIndex(in: $0, where: { $0 === task }) }) != nil {
            throw OperationError(.dependencyCycle, operations: [task.name, task.name], "a task cannot be its own prerequisite")
        }
        let (refusal, becamePending): (OperationError?, Bool) = lock.withLock {
            // The task moves under this workflow's lock (which is held) unless it is in a
            // workflow already; from then on this lock guards its fields.
            var stranger: WorkflowTask?
            // Both loops over the prerequisites go through the array's buffer, borrowing each
            // element: iterating the array, or indexing it, retains and releases every element
            // once more per edge.
            let moved = task.lockPointer.move(to: lock) {
                if let position = all.withUnsafeBufferPointer({ Workflow.firstIndex(in: $0, where: { !$0.isIn(self) }) }) {
                    stranger = all[position]
                }
                return stranger == nil
            }
            if let stranger {
                return (OperationError(.prerequisiteNotInWorkflow, operations: [task.name, stranger.name],
                                       "a prerequisite must be added to \(name) first"), false)
            }
            if !moved {
                return (OperationError(.taskAlreadyInWorkflow, operations: [task.name], "the task is already in a workflow"), false)
            }
            task.index = tasks.count
            tasks.append(task)
            // A prerequisite given twice counts once: the second time, this task is already its
            // last dependent.
            // The indices go straight into the task's (empty) list: a list built apart and then
            // assigned cost a retain and a release even when empty.
            let index = task.index
            task.prerequisiteIndices.reserveCapacity(all.count)
            var unfinished = 0
            var sinksLost = 0
            var finishedSinksLost = 0
            all.withUnsafeBufferPointer { buffer in
                for position in buffer.indices {
                    Unmanaged.passUnretained(buffer[position])._withUnsafeGuaranteedRef { prerequisite in
                        let (appended, wasSink) = prerequisite.dependentIndices.appendUnlessLast(index)
                        guard appended else { return }
                        task.prerequisiteIndices.append(prerequisite.index)
                        let finished = prerequisite.lifecycle.state == .finished
                        if wasSink {
                            // It stops being a sink.
                            sinksLost += 1
                            if finished { finishedSinksLost += 1 }
                        }
                        if !finished { unfinished += 1 }
                    }
                }
            }
            sinkCount -= sinksLost
            finishedSinkCount -= finishedSinksLost
            task.unfinishedPrerequisites = unfinished
            if let keyed { task.keyedPrerequisiteIndices = keyed.mapValues(\.index) }
            sinkCount += 1
            return (nil, task.lifecycle.prerequisitesChanged(allFinished: task.unfinishedPrerequisites == 0))
        }
        if let refusal { throw refusal }
        progressChanged()
        if becamePending, let instrument = instrumentSlot.current { recordBecamePending(task, to: instrument) }
    }

    /// Tells `instrument` that `task`, just added, became pending (kept out of line: the event's
    /// layout is known only at run time, which every add paid for otherwise).
    @inline(never)
    private func recordBecamePending(_ task: WorkflowTask, to instrument: any OperationInstrument) {
        instrument.record(WorkflowTaskEvent(task: task, workflowName: name, from: .ready, to: .pending))
    }

    /// The position of the first task of `buffer` for which `predicate` holds, each borrowed
    /// (neither retained nor released).
    @inline(__always)
    static func firstIndex(in buffer: UnsafeBufferPointer<WorkflowTask>, where predicate: (WorkflowTask) -> Bool) -> Int? {
        for position in buffer.indices
        where Unmanaged.passUnretained(buffer[position])._withUnsafeGuaranteedRef(predicate) {
            return position
        }
        return nil
    }

    // MARK: Reading

    /// The tasks, in the order they were added.
    public var allTasks: [WorkflowTask] { lock.withLock { tasks } }
    /// The tasks without prerequisites.
    public var tasksWithNoPrerequisites: [WorkflowTask] {
        lock.withLock { tasks.filter { $0.prerequisiteIndices.isEmpty } }
    }
    /// The tasks without dependents: the workflow has finished when they all have.
    public var tasksWithNoDependents: [WorkflowTask] {
        lock.withLock { tasks.filter { $0.dependentIndices.isEmpty } }
    }
    /// The prerequisites of `task`, keyed ones included: the unkeyed ones in the order given,
    /// then the keyed ones by key, each task once.
    /// - Parameter task: A task of this workflow.
    /// - Returns: Its prerequisites; empty if it has none or is not in this workflow.
    public func prerequisites(of task: WorkflowTask) -> [WorkflowTask] {
        lock.withLock { task.isIn(self) ? task.prerequisiteIndices.map { tasks[$0] } : [] }
    }
    /// The keyed prerequisites of `task`.
    /// - Parameter task: A task of this workflow.
    /// - Returns: Its keyed prerequisites by key; empty if it has none or is not in this workflow.
    public func keyedPrerequisites(of task: WorkflowTask) -> [String: WorkflowTask] {
        lock.withLock { task.isIn(self) ? task.keyedPrerequisiteIndices.mapValues { tasks[$0] } : [:] }
    }
    /// The tasks that have `task` as a prerequisite, in the order they were added.
    /// - Parameter task: A task of this workflow.
    /// - Returns: Its direct dependents; empty if it has none or is not in this workflow.
    public func dependents(of task: WorkflowTask) -> [WorkflowTask] {
        lock.withLock { task.isIn(self) ? task.dependentIndices.map { tasks[$0] } : [] }
    }
    /// Whether some task is not finished.
    public var hasUnfinishedTasks: Bool { lock.withLock { finishedCount < tasks.count } }
    /// Whether some task is failed.
    public var hasFailedTasks: Bool { lock.withLock { failedCount > 0 } }
    /// Whether every task without dependents has finished (an empty workflow has).
    public var isFinished: Bool { lock.withLock { finishedSinkCount == sinkCount } }

    /// The workflow's delegate, held weakly. It is told on the thread that caused the change,
    /// after the workflow's events, the task's hook and the task's delegate, with no lock held.
    public var delegate: (any WorkflowDelegate)? {
        get { lock.withLock { _delegate } }
        set { lock.withLock { _delegate = newValue } }
    }

    /// A new stream of the workflow's events, from now on; each read makes another stream, and
    /// every stream gets every event. It ends when the workflow is released or the consumer stops;
    /// events are buffered without limit.
    ///
    /// Events are yielded on the thread that caused them, all the events of one change before its
    /// hooks and delegates. They come in the order they were decided, and a change made from a
    /// hook or delegate tells its events after those of the change that called it; but changes
    /// made on different threads at the same time may interleave — with two prerequisites
    /// finishing together, the dependent's start can come before the other prerequisite's
    /// finish.
    public var events: AsyncStream<WorkflowEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: WorkflowEvent.self)
        let id = lock.withLock {
            nextStreamID += 1
            streams[nextStreamID] = continuation
            return nextStreamID
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.withLock { self.streams.removeValue(forKey: id) }
        }
        return stream
    }

    // MARK: Control

    /// Tells ``WorkflowEvent/willStart``, then starts every ready task — at first the tasks
    /// without prerequisites; the others start as their prerequisites finish. A task that was
    /// reset while its prerequisites stayed finished is ready, and starts too. While the
    /// workflow ``isSuspended``, the ready tasks are held instead: they stay ready and start when
    /// it is resumed.
    ///
    /// An empty workflow finishes at once (``WorkflowDelegate/workflowDidFinish(_:)`` and
    /// ``WorkflowEvent/workflowFinished``). A workflow whose tasks have all finished does nothing
    /// more, and does not report its finish again. The events and delegates are called on the
    /// calling thread, before this returns.
    public func start() {
        perform { transaction in
            transaction.announce(.willStart)
            if tasks.isEmpty {
                transaction.workflowFinished()
                return
            }
            // Each task borrowed from the array's buffer (iterating the array retains and releases
            // every task); `tasks` does not change meanwhile: starting adds no task.
            tasks.withUnsafeBufferPointer { buffer in
                for position in buffer.indices {
                    Unmanaged.passUnretained(buffer[position])._withUnsafeGuaranteedRef { task in
                        if task.lifecycle.state == .ready { transaction.start(task) }
                    }
                }
            }
        }
    }

    /// Tells ``WorkflowEvent/willCancel``, then cancels every pending, ready or executing task
    /// (``WorkflowTask/cancel()`` on each task without prerequisites, which reaches the others).
    /// Finished and failed tasks keep their state.
    public func cancel() {
        perform { transaction in
            transaction.announce(.willCancel)
            transaction.cancel(from: tasks.filter { $0.prerequisiteIndices.isEmpty })
        }
    }

    /// Tells ``WorkflowEvent/willRetry``, then retries every failed or cancelled task
    /// (``WorkflowTask/retry()`` on each task without prerequisites, which reaches the others):
    /// those whose prerequisites have finished start at once, the others when their
    /// prerequisites finish.
    public func retry() {
        perform { transaction in
            transaction.announce(.willRetry)
            transaction.retry(from: tasks.filter { $0.prerequisiteIndices.isEmpty })
        }
    }

    /// Tells ``WorkflowEvent/willReset``, then resets every task that is not pending
    /// (``WorkflowTask/reset()`` on each task without prerequisites, which reaches the others):
    /// results, errors and finish times are cleared, the tasks without prerequisites become
    /// ready and the others pending. Nothing starts until ``start()``.
    public func reset() {
        perform { transaction in
            transaction.announce(.willReset)
            transaction.reset(from: tasks.filter { $0.prerequisiteIndices.isEmpty })
        }
    }

    /// Whether the workflow holds back the start of its tasks, like `OperationQueue.isSuspended`.
    /// Readable and writable from any thread, at any time; `false` at first.
    ///
    /// While suspended, a task that would start — by ``start()``, ``WorkflowTask/start()``, a
    /// ``retry()``, or its last prerequisite finishing — is held: it stays
    /// ``WorkflowTaskState/ready`` and no run is queued. Runs already executing go on, and their
    /// finish releases their dependents into the held set. Cancelling a held task cancels it (it
    /// will not start); resetting it forgets the start (it waits for the next ``start()``); a
    /// retried task whose prerequisites have finished is held. An empty workflow started while
    /// suspended still finishes at once, since nothing is held.
    ///
    /// Setting it to `false` starts the held tasks that are still ready, in the order they were
    /// held, on the calling thread (their ``WorkflowEvent/taskStarted(_:)`` events are told before
    /// the setter returns). Awaiting a suspended workflow waits; ``snapshot()`` reports it
    /// suspended and each held task blocked by ``OperationSnapshot/Blocker/workflowSuspended(_:)``,
    /// which the stall watchdog's report shows. A sub-workflow is not suspended with its parent.
    public var isSuspended: Bool {
        get { lock.withLock { _isSuspended } }
        set {
            if newValue {
                lock.withLock { _isSuspended = true }
            } else {
                perform { transaction in transaction.resume() }
            }
        }
    }

    /// Runs `body` under the lock, then performs what it decided without the lock.
    /// The streams and listeners that get the change's events are read under the same lock, at
    /// the end of the decisions: a stream made after the change was decided does not get its
    /// events.
    ///
    /// `runner`: the runner whose run's `main()` runs on this thread, if the caller knows it.
    func perform(onRunner runner: Unmanaged<WorkflowRunOperation>? = nil, _ body: (inout WorkflowTransaction) -> Void) {
        var transaction = WorkflowTransaction(workflow: self, instrument: instrumentSlot.current)
        if let runner {
            transaction.runnerOnThread = runner
            transaction.stamp = CoarseClock.stamp()
        }
        // The lock is taken and released around the decisions directly, not through a closure:
        // a closure capturing the transaction made the compiler copy it (152 bytes) afterwards.
        // Nothing in between throws, and no code of the user's runs there.
        lock.lock()
        body(&transaction)
        if let runner = transaction.freedRunner { handNextRunLocked(to: runner, stamp: transaction.stamp) }
        if !streams.isEmpty || !listeners.isEmpty {
            transaction.receivers = .init(streams: Array(streams.values), listeners: Array(listeners.values))
        }
        lock.unlock()
        transaction.performEffects()
    }
}

/// Something that happened in a workflow, as delivered by ``Workflow/events`` (Task.framework's
/// notifications).
public enum WorkflowEvent: Sendable, CustomStringConvertible {
    /// ``Workflow/start()``, ``Workflow/cancel()``, ``Workflow/retry()`` or ``Workflow/reset()``
    /// was called: told before any task changes.
    case willStart, willCancel, willRetry, willReset
    /// A run of the task started: it is executing, and its run goes to the runners once the change's
    /// hooks and delegates have run.
    case taskStarted(WorkflowTask)
    /// A run of the task finished with `result`.
    case taskFinished(WorkflowTask, result: (any Sendable)?)
    /// A run of the task failed with `error`.
    case taskFailed(WorkflowTask, error: any Error)
    /// The task was cancelled.
    case taskCancelled(WorkflowTask)
    /// The task was retried (it may start right after).
    case taskRetried(WorkflowTask)
    /// The task was reset.
    case taskReset(WorkflowTask)
    /// Every task without dependents has finished.
    case workflowFinished

    /// The event's name with the task's name, for example `taskFinished(A)`; a failure includes
    /// the error.
    public var description: String {
        switch self {
        case .willStart: "willStart"
        case .willCancel: "willCancel"
        case .willRetry: "willRetry"
        case .willReset: "willReset"
        case .taskStarted(let task): "taskStarted(\(task.name))"
        case .taskFinished(let task, _): "taskFinished(\(task.name))"
        case .taskFailed(let task, let error): "taskFailed(\(task.name), \(error))"
        case .taskCancelled(let task): "taskCancelled(\(task.name))"
        case .taskRetried(let task): "taskRetried(\(task.name))"
        case .taskReset(let task): "taskReset(\(task.name))"
        case .workflowFinished: "workflowFinished"
        }
    }
}

/// Told when the workflow finishes and when one of its tasks fails or is cancelled
/// (Task.framework's `TSKWorkflowDelegate`); set it as ``Workflow/delegate``, which holds it
/// weakly.
///
/// Methods have empty defaults. They run on the thread that caused the change, after the
/// workflow's events, the task's hook and the task's delegate, never under a lock.
public protocol WorkflowDelegate: AnyObject, Sendable {
    /// Every task without dependents has finished (at once, for an empty workflow that was
    /// started).
    /// - Parameter workflow: The workflow.
    func workflowDidFinish(_ workflow: Workflow)
    /// A run of one of the workflow's tasks failed.
    /// - Parameters:
    ///   - workflow: The workflow.
    ///   - task: The task, now failed.
    ///   - error: The run's error.
    func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error)
    /// One of the workflow's tasks was cancelled (each task of a propagated cancel is reported).
    /// - Parameters:
    ///   - workflow: The workflow.
    ///   - task: The task, now cancelled.
    func workflow(_ workflow: Workflow, taskDidCancel task: WorkflowTask)
}

extension WorkflowDelegate {
    /// Does nothing.
    ///
    /// - Parameter workflow: The workflow.
    public func workflowDidFinish(_ workflow: Workflow) {}
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - workflow: The workflow.
    ///   - task: The task, now failed.
    ///   - error: The run's error.
    public func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error) {}
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - workflow: The workflow.
    ///   - task: The task, now cancelled.
    public func workflow(_ workflow: Workflow, taskDidCancel task: WorkflowTask) {}
}
