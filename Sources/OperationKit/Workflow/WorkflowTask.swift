import Dispatch

/// One step of a ``Workflow``: work that can be run, and run again.
///
/// Subclass it and override ``main()``, then call ``finish(with:)`` or ``fail(with:)`` — before
/// `main()` returns or later, from any thread. Or use ``ClosureTask``, ``MethodTask``,
/// ``ExternalConditionTask`` or ``SubworkflowTask``.
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
/// A task starts as soon as all its prerequisites have finished successfully (during a run of
/// the workflow), and each run executes as an operation on the workflow's queue. Its state
/// follows Task.framework's table (``WorkflowTaskState``); ``cancel()``, ``retry()`` and
/// ``reset()`` reach all its dependents. A finish or fail from a run that was cancelled or reset
/// is ignored.
open class WorkflowTask: @unchecked Sendable {  // mutable state is protected by `WorkflowLock.lock`
    /// A name for logs, errors and diagrams.
    public let name: String

    // MARK: State (all protected by WorkflowLock.lock)

    var lifecycle = WorkflowTaskLifecycle()
    /// The workflow the task belongs to, and its index there.
    weak var workflow: Workflow?
    var index = -1
    var prerequisiteIndices: [Int] = []
    var keyedPrerequisiteIndices: [String: Int] = [:]
    var dependentIndices: [Int] = []
    var unfinishedPrerequisites = 0
    var _result: (any Sendable)?
    var _error: (any Error)?
    var _finishTime: ContinuousClock.Instant?
    /// The operation running the current run, finished when the run ends.
    var runOperation: WorkflowRunOperation?
    weak var _delegate: (any WorkflowTaskDelegate)?

    /// Creates a task.
    /// - Parameter name: A name for logs, errors and diagrams.
    public init(name: String) {
        self.name = name
    }

    // MARK: For subclasses

    /// The work of one run. Call ``finish(with:)`` or ``fail(with:)`` when it is done (now or
    /// later, from any thread). The default finishes at once without a result. Runs on the
    /// workflow's queue.
    open func main() {
        finish(with: nil)
    }

    /// Keys that must be among the keyed prerequisites when the task is added; by default none.
    open var requiredPrerequisiteKeys: Set<String> { [] }

    /// Called after the task was cancelled, before its delegate and the workflow are told.
    open func didCancel() {}
    /// Called after the task was reset.
    open func didReset() {}
    /// Called after the task was retried.
    open func didRetry() {}
    /// Called after a run finished with `result`.
    open func didFinish(with result: (any Sendable)?) {}
    /// Called after a run failed with `error`.
    open func didFail(with error: any Error) {}

    // MARK: Reading

    /// The task's state.
    public var state: WorkflowTaskState { WorkflowLock.lock.withLock { lifecycle.state } }
    /// The result of the last run that finished, until the task is reset or retried.
    public var result: (any Sendable)? { WorkflowLock.lock.withLock { _result } }
    /// The error of the last run that failed, until the task is reset or retried.
    public var error: (any Error)? { WorkflowLock.lock.withLock { _error } }
    /// When the last run finished or failed.
    public var finishTime: ContinuousClock.Instant? { WorkflowLock.lock.withLock { _finishTime } }
    /// The workflow the task was added to.
    public var containingWorkflow: Workflow? { WorkflowLock.lock.withLock { workflow } }
    /// The task's delegate, held weakly.
    public var delegate: (any WorkflowTaskDelegate)? {
        get { WorkflowLock.lock.withLock { _delegate } }
        set { WorkflowLock.lock.withLock { _delegate = newValue } }
    }

    /// The current (or last) run, whose ``WorkflowTaskRun/finish(with:)`` and
    /// ``WorkflowTaskRun/fail(with:)`` are ignored once it is no longer the current run.
    public var currentRun: WorkflowTaskRun {
        WorkflowTaskRun(task: self, number: WorkflowLock.lock.withLock { lifecycle.run })
    }

    // MARK: Control

    /// Starts a run if the task is ready. Does nothing otherwise, or if the task is in no workflow.
    public func start() {
        attachedWorkflow?.perform { $0.start(self) }
    }

    /// Finishes the current run with `result`: the task is finished and every dependent whose
    /// prerequisites have all finished starts. Ignored unless the task is executing.
    public func finish(with result: (any Sendable)?) {
        attachedWorkflow?.perform { $0.finish(self, run: nil, result: result) }
    }

    /// Fails the current run with `error`: the task is failed and its dependents do not run.
    /// Ignored unless the task is executing.
    public func fail(with error: any Error) {
        attachedWorkflow?.perform { $0.fail(self, run: nil, error: error) }
    }

