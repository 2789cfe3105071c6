/// Something a task can wait for — an operation to finish, a queue to empty — through a list of
/// ``Waiter``s guarded by one lock. Every `…Locked` requirement is called with ``waitLock`` held
/// and must not call out.
protocol TaskAwaitable: AnyObject, Sendable {
    /// The lock that guards the waiter list.
    var waitLock: Lock { get }
    /// Under ``waitLock``: adds `waiter` unless the awaited event has happened. Returns whether it
    /// was added; a waiter that was added is resumed exactly once, after the event, by whoever
    /// took it out of the list.
    func addWaiterLocked(_ waiter: Waiter) -> Bool
    /// Under ``waitLock``: removes the entry of `waiter` if it is still listed. Returns whether it
    /// was (if not, the event took it and will resume it).
    func removeWaiterLocked(_ waiter: TaskWaiter) -> Bool
    /// Under ``waitLock``: whether the awaited event has happened.
    var isDoneLocked: Bool { get }
    /// What ``TaskCancellationPolicy/cancelAndWait`` cancels. Called with no lock held.
    func cancelForCancelledWaiter()
}

/// A suspended task that may stop waiting: the entry of ``Waiter/task(_:)``.
///
/// Its continuation is resumed exactly once: by the event, with `true`, if the event took the
/// entry out of the list; by the task's cancellation handler, with `false`, if the handler took it
/// out first; or at once by the task itself when there was nothing to wait for.
final class TaskWaiter {
    // protected by the `waitLock` of the awaited object. Written only under it; read without it
    // only by `resumeFinished()`, after the event took the entry out of the list (from then on
    // nothing writes it).
    private var continuation: CheckedContinuation<Bool, Never>?
    /// The task was cancelled before it suspended.
    private var cancelledEarly = false

    init() {}

    /// Called by the event (through ``Waiter/resume()``), with no lock held.
    func resumeFinished() {
        continuation?.resume(returning: true)
    }

    /// Waits for `awaited`, as `policy` says. Returns `true` once the event has happened; `false`
    /// if the task stopped waiting (``TaskCancellationPolicy/stopWaiting`` only).
    static func wait<Awaited: TaskAwaitable>(for awaited: Awaited, policy: TaskCancellationPolicy) async -> Bool {
        switch policy {
        case .keepWaiting:
            await waitIgnoringCancellation(for: awaited)
            return true
        case .cancelAndWait:
            await withTaskCancellationHandler {
                await waitIgnoringCancellation(for: awaited)
            } onCancel: {
                awaited.cancelForCancelledWaiter()
            }
            return true
        case .stopWaiting:
            return await waitUnlessCancelled(for: awaited)
        }
    }

    /// The cheapest wait: a plain continuation in the list, never withdrawn.
    static func waitIgnoringCancellation<Awaited: TaskAwaitable>(for awaited: Awaited) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = awaited.waitLock.withLock { !awaited.addWaiterLocked(.continuation(continuation)) }
            if done { continuation.resume() }
        }
    }

    private static func waitUnlessCancelled<Awaited: TaskAwaitable>(for awaited: Awaited) async -> Bool {
        let waiter = TaskWaiter()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let immediate = awaited.waitLock.withLock { () -> Bool? in
                    // An event that has happened wins over a cancellation.
                    if waiter.cancelledEarly { return awaited.isDoneLocked }
                    waiter.continuation = continuation
                    if awaited.addWaiterLocked(.task(waiter)) { return nil }
                    waiter.continuation = nil
                    return true
                }
                // We must not resume the continuation while holding the lock.
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            let stopped = awaited.waitLock.withLock { () -> CheckedContinuation<Bool, Never>? in
                guard let continuation = waiter.continuation else {
                    // Not suspended yet (or it needed not suspend): the task sees the flag.
                    waiter.cancelledEarly = true
                    return nil
                }
                // Still listed: take it out, and resume it here. Not listed: the event has taken
                // it and resumes it.
                guard awaited.removeWaiterLocked(waiter) else { return nil }
                waiter.continuation = nil
                return continuation
            }
            stopped?.resume(returning: false)
        }
    }
}

// `continuation` and `cancelledEarly` are protected by the `waitLock` of the object waited for
// (see the field comments).
extension TaskWaiter: @unchecked Sendable {}
