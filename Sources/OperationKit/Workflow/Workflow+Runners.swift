// Workflow+Runners: the started runs waiting for a runner, and the runners that take them (see
// WorkflowRunOperation and Architecture.md, "Workflow runners").

/// A started run waiting for a runner: its task's index in the workflow (the workflow holds its
/// tasks, so the list holds no reference of its own) and the run's number.
struct PendingRun {
    let index: Int
    let run: Int
}

extension Workflow {
    /// The name of the workflow's runners on its queue.
    var runnerName: String { "runs of \(name)" }

    /// Under the lock: the number of entries in `pendingRuns` not taken yet (some may be over).
    var pendingRunCount: Int { pendingRuns.count - pendingHead }

    /// How many runners the workflow keeps taking runs while runs wait: one more than the queue's
    /// limit, so that one runner waits in the queue for a place, as each waiting run's own
    /// operation did before runs shared runners — the queue starts it as soon as a place frees up
    /// or its limit is raised, even while the other runners are held by runs that do not return.
    var runnerTarget: Int { queue.limitMirror.load(ordering: .acquiring) + 1 }

    /// Under the lock: queues `run` of `task`, just started, for a runner; returns a new runner
    /// to add to the queue if the workflow has fewer runners taking runs than `runnerTarget`.
    /// `stamp`: the ``CoarseClock`` stamp of the start. `mayMakeRunner`: `false` if a runner is known to take the run next (or to be replaced if
    /// it cannot).
    func queueRunLocked(_ task: WorkflowTask, run: Int, stamp: UInt32, mayMakeRunner: Bool = true) -> WorkflowRunOperation? {
        task.runQueuedStamp = stamp
        pendingRuns.append(PendingRun(index: task.index, run: run))
        guard mayMakeRunner, drainers < runnerTarget else { return nil }
        drainers += 1
        return WorkflowRunOperation(workflow: self)
    }

    /// Under the lock: the next waiting run that is still its task's current, executing run, or
    /// `nil`. Runs ended while they waited (cancelled, reset) are dropped on the way.
    func takePendingRunLocked() -> (task: Unmanaged<WorkflowTask>, run: Int)? {
        while pendingHead < pendingRuns.count {
            let next = pendingRuns[pendingHead]
            pendingHead += 1
            if pendingHead == pendingRuns.count {
                // A long list's storage is given back; a short one's is kept for the next runs,
                // emptied element by element (plain values: a decrement each), which for the
                // one run a chain queues at a time is cheaper than `removeAll(keepingCapacity:)`.
                if pendingRuns.count <= 1_024 {
                    while !pendingRuns.isEmpty { pendingRuns.removeLast() }
                } else {
                    pendingRuns = []
                }
                pendingHead = 0
            }
            let task = Unmanaged.passUnretained(tasks[next.index])
            let waiting = task._withUnsafeGuaranteedRef {
                $0.lifecycle.state == .executing && $0.lifecycle.run == next.run && $0.runOperation == nil
            }
            if waiting { return (task, next.run) }
        }
        return nil
    }

    /// Under the lock, at the end of a change that ended `runner`'s run on its thread: hands it
    /// the next waiting run, if it may take one (as `takeRun` decides), so that the runner goes
    /// on without taking the lock again. The run begins once the current run's `main()` returns.
    /// `stamp`: the time, read before the lock (0 if it was not).
    func handNextRunLocked(to unmanagedRunner: Unmanaged<WorkflowRunOperation>, stamp: UInt32) {
        unmanagedRunner._withUnsafeGuaranteedRef { runner in
            guard pendingHead < pendingRuns.count, runner.acceptsNextLocked, runnersMayGoOnLocked,
                  let next = assignPendingRunLocked(to: runner, stamp: stamp) else { return }
            runner.handNextLocked(next.task, run: next.run)
        }
    }

    /// Under the lock: whether the workflow's runners may take another run — the queue is not
    /// suspended, and its limit did not go down below the runners taking runs.
    private var runnersMayGoOnLocked: Bool {
        !queue.suspendedMirror.load(ordering: .acquiring) && drainers <= runnerTarget
    }

