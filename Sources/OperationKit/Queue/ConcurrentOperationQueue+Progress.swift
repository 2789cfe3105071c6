// ConcurrentOperationQueue: the aggregate progress of its operations (by count or weight, or
// filling a total the user set), as a value, an AsyncStream and a handler, coalesced.

import Synchronization

extension ConcurrentOperationQueue {
    /// The progress of the queue's operations, aggregated: each operation is one unit (or its
    /// ``ConcurrentOperation/progressWeight``), complete once it has finished or been cancelled
    /// (at once, even while it still executes), while a running one counts with the fraction it
    /// reported
    /// (``ConcurrentOperation/reportProgress(completed:total:)``). Operations added later grow the
    /// total; with ``progressTotalUnitCount`` set, they fill up that total instead.
    ///
    /// ```swift
    /// let queue = ConcurrentOperationQueue(name: "work")
    /// let updates = queue.progressUpdates()
    /// try queue.addOperations(work, waitUntilFinished: false)
    /// for await progress in updates {
    ///     print(progress)              // 0/100 (0%) … 100/100 (100%) finished
    ///     if progress.isFinished { break }
    /// }
    /// ```
    ///
    /// The queue counts from the first time its progress is asked for (this property,
    /// ``progressUpdates(_:)``, ``observeProgress(_:_:)`` or ``progressTotalUnitCount``): the
    /// operations it holds then, and every operation added from then on. (One being added at
    /// that very moment may be left out.) Until then it pays nothing for progress; from then
    /// on, each add and finish updates the aggregate under a lock of its own.
    public var progress: OperationProgress {
        progressTracker().current
    }

    /// A stream of the queue's ``progress``: the current value at once, then its changes as
    /// `policy` says — by default at most one update per 100 ms (the latest value; the update
    /// that makes the work complete comes at once), or every change with
    /// ``ProgressUpdatePolicy/everyChange``. Each call makes another stream.
    ///
    /// The values are yielded on the thread that made the change (or a timer's thread) with no
    /// lock of the queue held. The stream ends when the queue is released or the consumer stops;
    /// not when the work is complete, since more operations may be added (break out of the loop
    /// on ``OperationProgress/isFinished``).
    ///
    /// - Parameter policy: How often updates come.
    /// - Returns: The stream. A coalesced stream buffers only the latest value.
    public func progressUpdates(_ policy: ProgressUpdatePolicy = .default) -> AsyncStream<OperationProgress> {
        progressTracker().broadcaster.stream(policy)
    }

    /// Calls `handler` with the queue's ``progress`` — at once, then on changes as `policy` says
    /// (see ``progressUpdates(_:)``) — until the returned observation is cancelled or the queue
    /// is released.
    ///
    /// Calls come one at a time, in order, with no lock held: on the thread whose change found
    /// the handler idle (which goes on with the changes made meanwhile), or on a timer's thread.
    ///
    /// - Parameters:
    ///   - policy: How often the handler is called.
    ///   - handler: Called with each update.
    /// - Returns: The registration; ``ProgressObservation/cancel()`` stops the calls.
    @discardableResult
    public func observeProgress(
        _ policy: ProgressUpdatePolicy = .default, _ handler: @escaping @Sendable (OperationProgress) -> Void
    ) -> ProgressObservation {
        progressTracker().broadcaster.observe(policy, handler)
    }

    /// A total number of units for ``progress``, like Foundation's `progress.totalUnitCount`:
    /// when set, finished operations fill it up (each with its weight) and the total no longer
    /// grows as operations are added; ``progress`` is finished once nothing counted is left
    /// running and the completed units reached it. `nil` (the default): the total is the weight
    /// of the operations counted.
    public var progressTotalUnitCount: Int64? {
        get { progressTracker().totalUnitCount }
        set { progressTracker().setTotalUnitCount(newValue) }
    }

    /// Sets the operation's ``ConcurrentOperation/progressWeight`` to `progressWeight`, then adds
    /// it as ``addOperation(_:)-(ConcurrentOperation)`` does.
    ///
    /// - Parameters:
    ///   - operation: The operation.
    ///   - progressWeight: How many units it counts for in the queue's ``progress``.
    /// - Throws: What ``addOperation(_:)-(ConcurrentOperation)`` throws.
    public func addOperation(_ operation: ConcurrentOperation, progressWeight: Int64) throws(OperationError) {
        operation.progressWeight = progressWeight
        try addOperation(operation)
    }

    // MARK: Internal

