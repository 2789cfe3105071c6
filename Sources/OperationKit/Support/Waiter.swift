import Dispatch

/// Someone waiting for an operation or a queue: a blocked thread or a suspended task.
/// Resumed exactly once, never while a lock is held.
enum Waiter: Sendable {
    case semaphore(DispatchSemaphore)
    case continuation(CheckedContinuation<Void, Never>)
    case callback(@Sendable () -> Void)
    /// A task that may stop waiting when it is cancelled (see ``TaskWaiter``).
    case task(TaskWaiter)
    /// Callbacks run once the operation has finished, kept findable so that more can join them
    /// (``ResultProcedure/onValue(_:)`` and ``ResultProcedure/onError(_:)``).
    case finishCallbacks(FinishCallbacks)

    func resume() {
        switch self {
        case .semaphore(let semaphore): semaphore.signal()
        case .continuation(let continuation): continuation.resume()
        case .callback(let callback): callback()
        case .task(let waiter): waiter.resumeFinished()
        case .finishCallbacks(let callbacks): callbacks.operationDidFinish()
        }
    }

    /// Whether this is the entry of `waiter`.
    func isTask(_ waiter: TaskWaiter) -> Bool {
        if case .task(let mine) = self { return mine === waiter }
        return false
    }
}

extension Waiter {
    func isSemaphore(_ semaphore: DispatchSemaphore) -> Bool {
        if case .semaphore(let mine) = self { return mine === semaphore }
        return false
    }

    /// Blocks the calling thread as a semaphore waiter. `register` adds the waiter under its
    /// owner's lock, or returns `false` when there is nothing to wait for. After `timeout`,
    /// `withdraw` removes it under that lock and returns `true`, or returns `false` if it was
    /// already taken to be resumed. Returns `true` if the wait ended (or was not needed),
    /// `false` on timeout.
    static func block(
        timeout: Duration?, register: (Waiter) -> Bool, withdraw: (DispatchSemaphore) -> Bool
    ) -> Bool {
        let semaphore = DispatchSemaphore(value: 0)
        guard register(.semaphore(semaphore)) else { return true }
        guard let timeout else {
            semaphore.wait()
            return true
        }
        if semaphore.wait(timeout: .now() + timeout.dispatchInterval) == .success { return true }
        return !withdraw(semaphore)
    }
}

extension Array where Element == Waiter {
    /// Resumes the waiters, in order. (Out of line, and called only when there is one: a finish
    /// that nobody waits for, the usual one, holds no `Waiter` value then — whose layout, with a
    /// `CheckedContinuation`, is known only at run time, so that the caller would look up
    /// its type metadata on every call to size its stack.)
    @inline(never)
    func resumeAll() {
        for waiter in self { waiter.resume() }
    }

    /// Removes the waiter of `semaphore`; `false` if it is not (any longer) in the list.
    mutating func remove(semaphore: DispatchSemaphore) -> Bool {
        guard let index = firstIndex(where: { $0.isSemaphore(semaphore) }) else { return false }
        remove(at: index)
        return true
    }
}
