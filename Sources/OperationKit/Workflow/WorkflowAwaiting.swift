import Dispatch
import Synchronization

// The machinery behind awaiting a workflow task's or a workflow's outcome
// (WorkflowTask+Concurrency.swift, Workflow+Concurrency.swift).
//
// An awaiter registers a continuation in the task or workflow, under its lock, unless
// the outcome is already there. Every change to a workflow ends (WorkflowTransaction's
// `performEffects`, after the hooks and delegates) with `resumeAwaiters()`, which looks at the
// tasks the change finished, failed or cancelled, the pending tasks behind a task it failed, and
// the workflow itself; the continuations whose outcome has come are taken out under the lock and
// resumed after it. A continuation is resumed exactly once: by that step, by the registration
// itself, or — for `stopWaiting` — by the cancellation handler that withdraws it; each of them
// first removes it under the lock.

/// The continuations waiting for an outcome of one task or workflow, by awaiter id. A field of
/// the task or workflow, protected by its lock (the task's is its workflow's once added).
struct WorkflowAwaiters<Outcome: Sendable> {
    /// Resumed with the outcome, or with `nil` when the awaiter stopped waiting.
    typealias Continuation = CheckedContinuation<Outcome?, Never>

    // `nil` until the first awaiter: every task has this field, and an empty optional costs
    // nothing to make or destroy, where an empty dictionary costs a call to release it.
    private var continuations: [Int: Continuation]?

    /// How many awaiters wait.
    var count: Int { continuations?.count ?? 0 }
    var isEmpty: Bool { continuations?.isEmpty ?? true }

    mutating func insert(_ continuation: Continuation, id: Int) {
        if continuations == nil { continuations = [Int: Continuation]() }
        continuations![id] = continuation
        WorkflowAwaiting.registered.add(1, ordering: .relaxed)
    }

    /// Withdraws one awaiter; `nil` if it has already been taken out.
    mutating func remove(id: Int) -> Continuation? {
        guard let continuation = continuations?.removeValue(forKey: id) else { return nil }
        WorkflowAwaiting.registered.subtract(1, ordering: .relaxed)
        return continuation
    }

    /// Takes out every awaiter.
    mutating func removeAll() -> [Continuation] {
        guard let continuations, !continuations.isEmpty else { return [] }
        let all = Array(continuations.values)
        self.continuations = nil
        WorkflowAwaiting.registered.subtract(all.count, ordering: .relaxed)
        return all
    }
}

enum WorkflowAwaiting {
    /// How many continuations are registered, in all workflows. A change looks for awaiters to
    /// resume only when there are some. Changed under the lock of the task or workflow awaited,
    /// and read after a change has released its workflow's lock, so a registration made before
    /// the change is always seen (a task's registration made before it was added is ordered
    /// before the move, which takes the task's own lock, then before the change).
    static let registered = Atomic<Int>(0)
    /// Whether any continuation is registered, in any workflow.
    @inline(__always)
    static var anyRegistered: Bool { registered.load(ordering: .relaxed) > 0 }
    private static let lastID = Atomic<Int>(0)

