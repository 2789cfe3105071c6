extension ConcurrentOperationQueue: TaskAwaitable {
    var waitLock: Lock { lock }

    func addWaiterLocked(_ waiter: Waiter) -> Bool {
        if count == 0 { return false }
        waiters.append(waiter)
        return true
    }

    func removeWaiterLocked(_ waiter: TaskWaiter) -> Bool {
        guard let index = waiters.firstIndex(where: { $0.isTask(waiter) }) else { return false }
        waiters.remove(at: index)
        return true
    }

    var isDoneLocked: Bool { count == 0 }

    func cancelForCancelledWaiter() { cancelAllOperations() }
}

extension ConcurrentOperationQueue {
    /// Suspends the calling task until the queue has no operations (every operation finished,
    /// its completion block and did-finish observers returned), doing what `policy` says if the
    /// task is cancelled meanwhile.
    ///
    /// - ``TaskCancellationPolicy/keepWaiting``: the cancellation is ignored; the same as the
    ///   async ``waitUntilAllOperationsAreFinished()``.
    /// - ``TaskCancellationPolicy/stopWaiting``: the wait ends at once with `CancellationError`;
    ///   the queue carries on untouched.
    /// - ``TaskCancellationPolicy/cancelAndWait``: ``cancelAllOperations()`` is called (on the
    ///   thread that cancels the task), then the wait goes on until the queue is empty. Operations
    ///   added after that are not cancelled, and are waited for.
    ///
    /// - Parameter policy: What to do when the awaiting task is cancelled.
    /// - Throws: `CancellationError`, only with ``TaskCancellationPolicy/stopWaiting``, when the
    ///   task was cancelled before the queue emptied.
    public func waitUntilAllOperationsAreFinished(
        whenCancelled policy: TaskCancellationPolicy
    ) async throws(CancellationError) {
        if await !TaskWaiter.wait(for: self, policy: policy) { throw CancellationError() }
    }

    /// Wraps `body` in an ``AsyncOperation`` and adds it: the Swift-concurrency form of
    /// ``addOperation(_:)-(()->Void)``.
    ///
    /// ```swift
    /// let fetch = queue.addOperation { try await client.data(from: url) }
    /// let data = try await fetch.value
    /// ```
    ///
    /// A closure that neither awaits nor throws — `queue.addOperation { print("hi") }` — still
    /// makes a ``ClosureOperation`` (Swift prefers the synchronous overload); one that awaits or
    /// throws makes an ``AsyncOperation``.
    ///
    /// The task's priority follows the quality of service (see ``AsyncOperation``); to give one,
    /// use ``addOperation(name:priority:_:)``.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work, run in a task when the operation starts; it holds one of the queue's
    ///     concurrency slots until it returns or throws.
    /// - Returns: The operation, to await its ``AsyncOperation/value``, cancel it or make other
    ///   operations depend on it.
    @discardableResult
    public func addOperation<Output: Sendable>(
        name: String? = nil, _ body: @escaping @Sendable () async throws -> Output
    ) -> AsyncOperation<Output> {
        // Without a `TaskPriority?` to pass (see `AsyncOperation.init(name:_:)`).
        let operation = AsyncOperation(name: name, body)
        // A new operation cannot be refused (see `addOperation(_:)` for blocks).
        try? addOperation(operation)
        return operation
    }

    /// Wraps `body` in an ``AsyncOperation`` whose task runs at `priority`, and adds it (see
    /// ``addOperation(name:_:)``).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - priority: The priority of the task that runs `body`; `nil` to follow the quality of
    ///     service (see ``AsyncOperation``).
    ///   - body: The work, run in a task when the operation starts; it holds one of the queue's
    ///     concurrency slots until it returns or throws.
    /// - Returns: The operation, to await its ``AsyncOperation/value``, cancel it or make other
    ///   operations depend on it.
    @discardableResult
    public func addOperation<Output: Sendable>(
        name: String? = nil, priority: TaskPriority?, _ body: @escaping @Sendable () async throws -> Output
    ) -> AsyncOperation<Output> {
        let operation = AsyncOperation(name: name, priority: priority, body)
        // A new operation cannot be refused (see `addOperation(_:)` for blocks).
        try? addOperation(operation)
        return operation
    }
}
