import Dispatch

extension ConcurrentOperation {
    /// Blocks the calling thread until the operation has finished and its completion block has
    /// returned — and, for a ``ProcedureOperation``, its did-finish observers too.
    ///
    /// Do not call it from the operation's own ``execute()``: the operation could never finish.
    ///
    /// Foundation's `Operation.waitUntilFinished()`. From async code, await
    /// ``waitUntilFinished()`` (or ``AwaitableOperation/finished``) instead: it suspends the task
    /// rather than blocking a thread. (The `Blocking` suffix keeps the two apart; see
    /// "Synchronous and asynchronous twins" in Documentation/Semantics.md.)
    public final func waitUntilFinishedBlocking() {
        _ = wait(timeout: nil)
    }

    /// Blocks the calling thread until the operation has finished (completion block and
    /// did-finish observers returned, as for ``waitUntilFinishedBlocking()``) or `timeout` has passed.
    ///
    /// - Parameter timeout: How long to wait at most.
    /// - Returns: `true` if the operation finished, `false` if the wait timed out.
    public final func waitUntilFinishedBlocking(timeout: Duration) -> Bool {
        wait(timeout: timeout)
    }

    private func wait(timeout: Duration?) -> Bool {
        // Timed out: the waiter is withdrawn unless finish() has already taken it.
        Waiter.block(
            timeout: timeout, register: { waiter in lock.withLock { addWaiter(waiter) } },
            withdraw: { semaphore in lock.withLock { waiters.remove(semaphore: semaphore) } })
    }

    /// Suspends the calling task until the operation has finished and its completion block — and,
    /// for a ``ProcedureOperation``, its did-finish observers — have returned. Returns at once if
    /// they have.
    /// Cancelling the waiting task does not cancel the operation and does not end the wait.
    public final func waitUntilFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let alreadyFinished = lock.withLock { !addWaiter(.continuation(continuation)) }
            if alreadyFinished { continuation.resume() }
        }
    }
}
