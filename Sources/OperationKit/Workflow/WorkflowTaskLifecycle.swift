/// The states of a ``WorkflowTask`` (Task.framework's).
public enum WorkflowTaskState: Int, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Waiting for a prerequisite to finish.
    case pending
    /// Every prerequisite has finished; the task starts when told (or when its last prerequisite
    /// finishes during a run).
    case ready
    /// A run is in progress.
    case executing
    /// The last run finished with a result.
    case finished
    /// The last run failed with an error. Dependents do not run.
    case failed
    /// Cancelled. Dependents are cancelled too.
    case cancelled

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
/// one (cancelled or reset meanwhile) changes nothing.
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
