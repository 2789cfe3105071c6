// WorkflowTask: one re-runnable step of a workflow — its state, the hooks for subclasses, reading
// and control — and WorkflowTaskRun and the runner, the operation that runs it.

import Dispatch
import Synchronization

/// One step of a ``Workflow``: work that can be run, and run again.
///
/// Subclass it and override ``main()``, then finish or fail the run — before `main()` returns or
/// later, from any thread — through ``currentRun`` (or ``finish(with:)`` and ``fail(with:)``).
/// Or use ``ClosureTask``, ``MethodTask``, ``ExternalConditionTask`` or ``SubworkflowTask``.
///
/// ```swift
/// final class Download: WorkflowTask, @unchecked Sendable {
///     override func main() {
///         let run = currentRun   // finishing through the run ignores a run cancelled meanwhile
///         client.get(url) { data, error in
///             if let data { run.finish(with: data) } else { run.fail(with: error!) }
///         }
///     }
/// }
/// ```
///
/// A task does nothing until it is added to a workflow
/// (``Workflow/add(_:prerequisites:keyedPrerequisites:)``). It then starts when it is started (by
/// ``start()`` or ``Workflow/start()``) and ready, or as soon as its last unfinished prerequisite
/// finishes; each run executes on the workflow's ``Workflow/queue``, taken by one of the workflow's
/// runners. Its state
/// follows Task.framework's table (``WorkflowTaskState``); ``cancel()``, ``retry()`` and
/// ``reset()`` reach all its dependents. A finish or fail from a run that was cancelled or reset
/// is ignored.
///
/// The workflow's events, the hooks (``didFinish(with:)`` and the others), the ``delegate`` and
/// the workflow's delegate are called in that order, on the thread that caused the change, after
/// it, with no lock held. A task holds its workflow weakly (a run in progress keeps it alive).
open class WorkflowTask: @unchecked Sendable {  // mutable state is protected by `withTaskLock`
    /// A name for logs, errors and diagrams.
    public let name: String

    /// The lock that guards the task's state: its own, then its workflow's (WorkflowLock.swift).
    let lockPointer = WorkflowTaskLockPointer()

    // MARK: State (all protected by `withTaskLock`, which is the workflow's lock once added)
    //
    // The fields every change reads or writes are `@exclusivity(unchecked)`: they are only
    // touched under the lock, by code of this module that never overlaps two accesses to one
    // field, so the runtime's dynamic exclusivity check (a call and a thread-local lookup per
    // access) proves nothing here; on the layered graph it was a quarter of the instructions.

    @exclusivity(unchecked) var lifecycle = WorkflowTaskLifecycle()
    /// The workflow the task belongs to: the one whose lock guards it (``WorkflowLock/workflow``,
    /// held weakly there, so the task needs no weak reference of its own); `nil` before it is
    /// added and once that workflow has been released.
    var workflow: Workflow? { lockPointer.lock.workflow }
    /// The task's index in its workflow.
    @exclusivity(unchecked) var index = -1
    @exclusivity(unchecked) var prerequisiteIndices = WorkflowIndices()
    // `Dictionary()`, not `[:]`: the literal goes through `init(dictionaryLiteral:)`.
    var keyedPrerequisiteIndices = [String: Int]()
    @exclusivity(unchecked) var dependentIndices = WorkflowIndices()
    @exclusivity(unchecked) var unfinishedPrerequisites = 0
    /// Whether its start is held while the workflow is suspended (``Workflow/isSuspended``).
    @exclusivity(unchecked) var isHeld = false
    @exclusivity(unchecked) var _result: (any Sendable)?
    @exclusivity(unchecked) var _error: (any Error)?
    @exclusivity(unchecked) var _finishTime: ContinuousClock.Instant?
    /// The runner executing the current run, from when it took the run; finished when the run
    /// ends if the run's `main()` has returned (Workflow+Runners.swift).
    @exclusivity(unchecked) var runOperation: WorkflowRunOperation?
    /// When the current run was started (queued for a runner) and when a runner took it
    /// (``CoarseClock`` stamps; 0 for never), for snapshots.
    @exclusivity(unchecked) var runQueuedStamp: UInt32 = 0
    @exclusivity(unchecked) var runStartedStamp: UInt32 = 0
    weak var _delegate: (any WorkflowTaskDelegate)?
    /// Swift tasks awaiting the task's outcome (WorkflowAwaiting.swift).
    var awaiters = WorkflowAwaiters<WorkflowTaskOutcome>()
    /// Its reported progress and weight (Workflow+Progress.swift).
    var _progress = WorkflowTaskProgress()

