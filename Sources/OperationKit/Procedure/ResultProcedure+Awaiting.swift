extension ConcurrentOperation {
    /// Waits as `policy` says, then returns what `outcome` reads: the value, or throws its error;
    /// for an operation that finished with neither, an ``OperationError`` with the code
    /// ``OperationError/Code-swift.struct/cancelled`` or ``OperationError/Code-swift.struct/noValue``.
    func awaitValue<Output>(
        whenCancelled policy: TaskCancellationPolicy, outcome: () -> Result<Output, any Error>?
    ) async throws -> Output {
        try await waitUntilFinished(whenCancelled: policy)
        switch outcome() {
        case .success(let value)?:
            return value
        case .failure(let error)?:
            throw error
        case nil:
            if isCancelled {
                throw OperationError(.cancelled, operations: [displayName], "cancelled before it produced a value")
            }
            throw OperationError(.noValue, operations: [displayName], "finished without a value")
        }
    }
}

extension ResultProcedure {
    /// Suspends the calling task until the procedure has finished, then returns its value or
    /// throws its first error — what ``result`` holds then.
    ///
    /// ```swift
    /// let download = ClosureProcedure<Data> { try fetch(url) }
    /// try queue.addOperation(download)
    /// let data = try await download.value
    /// ```
    ///
    /// Cancelling the awaiting task neither cancels the procedure nor ends the wait
    /// (``TaskCancellationPolicy/keepWaiting``); use ``value(whenCancelled:)`` to choose.
    /// Any number of tasks may await it, before or after it finished; each is resumed once.
    ///
    /// - Throws: The first of ``ProcedureOperation/errors`` if there is one (an error given to
    ///   ``ProcedureOperation/cancel(with:)`` wins over a value); otherwise, without a value,
    ///   ``OperationError`` with ``OperationError/Code-swift.struct/cancelled`` if the procedure
    ///   was cancelled, else ``OperationError/Code-swift.struct/noValue``. A procedure cancelled
    ///   while executing that still finished with a value returns the value.
    public var value: Output {
        get async throws { try await value(whenCancelled: .keepWaiting) }
    }

    /// Suspends the calling task until the procedure has finished, then returns its value, doing
    /// what `policy` says if the task is cancelled meanwhile (see
    /// ``ConcurrentOperation/waitUntilFinished(whenCancelled:)``).
    ///
    /// - Parameter policy: What to do when the awaiting task is cancelled.
    /// - Returns: The procedure's ``output``.
    /// - Throws: `CancellationError` if the task stopped waiting
    ///   (``TaskCancellationPolicy/stopWaiting``); otherwise what ``value`` throws.
    public func value(whenCancelled policy: TaskCancellationPolicy) async throws -> Output {
        try await awaitValue(whenCancelled: policy) { result }
    }
}