    /// The queue's tracker, made (and seeded with the operations the queue holds) the first time.
    func progressTracker() -> QueueProgressTracker {
        let (tracker, groups) = lock.withLock { () -> (QueueProgressTracker, [GroupOperation]) in
            if let tracker = _progressTracker { return (tracker, []) }
            // Listened to from now on, before the operations are read: a finish that the reads
            // below miss (it came after) sees the flag (its operation's lock orders the two) and
            // tells the tracker, once this lock is released.
            let tracker = QueueProgressTracker()
            _progressTracker = tracker
            updateHasListenersLocked()
            var aggregate = ProgressAggregate()
            var groups: [GroupOperation] = []
            var node = first
            while let entry = node {
                let operation = entry.takeUnretainedValue()
                node = operation.queueNext
                let reported = ReportedProgressTable.entry(for: operation)
                let weight = reported?.weight ?? 1
                if operation.isFinished {
                    aggregate.addFinished(weight: weight)
                } else {
                    _ = aggregate.add(ObjectIdentifier(operation), weight: weight, fraction: reported?.fraction ?? 0)
                    if operation.isCancelled { _ = aggregate.cancel(ObjectIdentifier(operation)) }
                    if let group = operation as? GroupOperation { groups.append(group) }
                }
            }
            tracker.seed(aggregate)
            return (tracker, groups)
        }
        for group in groups { group.forwardChildrenProgress() }
        return tracker
    }

    /// `operation`, of this queue, reported progress: the tracker, if any, counts it.
    func operationProgressDidChange(_ operation: ConcurrentOperation) {
        guard hasListeners.load(ordering: .acquiring), let tracker = lock.withLock({ _progressTracker }) else { return }
        tracker.operationReported(operation)
    }

    /// `operation`, of this queue, was cancelled: the tracker, if any, counts it as complete.
    func operationWasCancelled(_ operation: ConcurrentOperation) {
        guard hasListeners.load(ordering: .acquiring), let tracker = lock.withLock({ _progressTracker }) else { return }
        tracker.operationCancelled(operation)
    }
}

/// A queue's aggregate progress: the ``ProgressAggregate`` and the broadcaster of its value. The
/// queue tells it, through its listeners (`notify`), of each operation added and finished.
///
/// Locking: the aggregate is protected by the broadcaster's lock, under which only the
/// reported-progress side table (a leaf) is read.
final class QueueProgressTracker {
    let broadcaster = ProgressBroadcaster()
    // protected by broadcaster.lock
    private var aggregate = ProgressAggregate()

    /// Before the tracker is published: its first state.
    func seed(_ aggregate: ProgressAggregate) {
        var effects = ProgressBroadcaster.Effects()
        broadcaster.lock.withLock {
            self.aggregate = aggregate
            broadcaster.publishLocked(aggregate.progress, into: &effects)
        }
        broadcaster.perform(effects)
    }

    var current: OperationProgress { broadcaster.lock.withLock { broadcaster.current } }

    var totalUnitCount: Int64? { broadcaster.lock.withLock { aggregate.totalUnitCount } }

    func setTotalUnitCount(_ total: Int64?) {
        change { $0.totalUnitCount = total }
    }

    /// Changes the aggregate under the lock and publishes it.
    private func change(_ body: (inout ProgressAggregate) -> Void) {
        var effects = ProgressBroadcaster.Effects()
        broadcaster.lock.withLock {
            body(&aggregate)
            broadcaster.publishLocked(aggregate.progress, into: &effects)
        }
        broadcaster.perform(effects)
    }

    /// The queue added `operation` (did add).
    func operationAdded(_ operation: ConcurrentOperation) {
        // Cancelled before it was added (read without this lock: an operation's lock is never
        // taken under it). A cancel between this read and the add below counts at the finish.
        let cancelled = operation.isCancelled
        change { aggregate in
            // Read under the lock: a report made meanwhile is either read here or finds the member.
            let reported = ReportedProgressTable.entry(for: operation)
            let id = ObjectIdentifier(operation)
            _ = aggregate.add(id, weight: reported?.weight ?? 1, fraction: reported?.fraction ?? 0)
            if cancelled { _ = aggregate.cancel(id) }
        }
        if let group = operation as? GroupOperation { group.forwardChildrenProgress() }
    }

    /// `operation` reported progress.
    func operationReported(_ operation: ConcurrentOperation) {
        change { aggregate in
            guard let reported = ReportedProgressTable.entry(for: operation) else { return }
            _ = aggregate.update(ObjectIdentifier(operation), fraction: reported.fraction)
        }
    }

    /// `operation` was cancelled: it counts as complete (before it finishes).
    func operationCancelled(_ operation: ConcurrentOperation) {
        change { _ = $0.cancel(ObjectIdentifier(operation)) }
    }

    /// `operation` finished (did finish): it counts as complete.
    func operationFinished(_ operation: ConcurrentOperation) {
        change { _ = $0.finish(ObjectIdentifier(operation)) }
    }
}

// The aggregate is protected by the broadcaster's lock; the broadcaster is immutable.
extension QueueProgressTracker: @unchecked Sendable {}