    /// Creates a task, in state ``WorkflowTaskState/ready`` and in no workflow.
    /// - Parameter name: A name for logs, errors and diagrams.
    public init(name: String) {
        self.name = name
    }

    // MARK: For subclasses

    /// The work of one run. Finish or fail the run when the work is done — now or later, from any
    /// thread — through ``currentRun``, read here before any asynchronous work, or through
    /// ``finish(with:)`` and ``fail(with:)``. A run that is never finished or failed keeps the
    /// task executing and its runner's place on the queue; a run finished here, before `main()`
    /// returns, keeps its place until `main()` returns, and the next waiting run, handed that
    /// place by the finish, begins then. The default finishes at once without a result; overrides
    /// do not call it.
    ///
    /// Runs on a worker of the workflow's ``Workflow/queue``, once per run. It is not called for a
    /// run that was cancelled or reset before the queue reached it. Cancelling or resetting the
    /// task does not interrupt it: check ``state`` in long work.
    open func main() {
        finish(with: nil)
    }

    /// What a runner calls, with `run` as this thread's executing run: ``main()``. A
    /// kind of task that hands the run to its work (``ClosureTask``) takes it from here instead
    /// of reading ``currentRun``, which looks it up again.
    func main(executing run: WorkflowTaskRun) {
        main()
    }

    /// Keys that must be among the keyed prerequisites when the task is added; by default none.
    ///
    /// ``Workflow/add(_:prerequisites:keyedPrerequisites:)`` reads it once and throws
    /// ``OperationError/Code-swift.struct/missingPrerequisiteKeys`` if a key has no keyed
    /// prerequisite. An override in a subclass of a class that requires keys should include its
    /// superclass's keys.
    open var requiredPrerequisiteKeys: Set<String> { [] }

    /// Called after the task was cancelled and the workflow's events were told, before its
    /// delegate and the workflow's delegate. Runs on the thread that cancelled it, with no lock
    /// held; the run that was in progress, if any, is already over. Not called when a cancel
    /// reaches a task that is finished, failed or cancelled.
    open func didCancel() {}
    /// Called after the task was reset (its result, error and finish time cleared) and the
    /// workflow's events were told. Runs on the thread that reset it, with no lock held. Not called
    /// when a reset reaches a pending task, which has nothing to reset.
    open func didReset() {}
    /// Called after the task was retried (its result, error and finish time cleared) and the
    /// workflow's events were told, before its new run, if it starts at once, is queued. Runs on
    /// the thread that retried it, with no lock held.
    open func didRetry() {}
    /// Called after a run finished with `result` and the workflow's events were told, before the
    /// task's delegate and before the dependents this finish released are queued. Runs on the
    /// thread that finished the run, with no lock held. (A dependent released by another
    /// prerequisite finishing meanwhile, on another thread, may already be running.)
    /// - Parameter result: The run's result.
    open func didFinish(with result: (any Sendable)?) {}
    /// Called after a run failed with `error` and the workflow's events were told, before the
    /// task's delegate and the workflow's delegate. Runs on the thread that failed the run, with
    /// no lock held.
    /// - Parameter error: The run's error.
    open func didFail(with error: any Error) {}

    // MARK: Reading

