// GroupOperation+Snapshot: a group's children as a snapshot, and what an executing group waits
// for (its unfinished children).

extension GroupOperation: ChildQueueOwning {
    var childQueueForSnapshot: ConcurrentOperationQueue { childQueue }

    func waitBlockers(children: QueueSnapshot, now: UInt32) -> [OperationSnapshot.Blocker] {
        let unfinished = children.operations.filter { $0.state != .finished }.map(\.reference)
        return unfinished.isEmpty ? [] : [.children(unfinished)]
    }

    /// What the group's children are doing now: each child with its state, the time since it was
    /// added and since it started, and why each one that is not executing does not run (as
    /// ``ConcurrentOperationQueue/snapshot()`` for a queue). The children wait in a suspended
    /// queue until the group executes.
    ///
    /// - Returns: The snapshot of the children, named after the group.
    public func snapshot() -> QueueSnapshot {
        childQueue.snapshot(source: .group, name: displayName, findCycles: true)
    }
}