    /// Cancels the task (pending, ready or executing → cancelled) and all its dependents. A late
    /// finish or fail from the cancelled run is ignored.
    public func cancel() {
        attachedWorkflow?.perform { $0.cancel(from: [self]) }
    }

    /// Retries the task if it failed or was cancelled (it starts again once its prerequisites
    /// have finished), and passes the retry on to all its dependents.
    public func retry() {
        attachedWorkflow?.perform { $0.retry(from: [self]) }
    }

    /// Resets the task — clears its result, error and finish time; it becomes ready if all its
    /// prerequisites have finished, else pending, and does not start by itself — and all its
    /// dependents.
    public func reset() {
        attachedWorkflow?.perform { $0.reset(from: [self]) }
    }

    // MARK: Prerequisite results

    /// The result of any one prerequisite (`nil` if none has one).
    public var anyPrerequisiteResult: (any Sendable)? {
        WorkflowLock.lock.withLock { prerequisites().lazy.compactMap { $0._result }.first }
    }

    /// The results of all prerequisites (keyed and unkeyed) that have one.
    public var allPrerequisiteResults: [any Sendable] {
        WorkflowLock.lock.withLock { prerequisites().compactMap { $0._result } }
    }

    /// The results of the unkeyed prerequisites that have one.
    public var allUnkeyedPrerequisiteResults: [any Sendable] {
        WorkflowLock.lock.withLock {
            let keyed = Set(keyedPrerequisiteIndices.values)
            return prerequisiteIndices.filter { !keyed.contains($0) }.compactMap { task(at: $0)?._result }
        }
    }

    /// The results of the keyed prerequisites, by key (keys whose task has no result are left out).
    public var keyedPrerequisiteResults: [String: any Sendable] {
        WorkflowLock.lock.withLock {
            keyedPrerequisiteIndices.compactMapValues { task(at: $0)?._result }
        }
    }

    /// The result of the prerequisite added under `key`.
    public func prerequisiteResult(forKey key: String) -> (any Sendable)? {
        WorkflowLock.lock.withLock { keyedPrerequisiteIndices[key].flatMap { task(at: $0)?._result } }
    }

    /// The result of the prerequisite added under `key`, if it has type `T`.
    public func prerequisiteResult<T>(forKey key: String, as type: T.Type) -> T? {
        prerequisiteResult(forKey: key) as? T
    }

    /// The results of the prerequisites that have one, by task name... and task.
    public var prerequisiteResultsByTask: [(task: WorkflowTask, result: any Sendable)] {
        WorkflowLock.lock.withLock { prerequisites().compactMap { task in task._result.map { (task, $0) } } }
    }

    /// The workflow, read under the lock (it is set when the task is added).
    var attachedWorkflow: Workflow? { WorkflowLock.lock.withLock { workflow } }

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
/// (cancelled, reset, or replaced by a newer run).
public struct WorkflowTaskRun: Sendable {
    /// The task.
    public let task: WorkflowTask
    /// The run's number (1 for the first run).
    public let number: Int

    /// Finishes this run with `result`, if it is still the task's current run.
    public func finish(with result: (any Sendable)?) {
        task.attachedWorkflow?.perform { $0.finish(task, run: number, result: result) }
    }

    /// Fails this run with `error`, if it is still the task's current run.
    public func fail(with error: any Error) {
        task.attachedWorkflow?.perform { $0.fail(task, run: number, error: error) }
    }
}

/// Told when a task finishes, fails or is cancelled. Methods have empty defaults; they run on the
/// thread that caused the change, never under a lock.
public protocol WorkflowTaskDelegate: AnyObject, Sendable {
    func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?)
    func task(_ task: WorkflowTask, didFailWith error: any Error)
    func taskDidCancel(_ task: WorkflowTask)
}

extension WorkflowTaskDelegate {
    public func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?) {}
    public func task(_ task: WorkflowTask, didFailWith error: any Error) {}
    public func taskDidCancel(_ task: WorkflowTask) {}
}

/// The operation that executes one run of a task on the workflow's queue: it calls the task's
/// `main()` (unless the run is already over) and finishes when the run ends.
final class WorkflowRunOperation: ConcurrentOperation, @unchecked Sendable {
    let task: WorkflowTask
    let run: Int

    init(task: WorkflowTask, run: Int) {
        self.task = task
        self.run = run
        super.init(name: "\(task.name) run \(run)")
    }

    override func execute() {
        let current = WorkflowLock.lock.withLock { task.lifecycle.state == .executing && task.lifecycle.run == run }
        guard current else {
            finish()
            return
        }
        task.main()
    }
}

/// The one lock of all workflows: every task's state, every workflow's structure. Transitions
/// propagate along prerequisites, so one lock keeps a whole graph consistent; no user code runs
/// under it.
enum WorkflowLock {
    static let lock = Lock()
}