    /// The task's state.
    public var state: WorkflowTaskState { withTaskLock { lifecycle.state } }
    /// The result of the last run that finished, until the task is reset or retried; `nil` before.
    public var result: (any Sendable)? { withTaskLock { _result } }
    /// The error of the last run that failed, until the task is reset or retried; `nil` before.
    public var error: (any Error)? { withTaskLock { _error } }
    /// When the last run finished or failed, on the continuous clock; `nil` before, and after a
    /// reset or retry.
    public var finishTime: ContinuousClock.Instant? { withTaskLock { _finishTime } }
    /// The workflow the task was added to; `nil` before it is added, and once that workflow has
    /// been released (a task holds its workflow weakly).
    public var containingWorkflow: Workflow? { withTaskLock { workflow } }
    /// The task's delegate, held weakly. It is told on the thread that caused the change, after
    /// the workflow's events and the task's hook, with no lock held.
    public var delegate: (any WorkflowTaskDelegate)? {
        get { withTaskLock { _delegate } }
        set { withTaskLock { _delegate = newValue } }
    }

    /// The current (or last) run, whose ``WorkflowTaskRun/finish(with:)`` and
    /// ``WorkflowTaskRun/fail(with:)`` are ignored once it is no longer the current run.
    ///
    /// Inside ``main()``, on the thread running it, this is the run being executed, even if the
    /// task has been reset and started again since. Read it there and hand it to asynchronous
    /// work: if the task is cancelled or reset meanwhile, and perhaps started again, the late
    /// finish of the old run changes nothing. Elsewhere it is the task's latest run. (Before the
    /// first run its ``WorkflowTaskRun/number`` is 0, and finishing through it does nothing.)
    public var currentRun: WorkflowTaskRun {
        // Inside `main()` (on the thread running it), the run being executed: the task may have
        // been reset and started again since its runner took that run.
        if let number = executingRunNumber { return WorkflowTaskRun(task: self, number: number) }
        return WorkflowTaskRun(task: self, number: withTaskLock { lifecycle.run })
    }

    /// The number of the run whose `main()` this thread is executing, if it executes one of this
    /// task's.
    var executingRunNumber: Int? {
        guard let operation = ExecutingRun.value,
              operation.task?.toOpaque() == Unmanaged.passUnretained(self).toOpaque() else { return nil }
        return operation.run
    }

    // MARK: Control

    /// Starts a run if the task is ready: it becomes executing at once, and its ``main()`` is
    /// queued on the workflow's queue. Does nothing in any other state, or if the task is in no
    /// workflow. The workflow's ``WorkflowEvent/taskStarted(_:)`` event is told on the calling
    /// thread.
    public func start() {
        attachedWorkflow?.perform { $0.start(self) }
    }

    /// Finishes the current run with `result`: the task is finished and every pending dependent
    /// whose prerequisites have now all finished starts. Ignored unless the task is executing.
    ///
    /// Called inside ``main()``, on its thread, it finishes the run being executed (ignored if
    /// that run is over). Called elsewhere it finishes whichever run is current, including a
    /// newer run started after a cancel and a retry: from asynchronous work, finish through the
    /// run read from ``currentRun`` instead. The workflow's events, the hook and the delegate are
    /// called on the calling thread before this returns.
    /// - Parameter result: The run's result, readable as ``result`` and by the dependents.
    public func finish(with result: (any Sendable)?) {
        attachedWorkflow?.perform { [run = executingRunNumber] in $0.finish(self, run: run, result: result) }
    }

    /// Fails the current run with `error`: the task is failed and its dependents stay pending.
    /// Ignored unless the task is executing.
    ///
    /// Like ``finish(with:)``: inside ``main()`` it fails the run being executed; elsewhere
    /// whichever run is current, so from asynchronous work fail through the run read from
    /// ``currentRun``. The workflow's events, the hook and the delegates are called on the calling
    /// thread before this returns.
    /// - Parameter error: Why the run failed, readable as ``error``.
    public func fail(with error: any Error) {
        attachedWorkflow?.perform { [run = executingRunNumber] in $0.fail(self, run: run, error: error) }
    }

