/// The states of a ``WorkflowTask``, with Task.framework's transitions.
///
/// A new task is ``ready``. The transitions:
///
/// | from | to | when |
/// |---|---|---|
/// | pending | ready | its last unfinished prerequisite finished (it then starts at once, unless the workflow is suspended) |
/// | pending | cancelled | ``WorkflowTask/cancel()`` reached it |
/// | ready | pending | it was added with an unfinished prerequisite, or a prerequisite was reset |
/// | ready | executing | ``WorkflowTask/start()`` or ``Workflow/start()`` (while the workflow is suspended: when it is resumed) |
/// | ready | cancelled | ``WorkflowTask/cancel()`` reached it |
/// | executing | finished | the run finished (``WorkflowTaskRun/finish(with:)``) |
/// | executing | failed | the run failed (``WorkflowTaskRun/fail(with:)``) |
/// | executing | cancelled | ``WorkflowTask/cancel()`` reached it; the run is over |
/// | executing | pending | ``WorkflowTask/reset()`` reached it; the run is over |
/// | finished | pending | ``WorkflowTask/reset()`` reached it |
/// | failed | pending | ``WorkflowTask/retry()`` or ``WorkflowTask/reset()`` reached it |
/// | cancelled | pending | ``WorkflowTask/retry()`` or ``WorkflowTask/reset()`` reached it |
///
/// A task that becomes pending through a retry or a reset is checked again at once, in the same
/// step: if all its prerequisites have finished it becomes ready, and after a retry it also
/// starts. So a retried task is seen executing, a reset one ready or pending.
public enum WorkflowTaskState: Int, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Some prerequisite has not finished (it may be waiting, running, failed or cancelled).
    case pending
    /// Every prerequisite has finished (or there are none) and no run is in progress; the task
    /// waits to be started. A task whose last prerequisite finishes does not stay ready: it
    /// starts at once — unless its workflow is suspended (``Workflow/isSuspended``), which holds
    /// it ready until it is resumed.
    case ready
    /// A run is in progress: from the start (it may still be waiting for a runner, or a place on
    /// the workflow's queue) until the run finishes or fails, or the task is cancelled or reset.
    case executing
    /// The last run finished, with the task's ``WorkflowTask/result`` (which may be `nil`).
    case finished
    /// The last run failed with the task's ``WorkflowTask/error``. Its dependents stay pending
    /// until it is retried and finishes.
    case failed
    /// Cancelled; its dependents were cancelled with it.
    case cancelled

    /// The state's name, for example `pending`.
    public var description: String {
        switch self {
        case .pending: "pending"
        case .ready: "ready"
        case .executing: "executing"
        case .finished: "finished"
        case .failed: "failed"
        case .cancelled: "cancelled"
        }
    }
}

/// The transition function of a ``WorkflowTask``: its state and the number of its current run.
/// One `mutating func` per event, returning whether the state changed. Holds no lock and calls
/// nothing; the workflow calls it under its lock and acts afterwards.
///
/// Task.framework's table: pending → ready (all prerequisites finished) or cancelled; ready →
/// pending (a prerequisite is no longer finished), executing or cancelled; executing → finished,
/// failed, cancelled or pending (reset); cancelled → pending (retry, reset); finished → pending
/// (reset); failed → pending (retry, reset). A finish or fail for a run that is not the current
/// one (cancelled or reset meanwhile, or replaced by a newer run) changes nothing.
struct WorkflowTaskLifecycle: Hashable, Sendable {
    private(set) var state: WorkflowTaskState = .ready
    /// The number of the current (or last) run; 0 before the first.
    private(set) var run = 0

    init() {}

    init(state: WorkflowTaskState, run: Int = 0) {
        self.state = state
        self.run = run
    }

    /// Prerequisites: every one has finished (`true`) or one has not (`false`). Moves between
    /// pending and ready; no other state changes.
    mutating func prerequisitesChanged(allFinished: Bool) -> Bool {
        switch (state, allFinished) {
        case (.pending, true):
            state = .ready
            return true
        case (.ready, false):
            state = .pending
            return true
        default:
            return false
        }
    }

    /// Starts a run: ready → executing. Returns the run's number, or `nil` if not ready.
    mutating func start() -> Int? {
        guard state == .ready else { return nil }
        state = .executing
        run += 1
        return run
    }

    /// The run `run` finished.
    mutating func finish(run: Int) -> Bool {
        guard state == .executing, run == self.run else { return false }
        state = .finished
        return true
    }

    /// The run `run` failed.
    mutating func fail(run: Int) -> Bool {
        guard state == .executing, run == self.run else { return false }
        state = .failed
        return true
    }

    /// Cancel: pending, ready or executing → cancelled.
    mutating func cancel() -> Bool {
        switch state {
        case .pending, .ready, .executing:
            state = .cancelled
            return true
        case .finished, .failed, .cancelled:
            return false
        }
    }

    /// Retry: cancelled or failed → pending (then ``prerequisitesChanged(allFinished:)``).
    mutating func retry() -> Bool {
        switch state {
        case .cancelled, .failed:
            state = .pending
            return true
        case .pending, .ready, .executing, .finished:
            return false
        }
    }

    /// Reset: ready, executing, finished, failed or cancelled → pending (then
    /// ``prerequisitesChanged(allFinished:)``). A pending task has nothing to reset.
    mutating func reset() -> Bool {
        switch state {
        case .ready, .executing, .finished, .failed, .cancelled:
            state = .pending
            return true
        case .pending:
            return false
        }
    }
}
