// onValue and onError on a result procedure (Overdrive's value and error callbacks): kept as one
// entry among the procedure's waiters, so a procedure that has none costs nothing more.

/// Callbacks that run once an operation has finished, in its list of waiters (see ``Waiter``).
class FinishCallbacks: @unchecked Sendable {
    /// Called once, by the thread that resumes the operation's waiters, with no lock held.
    func operationDidFinish() {}
}

/// The onValue and onError callbacks of one ``ResultProcedure``.
final class ResultCallbacks<Output: Sendable>: FinishCallbacks, @unchecked Sendable {
    // Appended to under the procedure's `lock` while this entry is among its waiters;
    // read once, by the thread that took the waiters out (under that lock) to resume them.
    var valueCallbacks: [@Sendable (Output) throws -> Void] = []
    var errorCallbacks: [@Sendable (any Error) -> Void] = []
    /// The procedure is alive while its waiters are resumed (the finishing thread holds it), and
    /// a procedure never finished lets go of this entry with its waiters: no cycle.
    weak var procedure: ResultProcedure<Output>?

    init(procedure: ResultProcedure<Output>) {
        self.procedure = procedure
    }

    override func operationDidFinish() {
        guard let procedure else { return }
        let values = valueCallbacks
        let errors = errorCallbacks
        valueCallbacks = []
        errorCallbacks = []
        switch procedure.settledResult {
        case .success(let value):
            do {
                for callback in values { try callback(value) }
            } catch {
                for callback in errors { callback(error) }
            }
        case .failure(let error):
            for callback in errors { callback(error) }
        }
    }
}

extension ResultProcedure {
    /// Registers a callback run once with the procedure's value, if it finishes with one:
    /// Overdrive's `onValue`. Returns the procedure, so that callbacks chain.
    ///
    /// ```swift
    /// let fetch = ClosureProcedure<Int>(name: "count") { try countRows() }
    /// try fetch
    ///     .onValue { count in print("\(count) rows") }
    ///     .onError { error in print("failed: \(error)") }
    /// try queue.addOperation(fetch)
    /// ```
    ///
    /// Exactly one of the two kinds runs, once the procedure has finished — as awaiting its
    /// ``value`` would return or throw: the value callbacks if it finished with a value (even
    /// one cancelled while executing), otherwise the error callbacks, with its first error, or
    /// with ``OperationError/Code-swift.struct/cancelled`` (cancelled without a value or an error,
    /// for example before it ran) or ``OperationError/Code-swift.struct/noValue`` (finished with
    /// neither). The value callbacks run in the order they were registered; if one throws, the
    /// rest are skipped and the error callbacks get the thrown error instead.
    ///
    /// They run after the completion block and the did-finish observers, on the thread that
    /// finished the procedure, with no lock held; dependents and waits may already be going on.
    /// A callback may be registered at any time before the procedure has finished — also while
    /// it executes. The procedure lets go of the callbacks once they have run.
    ///
    /// - Parameter callback: Called with the value.
    /// - Returns: The procedure.
    /// - Throws: ``OperationError/Code-swift.struct/alreadyFinished`` if the procedure has finished
    ///   (its callbacks have run, or are running): nothing was registered. Register before adding
    ///   the procedure to a queue, or use ``value`` to read the outcome of one that may be done.
    @discardableResult
    public func onValue(_ callback: @escaping @Sendable (Output) throws -> Void) throws(OperationError) -> Self {
        try addResultCallback("onValue") { $0.valueCallbacks.append(callback) }
        return self
    }

    /// Registers a callback run once with the procedure's error, if it finishes without a value
    /// or an ``onValue(_:)`` callback throws: Overdrive's `onError`. Returns the procedure, so
    /// that callbacks chain. See ``onValue(_:)`` for when each kind runs.
    ///
    /// - Parameter callback: Called with the error: the procedure's first error, the error an
    ///   ``onValue(_:)`` callback threw, or ``OperationError`` with the code
    ///   ``OperationError/Code-swift.struct/cancelled`` or ``OperationError/Code-swift.struct/noValue``.
    /// - Returns: The procedure.
    /// - Throws: ``OperationError/Code-swift.struct/alreadyFinished`` if the procedure has
    ///   finished: nothing was registered.
    @discardableResult
    public func onError(_ callback: @escaping @Sendable (any Error) -> Void) throws(OperationError) -> Self {
        try addResultCallback("onError") { $0.errorCallbacks.append(callback) }
        return self
    }

    /// Adds a callback to the procedure's entry among its waiters, made if need be.
    private func addResultCallback(_ kind: String, _ add: (ResultCallbacks<Output>) -> Void) throws(OperationError) {
        let added = lock.withLock { () -> Bool in
            for waiter in waiters {
                if case .finishCallbacks(let entry) = waiter, let callbacks = entry as? ResultCallbacks<Output> {
                    add(callbacks)
                    return true
                }
            }
            let callbacks = ResultCallbacks(procedure: self)
            guard addWaiter(.finishCallbacks(callbacks)) else { return false }
            add(callbacks)
            return true
        }
        if !added {
            throw OperationError(.alreadyFinished, operations: [displayName], "\(kind) registered after the procedure finished")
        }
    }
}
