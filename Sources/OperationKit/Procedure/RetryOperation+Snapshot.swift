// RetryOperation+Snapshot: what an executing retry waits for — its current attempt, or the
// delay before the next one.

extension RetryOperation: ChildQueueOwning {
    var childQueueForSnapshot: ConcurrentOperationQueue { attemptQueue }

    func waitBlockers(children: QueueSnapshot, now: UInt32) -> [OperationSnapshot.Blocker] {
        engine.waitBlockers()
    }
}
