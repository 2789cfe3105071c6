extension ConcurrentOperation: TaskAwaitable {
    var waitLock: Lock { lock }

    func addWaiterLocked(_ waiter: Waiter) -> Bool { addWaiter(waiter) }

    func removeWaiterLocked(_ waiter: TaskWaiter) -> Bool {
        guard let index = waiters.firstIndex(where: { $0.isTask(waiter) }) else { return false }
        waiters.remove(at: index)
        return true
    }

    var isDoneLocked: Bool { waitIsOver }

    func cancelForCancelledWaiter() { cancel() }
}

extension ConcurrentOperation {
    /// Suspends the calling task until the operation has finished (its completion block and, for
    /// a procedure, its did-finish observers returned), doing what `policy` says if the task is
    /// cancelled meanwhile.
    ///
    /// - ``TaskCancellationPolicy/keepWaiting``: the cancellation is ignored; the same as
    ///   ``finished``.
    /// - ``TaskCancellationPolicy/stopWaiting``: the wait ends at once with `CancellationError`;
    ///   the operation carries on untouched and nothing of the wait stays behind in it. An
    ///   operation that had already finished when the task got here returns normally.
    /// - ``TaskCancellationPolicy/cancelAndWait``: ``cancel()`` is called on the operation (on the
    ///   thread that cancels the task), then the wait goes on until the operation has finished.
    ///
    /// - Parameter policy: What to do when the awaiting task is cancelled.
    /// - Throws: `CancellationError`, only with ``TaskCancellationPolicy/stopWaiting``, when the
    ///   task was cancelled before the operation finished.
    public final func waitUntilFinished(whenCancelled policy: TaskCancellationPolicy) async throws(CancellationError) {
        if await !TaskWaiter.wait(for: self, policy: policy) { throw CancellationError() }
    }
}

/// Gives every ``ConcurrentOperation`` the ``finished`` property. ``ConcurrentOperation`` already
/// conforms; there is nothing to implement.
public protocol AwaitableOperation: ConcurrentOperation {}

extension ConcurrentOperation: AwaitableOperation {}

extension AwaitableOperation {
    /// Suspends the calling task until the operation has finished and its completion block (and,
    /// for a ``ProcedureOperation``, its did-finish observers) have returned; at once if they
    /// have. The async `waitUntilFinished()`, spelt as a property:
    ///
    /// ```swift
    /// queue.addOperation(download)
    /// await download.finished
    /// ```
    ///
    /// Cancelling the awaiting task neither cancels the operation nor ends the wait
    /// (``TaskCancellationPolicy/keepWaiting``); use ``ConcurrentOperation/waitUntilFinished(whenCancelled:)`` to
    /// choose. Each awaiting task is resumed exactly once, on the thread that finished the
    /// operation or, if it had finished, at once.
    ///
    /// It is declared on ``AwaitableOperation`` rather than on the class, so that a subclass
    /// with a member of its own named `finished` still compiles (its member hides this one on
    /// its own type).
    public var finished: Void {
        get async { await TaskWaiter.waitIgnoringCancellation(for: self) }
    }

}
