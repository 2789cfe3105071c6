import Dispatch

// ConcurrentOperationQueue: cancelling every operation, and waiting (blocking, async, or with a
// callback) until the queue has none.
extension ConcurrentOperationQueue {
    /// Cancels every operation in the queue. Those that have not started finish without executing
    /// as soon as the queue reaches them (at once unless the queue is suspended).
    public func cancelAllOperations() {
        for operation in operations { operation.cancel() }
    }

    /// Blocks the calling thread until the queue has no operations: every operation in it has
    /// finished **and** its completion block and, for a ``ProcedureOperation``, its did-finish
    /// observers have returned. Called from one of this queue's own operations it returns at
    /// once, since it could never return otherwise.
    ///
    /// Foundation's `OperationQueue.waitUntilAllOperationsAreFinished()`. From async code, await
    /// ``waitUntilAllOperationsAreFinished()`` instead: it suspends the task rather than blocking a
    /// thread. (The `Blocking` suffix keeps the two apart, so that the compiler never picks this
    /// one for an `await`; see "Synchronous and asynchronous twins" in Documentation/Semantics.md.)
    public func waitUntilAllOperationsAreFinishedBlocking() {
        _ = wait(timeout: nil)
    }

    /// Blocks the calling thread until the queue has no operations (as
    /// ``waitUntilAllOperationsAreFinished()`` says: finished, completion blocks and did-finish
    /// observers returned) or `timeout` has passed.
    ///
    /// - Returns: `true` if the queue emptied, `false` on timeout (or when called from one of this
    ///   queue's own operations).
    public func waitUntilAllOperationsAreFinishedBlocking(timeout: Duration) -> Bool {
        wait(timeout: timeout)
    }

    /// Suspends the calling task until the queue has no operations: every operation in it has
    /// finished **and** its completion block and, for a ``ProcedureOperation``, its did-finish
    /// observers have returned.
    public func waitUntilAllOperationsAreFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let empty = lock.withLock {
                if count == 0 { return true }
                waiters.append(.continuation(continuation))
                return false
            }
            if empty { continuation.resume() }
        }
    }

    /// Calls `callback` once the queue has no operations: at once (on the calling thread) if it
    /// has none now, else on the thread whose operation leaves it empty, without any lock held.
    func notifyWhenEmpty(_ callback: @escaping @Sendable () -> Void) {
        let empty = lock.withLock {
            if count == 0 { return true }
            waiters.append(.callback(callback))
            return false
        }
        if empty { callback() }
    }

    /// Blocks until the queue is empty or `timeout` passed; `true` if it emptied.
    private func wait(timeout: Duration?) -> Bool {
        if CurrentQueue.value === self { return timeout == nil }
        return Waiter.block(
            timeout: timeout,
            register: { waiter in
                lock.withLock {
                    if count == 0 { return false }
                    waiters.append(waiter)
                    return true
                }
            },
            withdraw: { semaphore in lock.withLock { waiters.remove(semaphore: semaphore) } })
    }
}
