// WorkflowTask: one re-runnable step of a workflow — its state, the hooks for subclasses, reading
// and control — and WorkflowTaskRun (the runner that executes runs is in WorkflowRunOperation.swift).

import Dispatch

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
    /// The indices of the keyed prerequisites by key; kept as an optional, `nil` for a task
    /// without any, which costs nothing to make or destroy (an empty dictionary costs a release).
    var keyedPrerequisiteIndices: [String: Int] {
        get { keyedIndices ?? [:] }
        set { keyedIndices = newValue }
    }
    private var keyedIndices: [String: Int]?
    @exclusivity(unchecked) var dependentIndices = WorkflowIndices()
    @exclusivity(unchecked) var unfinishedPrerequisites = 0
    /// Whether its start is held while the workflow is suspended (``Workflow/isSuspended``).
    @exclusivity(unchecked) var isHeld = false
    /// The last finished run's result (`nil` for none).
    var _result: (any Sendable)? {
        @inline(__always) get { type(of: resultStorage) == WorkflowNoResult.self ? nil : resultStorage }
        @inline(__always) set { resultStorage = newValue ?? WorkflowNoResult() }
    }
    /// `_result`, with ``WorkflowNoResult`` for none: a plain existential, which the task's
    /// destruction frees with one call to its type's destroy, where an optional one first asked
    /// the runtime whether it held a value (about 60 instructions per task, most without a result).
    @exclusivity(unchecked) var resultStorage: any Sendable = WorkflowNoResult()
    @exclusivity(unchecked) var _error: (any Error)?
    @exclusivity(unchecked) var _finishTime: WorkflowInstant?
    /// The runner executing the current run, from when it took the run; finished when the run
    /// ends if the run's `main()` has returned (Workflow+Runners.swift). Unretained: the runner
    /// sets it itself, and the change that ends the run clears it before the runner can finish,
    /// so while it is set the runner is an unfinished operation, which its queue retains.
    @exclusivity(unchecked) var runOperation: Unmanaged<WorkflowRunOperation>?
    /// When the current run was started (queued for a runner) and when a runner took it
    /// (``CoarseClock`` stamps; 0 for never), for snapshots.
    @exclusivity(unchecked) var runQueuedStamp: UInt32 = 0
    @exclusivity(unchecked) var runStartedStamp: UInt32 = 0
    /// The delegate's weak reference, in a box made when a delegate is first set: a task without
    /// one holds an empty reference instead of a weak one, which the runtime initialises,
    /// loads on every finish and destroys.
    @exclusivity(unchecked) var delegateBox: WorkflowTaskDelegateBox?
    /// The delegate, held weakly (`nil` if none was set).
    var _delegate: (any WorkflowTaskDelegate)? {
        get { delegateBox?.delegate }
        set {
            if let delegateBox {
                delegateBox.delegate = newValue
            } else if let newValue {
                delegateBox = WorkflowTaskDelegateBox(newValue)
            }
        }
    }
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

    /// The keys of ``requiredPrerequisiteKeys`` (read once) that `keyed` lacks, or `nil` if none.
    /// A kind of task that keeps its keys overrides it to skip an empty set without copying it.
    func missingPrerequisiteKeys(in keyed: [String: WorkflowTask]) -> Set<String>? {
        let required = requiredPrerequisiteKeys
        if required.isEmpty { return nil }
        let missing = required.subtracting(keyed.keys)
        return missing.isEmpty ? nil : missing
    }

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
    public var finishTime: ContinuousClock.Instant? { withTaskLock { _finishTime?.instant } }
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
        lockPointer.isGuarded(by: workflow.lock)
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
            let now = WorkflowInstant.now
            workflow.perform(onRunner: runner) { $0.finish(task, run: number, result: result, now: now) }
        }
    }

    /// Fails this run with `error`, if it is still the task's current run and executing: the task
    /// is failed and its dependents stay pending. Otherwise does nothing. The workflow's events,
    /// the hook and the delegates are called on the calling thread before this returns.
    /// - Parameter error: Why the run failed, readable as ``WorkflowTask/error``.
    public func fail(with error: any Error) {
        task.withWorkflowForRun { workflow, runner in
            let now = WorkflowInstant.now
            workflow.perform(onRunner: runner) { $0.fail(task, run: number, error: error, now: now) }
        }
    }
}

/// A `ContinuousClock.Instant` kept as its bits, for a task's finish time. The instant's type is
/// resilient (its layout is known only at run time), so a field of that type made every access
/// to the fields after it, the task's destruction and every store of a finish time go through
/// the type's metadata and value witnesses; two words of plain bits cost none of that. The bits
/// are only ever turned back into the instant they came from (`unsafeBitCast` checks the sizes).
struct WorkflowInstant: Sendable {
    private let bits: (UInt64, UInt64)

    init(_ instant: ContinuousClock.Instant) {
        bits = unsafeBitCast(instant, to: (UInt64, UInt64).self)
    }

    /// The current instant of the continuous clock.
    static var now: WorkflowInstant { WorkflowInstant(.now) }

    var instant: ContinuousClock.Instant {
        unsafeBitCast(bits, to: ContinuousClock.Instant.self)
    }
}

/// The weak reference to a task's delegate (see ``WorkflowTask/delegateBox``). Under the task's
/// lock.
final class WorkflowTaskDelegateBox {
    weak var delegate: (any WorkflowTaskDelegate)?

    init(_ delegate: any WorkflowTaskDelegate) {
        self.delegate = delegate
    }
}

/// What ``WorkflowTask/resultStorage`` holds when there is no result. Internal: a result of
/// the user's is never of this type.
struct WorkflowNoResult: Sendable {}
