// RetryOperation+Snapshot: what an executing retry waits for — its current attempt, or the
// delay before the next one.

extension RetryOperation: ChildQueueOwning {
    var childQueueForSnapshot: ConcurrentOperationQueue { attemptQueue }

    func waitBlockers(children: QueueSnapshot, now: UInt32) -> [OperationSnapshot.Blocker] {
        let (attempt, current, waiting, delay, since) = machine.lock.withLock {
            (_attemptCount, self.current, self.waiting, waitingDelay, waitingStamp)
        }
        if waiting {
            let elapsed = CoarseClock.elapsed(since: since, now: now) ?? .zero
            return [.retryDelay(nextAttempt: attempt + 1, delay: delay, remaining: max(.zero, delay - elapsed))]
        }
        guard let current else { return [] }
        return [.retryAttempt(attempt, OperationReference(current))]
    }
}