    /// Cancels the task (pending, ready or executing → cancelled) and all its dependents, direct
    /// or not — whatever the task's own state: cancelling a finished task cancels its dependents
    /// that have not finished. Finished and failed tasks keep their state (a ``SubworkflowTask``
    /// still passes the cancel on to its sub-workflow).
    ///
    /// An executing run is over at once (its runner's place is freed at the end of the change, or when
    /// ``main()`` returns if this is called inside that run's `main()`), but ``main()`` is not
    /// interrupted; a late finish or fail from the cancelled run is ignored.
    /// Events, hooks and delegates are called on the calling thread before this returns.
    public func cancel() {
        attachedWorkflow?.perform { $0.cancel(from: [self]) }
    }

    /// Retries the task if it failed or was cancelled: its result, error and finish time are
    /// cleared and it starts at once if its prerequisites have finished, else when they do. The
    /// retry reaches all its dependents, direct or not, whatever the task's own state; each
    /// failed or cancelled one is retried the same way. Events and hooks are called on the
    /// calling thread before this returns.
    public func retry() {
        attachedWorkflow?.perform { $0.retry(from: [self]) }
    }

    /// Resets the task — clears its result, error and finish time; it becomes ready if all its
    /// prerequisites have finished, else pending, and does not start by itself — and all its
    /// dependents, direct or not. A dependent that was ready becomes pending, since this task is
    /// no longer finished (Task.framework 1.1's reset fix).
    ///
    /// An executing run is over at once (its runner's place is freed at the end of the change, or when
    /// ``main()`` returns if this is called inside that run's `main()`), but ``main()`` is not
    /// interrupted; a late finish or fail from it is ignored. A pending task has
    /// nothing to reset: it keeps its state and its ``didReset()`` is not called, but the reset
    /// still reaches its dependents. Events and hooks are called on the calling thread before this
    /// returns.
    public func reset() {
        attachedWorkflow?.perform { $0.reset(from: [self]) }
    }

    /// Under the lock: a reset reached the task (whether or not it changed its state).
    func resetReachedLocked() {}

    /// A cancel reached the task without changing its state (it was finished, failed or
    /// cancelled). Without the lock.
    func cancelPassedOn() {}

    /// The workflow, read under the lock (it is set when the task is added).
    var attachedWorkflow: Workflow? { withTaskLock { workflow } }

    /// Calls `body` with the workflow: on the thread running one of the task's runs, the one its
    /// operation holds (a task never leaves its workflow), without the lock and without making a
    /// retained optional of it; elsewhere ``attachedWorkflow``, if the task is in a live workflow.
    ///
    /// On the run's thread neither the runner nor the workflow is retained: `execute()` keeps
    /// the runner alive while `main()` runs, and the runner keeps the workflow (a workflow,
    /// weakly referenced by its tasks, has a side table, so each retain and release of it takes
    /// the runtime's slow path).
    ///
    /// `body` also gets the runner executing the run on this thread, if known (the fast path):
    /// the change then need not look the thread's runner up again.
    @inline(__always)
    func withWorkflowForRun(_ body: (Workflow, Unmanaged<WorkflowRunOperation>?) -> Void) {
        if let executing = ExecutingRun.unmanagedValue {
            let handled = executing._withUnsafeGuaranteedRef { operation in
                guard operation.task?.toOpaque() == Unmanaged.passUnretained(self).toOpaque() else { return false }
                operation.unretainedWorkflow._withUnsafeGuaranteedRef { body($0, executing) }
                return true
            }
            if handled { return }
        }
        if let workflow = attachedWorkflow { body(workflow, nil) }
    }

    /// Runs `body` under the lock that guards the task: its own while it is in no workflow, its
    /// workflow's once added (the two are told apart safely during the move; WorkflowLock.swift).
    @inline(__always)
    func withTaskLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        try lockPointer.withLock(body)
    }

    /// Under `workflow`'s lock: whether the task is in that workflow. Safe for any task, also one
    /// of another workflow, whose fields this lock does not guard.
    func isIn(_ workflow: Workflow) -> Bool {
        lockPointer.lock === workflow.lock
    }

    /// Under the lock: the prerequisite tasks.
    func prerequisites() -> [WorkflowTask] {
        prerequisiteIndices.compactMap { task(at: $0) }
    }

    /// Under the lock: a task of the same workflow.
    func task(at index: Int) -> WorkflowTask? {
        workflow?.tasks[index]
    }
}

