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
