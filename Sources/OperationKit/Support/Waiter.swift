import Dispatch

/// Someone waiting for an operation or a queue: a blocked thread or a suspended task.
/// Resumed exactly once, never while a lock is held.
enum Waiter: Sendable {
    case semaphore(DispatchSemaphore)
    case continuation(CheckedContinuation<Void, Never>)
    case callback(@Sendable () -> Void)
    /// A task that may stop waiting when it is cancelled (see ``TaskWaiter``).
    case task(TaskWaiter)

    func resume() {
        switch self {
        case .semaphore(let semaphore): semaphore.signal()
        case .continuation(let continuation): continuation.resume()
        case .callback(let callback): callback()
        case .task(let waiter): waiter.resumeFinished()
        }
    }

    /// Whether this is the entry of `waiter`.
    func isTask(_ waiter: TaskWaiter) -> Bool {
        if case .task(let mine) = self { return mine === waiter }
        return false
    }
}
