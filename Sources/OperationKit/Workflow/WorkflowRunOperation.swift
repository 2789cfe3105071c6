// WorkflowRunOperation: the runner, an operation on a workflow's queue that executes the workflow's
// started runs one after another (see Workflow+Runners.swift and Architecture.md, "Workflow runners").

import Synchronization

/// A runner: an operation on the workflow's queue that takes the workflow's started runs, in the
/// order they were started, and executes them one after another (see Architecture.md, "Workflow
/// runners"). It holds one slot of the queue, like any operation: a workflow runs at most
/// `maxConcurrentOperationCount` runs at once, and a run whose `main()` returns without finishing
/// keeps the runner — and its slot — until the run ends.
///
/// A workflow starts a runner for each run it starts while it has fewer runners taking runs than
/// one more than the queue's limit (`Workflow.runnerTarget`). A runner stops taking runs when
/// none is left, when the queue is suspended or its limit went down below the workflow's
/// runners, once its turn is over (see `WorkerTurn`: it makes way for the queue's
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
    /// The runner's turn on its thread (see `WorkerTurn`): written on the runner's thread, read
    /// there under the lock.
    @exclusivity(unchecked) private var turn = WorkerTurn(time: .zero)
    /// Set by `cancel()`: the runner takes no more runs, and cancels those waiting.
    private let cancelRequested = Atomic<Bool>(false)
    /// Whether the runner counts among the workflow's runners taking runs (`Workflow.drainers`):
    /// from when it is made until it stops taking runs. Under the workflow's lock.
    @exclusivity(unchecked) var takesRuns = true

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
            turn = WorkerTurn(time: workflow.queue.workerTurnTime)
            var next = workflow.takeRun(for: self, turnOver: false, cancelled: cancelRequested.load(ordering: .acquiring))
            while let (task, run) = next {
                _ = turn.countOne()
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
                next = workflow.takeRun(for: self, turnOver: turn.isOver,
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
        takesRuns && !turn.isOver && !cancelRequested.load(ordering: .acquiring)
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