    /// Waits for an outcome, following `policy` if the calling Swift task is cancelled.
    ///
    /// - Parameters:
    ///   - policy: What the cancellation of the calling task does.
    ///   - attempt: Takes the lock of the task or workflow awaited and, under it, calls
    ///     ``attemptLocked(stopIfCancelled:outcome:register:)`` with the outcome if it has come
    ///     and the registration of the continuation under the id.
    ///   - withdraw: Takes the lock and removes the continuation with the id, if still there.
    ///   - cancel: Cancels the awaited work (``TaskCancellationPolicy/cancelAndWait``).
    /// - Returns: The outcome.
    /// - Throws: `CancellationError` when the task is cancelled and `policy` is
    ///   ``TaskCancellationPolicy/stopWaiting``.
    static func wait<Outcome: Sendable>(
        policy: TaskCancellationPolicy,
        attempt: (_ id: Int, _ continuation: CheckedContinuation<Outcome?, Never>, _ stopIfCancelled: Bool) -> Outcome??,
        withdraw: @escaping @Sendable (_ id: Int) -> CheckedContinuation<Outcome?, Never>?,
        cancel: @escaping @Sendable () -> Void
    ) async throws(CancellationError) -> Outcome {
        let id = lastID.add(1, ordering: .relaxed).newValue
        let outcome: Outcome?
        switch policy {
        case .keepWaiting:
            outcome = await waitOnce(id: id, stopIfCancelled: false, attempt: attempt)
        case .stopWaiting:
            // The cancellation flag is set before the handler runs: either the handler finds the
            // continuation registered and withdraws it, or the registration sees the flag.
            outcome = await withTaskCancellationHandler {
                await waitOnce(id: id, stopIfCancelled: true, attempt: attempt)
            } onCancel: {
                withdraw(id)?.resume(returning: nil)
            }
        case .cancelAndWait:
            // A cancel runs the workflow's events, hooks and delegates on the calling thread; it is
            // made on a Dispatch queue rather than inside the cancelling thread's handler.
            outcome = await withTaskCancellationHandler {
                await waitOnce(id: id, stopIfCancelled: false, attempt: attempt)
            } onCancel: {
                DispatchQueue.global().async { cancel() }
            }
        }
        guard let outcome else { throw CancellationError() }
        return outcome
    }

    private static func waitOnce<Outcome: Sendable>(
        id: Int,
        stopIfCancelled: Bool,
        attempt: (Int, CheckedContinuation<Outcome?, Never>, Bool) -> Outcome??
    ) async -> Outcome? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Outcome?, Never>) in
            let now = attempt(id, continuation, stopIfCancelled)
            // We must not resume the continuation while holding the lock.
            if let now { continuation.resume(returning: now) }
        }
    }

    /// Under the lock of the task or workflow awaited: `.some(nil)` if the awaiter stops because
    /// its Swift task is cancelled, `.some(outcome)` if the outcome has come; otherwise registers
    /// the continuation and returns `.none`.
    static func attemptLocked<Outcome>(
        stopIfCancelled: Bool, outcome: @autoclosure () -> Outcome?, register: () -> Void
    ) -> Outcome?? {
        if stopIfCancelled && Task.isCancelled { return .some(nil) }
        if let outcome = outcome() { return .some(outcome) }
        register()
        return .none
    }
}

// MARK: - Outcomes, under the lock

extension WorkflowTask {
    /// Under the lock: the outcome an awaiter gets now, or `nil` if it must wait.
    func outcomeLocked() -> WorkflowTaskOutcome? {
        switch lifecycle.state {
        case .finished:
            return .finished(_result)
        case .failed:
            return isAwaitingFulfilmentLocked ? nil : .failed(errorLocked())
        case .cancelled:
            return .cancelled
        case .pending:
            return blockedOutcomeLocked()
        case .ready, .executing:
            return nil
        }
    }

    /// Under the lock: whether the task is an external condition that failed because it was not
    /// fulfilled yet. Its fulfilment retries it, so for awaiters it has not failed: it waits.
    var isAwaitingFulfilmentLocked: Bool {
        self is ExternalConditionTask && lifecycle.state == .failed
            && (_error as? OperationError)?.code == .externalConditionNotFulfilled
    }

    /// Under the lock: the error of a failed task.
    func errorLocked() -> any Error {
        guard let error = _error else {
            preconditionFailure("Internal inconsistency: task \(name) is \(lifecycle.state) without an error")
        }
        return error
    }

    /// Under the lock, for a pending task: whether it is stuck behind a prerequisite (direct, or
    /// through pending ones) that failed or was cancelled. A failure wins over a cancellation;
    /// among failures, the first found in the order the prerequisites were given.
    private func blockedOutcomeLocked() -> WorkflowTaskOutcome? {
        guard let workflow else { return nil }
        var visited: Set<Int> = [index]
        var stack = Array(prerequisiteIndices.reversed())
        var behindCancelled = false
        while let next = stack.popLast() {
            guard visited.insert(next).inserted else { continue }
            let prerequisite = workflow.tasks[next]
            switch prerequisite.lifecycle.state {
            case .failed where !prerequisite.isAwaitingFulfilmentLocked:
                return .prerequisiteFailed(prerequisite, error: prerequisite.errorLocked())
            case .cancelled:
                behindCancelled = true
            case .pending:
                stack.append(contentsOf: prerequisite.prerequisiteIndices.reversed())
            case .ready, .executing, .finished, .failed:
                break
            }
        }
        return behindCancelled ? .cancelled : nil
    }

