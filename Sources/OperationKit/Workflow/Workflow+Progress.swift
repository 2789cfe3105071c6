// Workflow: the aggregate progress of its tasks (by count or weight), as a value, a stream and a
// handler; and a task's progress reports and weight.

import Synchronization

/// What a task reported and its weight (protected by the task's lock).
struct WorkflowTaskProgress {
    var weight: Int64 = 1
    var fraction: Double = 0
    /// The run the fraction was reported in; a later run starts from 0.
    var run = 0
    var hasReported = false
}

extension Workflow {
    /// The aggregate progress of the workflow's tasks: each task one unit (or its
    /// ``WorkflowTask/progressWeight``), complete once its run is over — finished, failed or
    /// cancelled — while an executing task counts with the fraction it reported in its current
    /// run (``WorkflowTask/reportProgress(completed:total:)``). Tasks added later grow the total;
    /// a task retried or reset counts as not done again. It is finished once every task has
    /// finished, failed or been cancelled (a failed task's pending dependents keep it from
    /// finishing).
    ///
    /// The workflow keeps no count for it until it is asked for (here, ``progressUpdates(_:)``
    /// or ``observeProgress(_:_:)``); from then on each of its events recomputes it, in time
    /// proportional to the number of tasks.
    public var progress: OperationProgress {
        progressBroadcaster().current
    }

    /// A stream of the workflow's ``progress``: the current value at once, then its changes as
    /// `policy` says (see ``ConcurrentOperationQueue/progressUpdates(_:)``). It ends when the
    /// workflow is released or the consumer stops.
    ///
    /// - Parameter policy: How often updates come.
    /// - Returns: The stream.
    public func progressUpdates(_ policy: ProgressUpdatePolicy = .default) -> AsyncStream<OperationProgress> {
        progressBroadcaster().stream(policy)
    }

    /// Calls `handler` with the workflow's ``progress`` — at once, then on changes as `policy`
    /// says — until the returned observation is cancelled or the workflow is released. Calls come
    /// one at a time, in order, with no lock held.
    ///
    /// - Parameters:
    ///   - policy: How often the handler is called.
    ///   - handler: Called with each update.
    /// - Returns: The registration; ``ProgressObservation/cancel()`` stops the calls.
    @discardableResult
    public func observeProgress(
        _ policy: ProgressUpdatePolicy = .default, _ handler: @escaping @Sendable (OperationProgress) -> Void
    ) -> ProgressObservation {
        progressBroadcaster().observe(policy, handler)
    }

    // MARK: Internal

    /// The workflow's broadcaster, made the first time: from then on an internal listener
    /// recomputes the progress on each event.
    func progressBroadcaster() -> ProgressBroadcaster {
        let (broadcaster, made) = lock.withLock { () -> (ProgressBroadcaster, Bool) in
            if let broadcaster = _progressBroadcaster { return (broadcaster, false) }
            let broadcaster = ProgressBroadcaster()
            _progressBroadcaster = broadcaster
            followsProgress.store(true, ordering: .releasing)
            nextStreamID += 1
            listeners[nextStreamID] = { [weak self] _ in self?.progressChanged() }
            return (broadcaster, true)
        }
        if made { progressChanged() }
        return broadcaster
    }

    /// Recomputes the progress and publishes it, if it is followed (one atomic load if not).
    func progressChanged() {
        guard followsProgress.load(ordering: .acquiring) else { return }
        let computed = lock.withLock { () -> (ProgressBroadcaster, OperationProgress, UInt64)? in
            guard let broadcaster = _progressBroadcaster else { return nil }
            progressVersion += 1
            return (broadcaster, progressLocked(), progressVersion)
        }
        guard let computed else { return }
        computed.0.publish(computed.1, sourceVersion: computed.2)
    }

    /// Under the lock: the aggregate of the tasks.
    private func progressLocked() -> OperationProgress {
        var total: Int64 = 0
        var completed: Int64 = 0
        var partial: Double = 0
        var done = true
        for task in tasks {
            let progress = task._progress
            total += progress.weight
            switch task.lifecycle.state {
            case .finished, .failed, .cancelled:
                completed += progress.weight
            case .executing:
                done = false
                if progress.hasReported && progress.run == task.lifecycle.run {
                    partial += Double(progress.weight) * progress.fraction
                }
            case .pending, .ready:
                done = false
            }
        }
        let finished = !tasks.isEmpty && done
        let fraction = finished ? 1 : (total > 0 ? (Double(completed) + partial) / Double(total) : 0)
        return OperationProgress(completed: completed, total: total, fractionCompleted: fraction, isFinished: finished)
    }
}

extension WorkflowTask {
    /// Reports how far the current run's work has come, from any thread (typically from
    /// ``main()`` or the work it started): `completed` of `total` units. The workflow's
    /// ``Workflow/progress`` counts the fraction while the task executes. Ignored unless the task
    /// is executing; a new run starts from 0 again.
    ///
    /// - Parameters:
    ///   - completed: The units done, from 0 to `total`.
    ///   - total: The units of the whole work; 0 if not known yet.
    public func reportProgress(completed: Int64, total: Int64) {
        reportProgress(completed: completed, total: total, run: executingRunNumber)
    }

    /// Reports progress for `run`, or for the current run if `nil`.
    func reportProgress(completed: Int64, total: Int64, run: Int?) {
        let fraction = OperationProgress(completed: completed, total: total).fractionCompleted
        let attached = withTaskLock { () -> Workflow? in
            guard lifecycle.state == .executing else { return nil }
            let current = lifecycle.run
            guard run == nil || run == current else { return nil }
            _progress.fraction = fraction
            _progress.run = current
            _progress.hasReported = true
            return self.workflow
        }
        attached?.progressChanged()
    }

    /// The task's weight in its workflow's ``Workflow/progress``: how many units it counts for
    /// (1 by default; 0 leaves it out). Readable and writable from any thread, at any time. A
    /// weight outside 0 to ``OperationProgress/maximumWeight`` is clamped to that range.
    public var progressWeight: Int64 {
        get { withTaskLock { _progress.weight } }
        set {
            let weight = OperationProgress.clampedWeight(newValue)
            let attached = withTaskLock { () -> Workflow? in
                _progress.weight = weight
                return self.workflow
            }
            attached?.progressChanged()
        }
    }
}

extension WorkflowTaskRun {
    /// Reports how far this run's work has come (see ``WorkflowTask/reportProgress(completed:total:)``);
    /// ignored once the run is over.
    ///
    /// - Parameters:
    ///   - completed: The units done, from 0 to `total`.
    ///   - total: The units of the whole work; 0 if not known yet.
    public func reportProgress(completed: Int64, total: Int64) {
        task.reportProgress(completed: completed, total: total, run: number)
    }
}