    /// Under the lock: takes the next waiting run (see `takePendingRunLocked`) for `runner`, which
    /// becomes its task's runner from `stamp` (read now if 0).
    private func assignPendingRunLocked(
        to runner: WorkflowRunOperation, stamp: UInt32
    ) -> (task: Unmanaged<WorkflowTask>, run: Int)? {
        guard let next = takePendingRunLocked() else { return nil }
        next.task._withUnsafeGuaranteedRef {
            $0.runOperation = Unmanaged.passUnretained(runner)
            $0.runStartedStamp = stamp != 0 ? stamp : CoarseClock.stamp()
        }
        return next
    }

    /// Under the lock: `runner` stops taking runs (if it has not already). If runs still wait and
    /// the workflow may have another runner, returns a new one to add to the queue.
    func runnerStoppedLocked(_ runner: WorkflowRunOperation) -> WorkflowRunOperation? {
        guard runner.takesRuns else { return nil }
        runner.takesRuns = false
        drainers -= 1
        guard pendingRunCount > 0, drainers < runnerTarget else { return nil }
        drainers += 1
        return WorkflowRunOperation(workflow: self)
    }

    /// Adds a runner made under the lock to the queue (without the lock). It cannot be refused:
    /// it was just made, is in no queue and has no dependencies.
    private func addRunner(_ runner: WorkflowRunOperation?) {
        if let runner { try? queue.addOperation(runner) }
    }

    /// The next run for `runner`, or `nil` when the runner stops: nothing waits; the queue is
    /// suspended, or its limit went down and the workflow has more runners than `runnerTarget`;
    /// its turn is over (`turnOver`, see `WorkerTurn`); or the runner was cancelled. A runner that stops while runs wait is
    /// replaced (the new one waits in the queue like any operation).
    func takeRun(for runner: WorkflowRunOperation, turnOver: Bool, cancelled: Bool) -> (Unmanaged<WorkflowTask>, Int)? {
        let queue = queue
        enum Decision {
            case run(Unmanaged<WorkflowTask>, Int)
            case stop(WorkflowRunOperation?)
        }
        if turnOver {
            // A worker's turn of runs: the worker makes way after this runner (see
            // `ConcurrentOperationQueue.runWorker(handedOff:)`), and the runs left go to another.
            queue.workerMakeWay.store(true, ordering: .relaxed)
            addRunner(lock.withLock { runnerStoppedLocked(runner) })
            return nil
        }
        let decision: Decision = lock.withLock {
            if cancelled || !runnersMayGoOnLocked {
                return .stop(runnerStoppedLocked(runner))
            }
            guard let next = assignPendingRunLocked(to: runner, stamp: 0) else {
                runner.takesRuns = false
                drainers -= 1
                return .stop(nil)
            }
            runner.beganLocked(next.task, run: next.run)
            return .run(next.task, next.run)
        }
        switch decision {
        case .run(let task, let run):
            return (task, run)
        case .stop(let replacement):
            addRunner(replacement)
            return nil
        }
    }

    /// After the `main()` of `runner`'s run returned without the run ending on that thread: the
    /// runner takes no more runs (another is queued if runs wait). Returns whether it keeps the
    /// run — it did not end: the runner's operation finishes when it does — or not (it ended on
    /// another thread, which finishes the operation; the runner may finish it too).
    func runnerKeepsRun(_ runner: WorkflowRunOperation) -> Bool {
        let (keeps, replacement) = lock.withLock { () -> (Bool, WorkflowRunOperation?) in
            (!runner.isRunOverLocked, runnerStoppedLocked(runner))
        }
        addRunner(replacement)
        return keeps
    }

    /// A runner leaves without executing: it was cancelled in its queue. If runs wait (started
    /// since the cancel), another runner is queued.
    func runnerLeft(_ runner: WorkflowRunOperation) {
        addRunner(lock.withLock { runnerStoppedLocked(runner) })
    }
}