    /// Under the lock: if the outcome has come, takes every awaiter out and adds its resumption.
    func takeAwaitersLocked(into resumptions: inout [() -> Void]) {
        guard !awaiters.isEmpty, let outcome = outcomeLocked() else { return }
        for continuation in awaiters.removeAll() {
            resumptions.append { continuation.resume(returning: outcome) }
        }
    }
}

extension Workflow {
    /// Under the lock: the outcome an awaiter gets now, or `nil` if it must wait: finished when
    /// every task without dependents has; otherwise, once no task is executing, failed if a task
    /// failed (an external condition waiting for its fulfilment has not), else cancelled if a task
    /// was cancelled. An idle workflow with neither — not started, or reset — is waited for.
    func outcomeLocked() -> WorkflowOutcome? {
        if finishedSinkCount == sinkCount { return .finished }
        guard executingCount == 0 else { return nil }
        let failures = tasks.filter { $0.lifecycle.state == .failed && !$0.isAwaitingFulfilmentLocked }
        if !failures.isEmpty {
            return .failed(failures.map { (task: $0, error: $0.errorLocked()) })
        }
        let cancelled = tasks.filter { $0.lifecycle.state == .cancelled }
        return cancelled.isEmpty ? nil : .cancelled(cancelled)
    }

    /// Under the lock: if the outcome has come, takes every awaiter out and adds its resumption.
    func takeAwaitersLocked(into resumptions: inout [() -> Void]) {
        guard !awaiters.isEmpty, let outcome = outcomeLocked() else { return }
        for continuation in awaiters.removeAll() {
            resumptions.append { continuation.resume(returning: outcome) }
        }
    }
}

extension WorkflowTransaction {
    /// The last step of a change: resumes the awaiters whose outcome the change brought — of the
    /// tasks it finished, failed or cancelled, of the pending tasks behind a task it failed, and
    /// of the workflow. Each is judged on the state now, after the change's hooks and delegates.
    /// Called only if ``WorkflowAwaiting/anyRegistered``.
    func resumeAwaiters() {
        var resumptions: [() -> Void] = []
        let workflow = workflowReference.takeUnretainedValue()
        workflow.lock.withLock {
            effects.forEachElement { effect in
                switch effect {
                case .finished(let task, _), .cancelled(let task, _):
                    task.takeUnretainedValue().takeAwaitersLocked(into: &resumptions)
                case .failed(let task, _):
                    task.takeUnretainedValue().takeAwaitersLocked(into: &resumptions)
                    takeBlockedAwaitersLocked(behind: task.takeUnretainedValue(), into: &resumptions)
                case .announce, .startRun, .retried, .reset, .cancelPassedOn, .workflowFinished:
                    break
                }
            }
            workflow.takeAwaitersLocked(into: &resumptions)
        }
        // We must not resume a continuation while holding the lock.
        for resume in resumptions { resume() }
    }

    /// Under the lock: the awaiters of the pending tasks that depend on `failed`, directly or
    /// through pending tasks.
    private func takeBlockedAwaitersLocked(behind failed: WorkflowTask, into resumptions: inout [() -> Void]) {
        let workflow = workflowReference.takeUnretainedValue()
        guard failed.isIn(workflow) else { return }
        var visited: Set<Int> = [failed.index]
        var queue = failed.dependentIndices.array
        var next = 0
        while next < queue.count {
            let index = queue[next]
            next += 1
            guard visited.insert(index).inserted else { continue }
            let dependent = workflow.tasks[index]
            guard dependent.lifecycle.state == .pending else { continue }
            dependent.takeAwaitersLocked(into: &resumptions)
            queue.append(contentsOf: dependent.dependentIndices)
        }
    }
}