/// One run of a ``WorkflowTask``: finishing or failing through it is ignored once the run is over
/// (finished, failed, cancelled, reset, or replaced by a newer run).
///
/// Get it from ``WorkflowTask/currentRun`` at the beginning of ``WorkflowTask/main()``;
/// ``ClosureTask`` and ``MethodTask`` hand it to your code.
public struct WorkflowTaskRun: Sendable {
    /// The task.
    public let task: WorkflowTask
    /// The run's number (1 for the first run).
    public let number: Int

    /// Finishes this run with `result`, if it is still the task's current run and executing: the
    /// task is finished and every pending dependent whose prerequisites have now all finished
    /// starts. Otherwise does nothing. The workflow's events, the hook and the delegate are called
    /// on the calling thread before this returns.
    /// - Parameter result: The run's result, readable as ``WorkflowTask/result`` and by the
    ///   dependents.
    public func finish(with result: (any Sendable)?) {
        task.withWorkflowForRun { workflow, runner in
            let now = ContinuousClock.now
            workflow.perform(onRunner: runner) { $0.finish(task, run: number, result: result, now: now) }
        }
    }

    /// Fails this run with `error`, if it is still the task's current run and executing: the task
    /// is failed and its dependents stay pending. Otherwise does nothing. The workflow's events,
    /// the hook and the delegates are called on the calling thread before this returns.
    /// - Parameter error: Why the run failed, readable as ``WorkflowTask/error``.
    public func fail(with error: any Error) {
        task.withWorkflowForRun { workflow, runner in
            let now = ContinuousClock.now
            workflow.perform(onRunner: runner) { $0.fail(task, run: number, error: error, now: now) }
        }
    }
}

