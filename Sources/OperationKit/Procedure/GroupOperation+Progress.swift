// GroupOperation: the aggregate progress of its children (its queue's), as a value, a stream and
// a handler; and the group's share in the progress of the queue it runs on.

extension GroupOperation {
    /// The aggregate progress of the group's children — the progress of its queue (see
    /// ``ConcurrentOperationQueue/progress``): each child one unit (or its
    /// ``ConcurrentOperation/progressWeight``), complete once finished, a running one with the
    /// fraction it reported; children added later grow the total. Once the group has finished it
    /// is complete (``OperationProgress/isFinished``, fraction 1).
    ///
    /// In the queue the group runs on, the group counts with this fraction while it runs, so
    /// nested groups add up.
    ///
    /// The group counts its children from the first time its progress is asked for (here,
    /// ``progressUpdates(_:)``, ``observeProgress(_:_:)``, or by the queue it is added to when
    /// that queue's progress is followed): the children it holds then, and every child added
    /// from then on.
    public var childrenProgress: OperationProgress {
        let value = childQueue.progress
        return isFinished ? GroupOperation.complete(value) : value
    }

    /// A stream of ``childrenProgress``: the current value at once, then its changes as `policy`
    /// says (see ``ConcurrentOperationQueue/progressUpdates(_:)``). It ends after the final
    /// update once the group finishes (or when the consumer stops).
    ///
    /// - Parameter policy: How often updates come.
    /// - Returns: The stream.
    public func progressUpdates(_ policy: ProgressUpdatePolicy = .default) -> AsyncStream<OperationProgress> {
        let stream = childQueue.progressUpdates(policy)
        // Finished before the stream joined: close again (the stream gets the final value, ends).
        if isFinished { closeChildrenProgress() }
        return stream
    }

    /// Calls `handler` with ``childrenProgress`` — at once, then on changes as `policy` says
    /// (see ``ConcurrentOperationQueue/observeProgress(_:_:)``) — until the returned observation
    /// is cancelled or the group finishes (the final update is the last call).
    ///
    /// - Parameters:
    ///   - policy: How often the handler is called.
    ///   - handler: Called with each update, one call at a time, with no lock held.
    /// - Returns: The registration; ``ProgressObservation/cancel()`` stops the calls.
    @discardableResult
    public func observeProgress(
        _ policy: ProgressUpdatePolicy = .default, _ handler: @escaping @Sendable (OperationProgress) -> Void
    ) -> ProgressObservation {
        let observation = childQueue.observeProgress(policy, handler)
        if isFinished { closeChildrenProgress() }
        return observation
    }

    /// The group is finishing (its children have all finished): its progress streams get the
    /// final value and end. Only if its progress was asked for.
    func closeChildrenProgress() {
        guard let tracker = childQueue.lock.withLock({ childQueue._progressTracker }) else { return }
        tracker.broadcaster.close(with: GroupOperation.complete(tracker.current))
    }

    /// The queue the group runs on follows progress: the group reports its children's aggregate
    /// as its own progress, on each change, so that it counts with that fraction there. Once.
    func forwardChildrenProgress() {
        let first = ReportedProgressTable.update(self) { entry -> Bool in
            defer { entry.forwardsChildren = true }
            return !entry.forwardsChildren
        }
        guard first else { return }
        childQueue.observeProgress(.everyChange) { [weak self] value in
            guard let self else { return }
            ReportedProgressTable.update(self) { entry in
                entry.completed = value.completed
                entry.total = value.total
                entry.fraction = value.fractionCompleted
                entry.hasReported = true
            }
            progressDidChange()
        }
    }

    private static func complete(_ value: OperationProgress) -> OperationProgress {
        OperationProgress(
            completed: max(value.completed, value.total), total: value.total, fractionCompleted: 1, isFinished: true)
    }
}