/// A runner: an operation on the workflow's queue that takes the workflow's started runs, in the
/// order they were started, and executes them one after another (see Architecture.md, "Workflow
/// runners"). It holds one slot of the queue, like any operation: a workflow runs at most
/// `maxConcurrentOperationCount` runs at once, and a run whose `main()` returns without finishing
/// keeps the runner — and its slot — until the run ends.
///
/// A workflow starts a runner for each run it starts while it has fewer runners taking runs than
/// one more than the queue's limit (`Workflow.runnerTarget`). A runner stops taking runs when
/// none is left, when the queue is suspended or its limit went down below the workflow's
/// runners, after `turn` runs (it makes way for the queue's
/// other work, as a queue worker does), when it was cancelled (which cancels the runs waiting at
/// that moment, as cancelling the queue's operations did when each run was an operation of its
/// own), and when a run does not end in its `main()`; in every case another runner is queued if
/// runs are left.
///
/// A run that ends on the runner's thread hands the runner its next run in the change that ended
/// it (`handNextLocked`, under the workflow's lock), so that the runner goes on without taking the
/// lock again: the handed run begins once the ended run's `main()` returns (`claimNext`). Until
/// then `task` and `run` still name the ended run, and a handed run that ends before it began is
/// marked `nextOver` and dropped.
///
/// Who finishes the runner once it keeps a run is settled by the flags `over`, `began` and
/// `external` of the run it executes (reset for each run): `began` is set under the workflow's
/// lock when the run is taken, `over` by the change that ends the run, also under that lock. A
/// run ended on the runner's own thread, in its `main()` (the usual case), lets the runner go on
/// once `main()` returns. A run ended on another thread while its `main()` runs, or after it
/// returned without ending it, finishes the runner in that change's effects, at once, so that the
/// slot is free (`external`); the runner then takes no more runs.
final class WorkflowRunOperation: ConcurrentOperation, @unchecked Sendable {
    /// The task and the number of the run the runner executes now (or executed last). Written by
    /// the runner's thread under the workflow's lock when it takes a run; read on that thread (by
    /// `currentRun`, `finish(with:)` and the like, through `ExecutingRun`).
    /// (Unretained: the workflow holds its tasks for good, and the runner holds the workflow.)
    @exclusivity(unchecked) var task: Unmanaged<WorkflowTask>?
    @exclusivity(unchecked) var run = 0
    /// Keeps the workflow alive while the runner is in its queue (tasks hold their workflow weakly).
    let workflow: Workflow
    /// `workflow`, for reaching it without a retain while the operation is alive (the strong
    /// reference above keeps it).
    let unretainedWorkflow: Unmanaged<Workflow>
    /// `over`, `began` and `external` of the current run (see the type's comment).
    private let runFlags = Atomic<UInt8>(0)
    private static let over: UInt8 = 1
    private static let began: UInt8 = 2
    private static let external: UInt8 = 4
    /// A next run was handed to the runner by the change that ended its current run on its
    /// thread (`nextTask`), and has not begun; `nextOver`: it ended before it began.
    private static let nextReady: UInt8 = 8
    private static let nextOver: UInt8 = 16
    /// The run handed over (see `nextReady`): written under the workflow's lock on the runner's
    /// thread, read there once `main()` returns. The workflow holds the task.
    @exclusivity(unchecked) private var nextTask: Unmanaged<WorkflowTask>?
    @exclusivity(unchecked) private var nextRun = 0
    /// Runs taken in this turn: written on the runner's thread, read there under the lock.
    @exclusivity(unchecked) private var takenInTurn = 0
    /// Set by `cancel()`: the runner takes no more runs, and cancels those waiting.
    private let cancelRequested = Atomic<Bool>(false)
    /// Whether the runner counts among the workflow's runners taking runs (`Workflow.drainers`):
    /// from when it is made until it stops taking runs. Under the workflow's lock.
    @exclusivity(unchecked) var takesRuns = true
    /// Runs a runner executes before it makes way.
    static let turn = 64

    init(workflow: Workflow) {
        self.workflow = workflow
        unretainedWorkflow = Unmanaged.passUnretained(workflow)
        super.init(name: workflow.runnerName)
    }

    /// Cancelled while waiting in its queue: it finishes without executing and gives up its
    /// place among the workflow's runners (the runs waiting were cancelled with it).
    override func didFinishWithoutExecuting() {
        workflow.runnerLeft(self)
    }

    /// Cancels the runner, and with it the runs waiting for a runner now (with their dependents),
    /// as cancelling the queue's operations cancels the operations waiting in it. The run it
    /// executes goes on; the runner then stops, and runs started later get another runner.
    override func cancel() {
        cancelRequested.store(true, ordering: .releasing)
        super.cancel()
        workflow.perform { $0.cancelPendingRuns() }
    }

    override func execute() {
        // The thread-local marks this runner for all its runs: between two runs no code of the
        // user's runs on this thread, and each run's task and number are the runner's fields.
        let keepsRun = ExecutingRun.with(self) { () -> Bool in
            takenInTurn = 0
            var next = workflow.takeRun(for: self, taken: 0, cancelled: cancelRequested.load(ordering: .acquiring))
            while let (task, run) = next {
                takenInTurn += 1
                task._withUnsafeGuaranteedRef { $0.main(executing: WorkflowTaskRun(task: $0, number: run)) }
                let flags = runFlags.load(ordering: .acquiring)
                if flags & Self.nextReady != 0 {
                    // Ended in its `main()`, on this thread, and the change that ended it took
                    // the next run for this runner: that one, unless it ended before it began.
                    if let handed = claimNext() {
                        next = handed
                        continue
                    }
                } else if flags & (Self.over | Self.external) != Self.over {
                    // Ended elsewhere (this operation is being finished there), or not ended yet
                    // (this operation stays with the run until it ends): no more runs for this runner.
                    return workflow.runnerKeepsRun(self)
                }
                next = workflow.takeRun(for: self, taken: takenInTurn,
                                        cancelled: cancelRequested.load(ordering: .acquiring))
            }
            return false
        }
        if !keepsRun { finishAfterStart(asLastStep: true) }
    }

    /// Under the workflow's lock, when the runner takes `run` of `task`.
    func beganLocked(_ task: Unmanaged<WorkflowTask>, run: Int) {
        self.task = task
        self.run = run
        runFlags.store(Self.began, ordering: .releasing)
    }

    /// Whether the runner may be handed its next run by the change that ended its current one:
    /// under the workflow's lock, on the runner's thread.
    var acceptsNextLocked: Bool {
        takesRuns && takenInTurn < Self.turn && !cancelRequested.load(ordering: .acquiring)
            && runFlags.load(ordering: .acquiring) & Self.nextReady == 0
    }

    /// Under the workflow's lock, on the runner's thread, by the change that ended its current run
    /// there: `run` of `task` is the runner's next; it begins once the current `main()` returns.
    func handNextLocked(_ task: Unmanaged<WorkflowTask>, run: Int) {
        nextTask = task
        nextRun = run
        runFlags.bitwiseOr(Self.nextReady, ordering: .acquiringAndReleasing)
    }

    /// On the runner's thread, after `main()` returned: begins the run handed over by
    /// `handNextLocked`, or returns `nil` if it ended before it began.
    private func claimNext() -> (Unmanaged<WorkflowTask>, Int)? {
        guard let handed = nextTask else { return nil }
        nextTask = nil
        var flags = runFlags.load(ordering: .acquiring)
        while true {
            let ended = flags & Self.nextOver != 0
            let desired = ended ? flags & ~(Self.nextReady | Self.nextOver) : Self.began
            let (exchanged, original) = runFlags.compareExchange(
                expected: flags, desired: desired, ordering: .acquiringAndReleasing)
            if exchanged {
                if ended { return nil }
                task = handed
                run = nextRun
                return (handed, nextRun)
            }
            flags = original
        }
    }

    /// Under the workflow's lock: whether the current run was ended (by any thread).
    var isRunOverLocked: Bool { runFlags.load(ordering: .acquiring) & Self.over != 0 }

    /// What ending a run of the runner asks of the change that ends it.
    enum RunEnd {
        /// Nothing: the runner goes on once its `main()` returns, or the run was the next one,
        /// handed over but not begun (the runner drops it).
        case none
        /// The run ended on the runner's thread: the change may hand the runner its next run.
        case onRunner
        /// The change finishes the runner in its effects (the run ended on another thread).
        case finishRunner
    }

    /// Under the workflow's lock, by the change that ends the run: marks it over. The change must
    /// finish the operation in its effects only if the run has begun and this thread is not the
    /// runner's (otherwise the runner goes on, or finishes itself once it has no more runs to
    /// take); the runner then no longer takes runs (the change replaces it if runs wait: see
    /// `Workflow.runnerStoppedLocked(_:)`). A run handed over but not begun is marked so, and
    /// the runner drops it.
    /// `onThread`: whether this thread is the runner's, if the caller knows.
    func endRunLocked(onThread: Bool?) -> RunEnd {
        let external = !(onThread ?? ExecutingRun.holds(self))
        var flags = runFlags.load(ordering: .acquiring)
        while true {
            let handed = flags & Self.nextReady != 0
            let desired = handed ? flags | Self.nextOver : flags | (external ? Self.over | Self.external : Self.over)
            let (exchanged, original) = runFlags.compareExchange(
                expected: flags, desired: desired, ordering: .acquiringAndReleasing)
            if exchanged {
                if handed { return .none }
                if !external { return .onRunner }
                return flags & Self.began != 0 ? .finishRunner : .none
            }
            flags = original
        }
    }
}

/// The runner whose run's `main()` runs on this thread: `currentRun`, `finish(with:)` and
/// `fail(with:)` called there belong to that run, not to a newer one.
let ExecutingRun = ThreadLocalReference<WorkflowRunOperation>()
