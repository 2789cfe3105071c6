// `then` chaining: an operation (or several) followed by the next one, the dependency set up in
// one call that returns the next operation, so that a graph reads in the order it runs.

extension ConcurrentOperation {
    /// Makes `next` depend on this operation and returns it, so that a chain reads in the order
    /// it runs.
    ///
    /// ```swift
    /// let fetch = ClosureProcedure<Data>(name: "fetch") { try load(url) }
    /// let save = ClosureOperation(name: "save") { store() }
    /// try fetch.then(save)                       // save waits for fetch
    /// try queue.addOperations([fetch, save], waitUntilFinished: false)
    /// ```
    ///
    /// It is ``addDependency(_:)`` called on `next`, spelt the other way round: `next` waits for
    /// this operation whatever way it finishes (add ``NoFailedDependencies`` to `next` to skip it
    /// after a failure), and neither operation is added to a queue.
    ///
    /// - Parameter next: The operation that runs after this one.
    /// - Returns: `next`.
    /// - Throws: What ``addDependency(_:)`` throws when called on `next`:
    ///   ``OperationError/Code-swift.struct/selfDependency``,
    ///   ``OperationError/Code-swift.struct/dependencyCycle``,
    ///   ``OperationError/Code-swift.struct/dependentAlreadyExecuting`` or
    ///   ``OperationError/Code-swift.struct/dependentAlreadyFinished``. Nothing changed then.
    @discardableResult
    public func then<Next: ConcurrentOperation>(_ next: Next) throws(OperationError) -> Next {
        try next.addDependency(self)
        return next
    }

    /// Makes a ``ClosureProcedure`` that runs `body` after this operation has finished, and
    /// returns it (not added to a queue).
    ///
    /// ```swift
    /// let report = download.then(name: "report") { "downloaded" }   // a ClosureProcedure<String>
    /// ```
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work; its value or thrown error finishes the new procedure.
    /// - Returns: The new procedure, which depends on this operation.
    @discardableResult
    public func then<Value: Sendable>(
        name: String? = nil, _ body: @escaping @Sendable () throws -> Value
    ) -> ClosureProcedure<Value> {
        ClosureProcedure(name: name, body).dependingOnFresh([self])
    }

    /// Makes a ``ClosureProcedure`` without a result that runs `body` after this operation has
    /// finished, and returns it (not added to a queue).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work; the error it throws, if it throws, finishes the new procedure.
    /// - Returns: The new procedure, which depends on this operation.
    @discardableResult
    public func then(name: String? = nil, _ body: @escaping @Sendable () throws -> Void) -> ClosureProcedure<Void> {
        ClosureProcedure(name: name, body).dependingOnFresh([self])
    }
}

extension Sequence where Element: ConcurrentOperation {
    /// Fan-in: makes `next` depend on every operation of this sequence and returns it.
    ///
    /// ```swift
    /// let merge = ClosureOperation(name: "merge") { combine() }
    /// try [left, right].then(merge)              // merge waits for both
    /// ```
    ///
    /// It is ``ConcurrentOperation/addDependencies(_:)`` called on `next`. An empty sequence adds
    /// nothing and returns `next`.
    ///
    /// - Parameter next: The operation that runs after all of these.
    /// - Returns: `next`.
    /// - Throws: What ``ConcurrentOperation/addDependencies(_:)`` throws when called on `next`
    ///   (a sequence that contains `next` throws ``OperationError/Code-swift.struct/selfDependency``).
    ///   When `next` is not in a queue, a refusal adds none of the dependencies.
    @discardableResult
    public func then<Next: ConcurrentOperation>(_ next: Next) throws(OperationError) -> Next {
        try next.addDependencies(map { $0 as ConcurrentOperation })
        return next
    }

    /// Fan-in: makes a ``ClosureProcedure`` that runs `body` once every operation of this
    /// sequence has finished, and returns it (not added to a queue).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work; its value or thrown error finishes the new procedure.
    /// - Returns: The new procedure, which depends on each of these operations.
    @discardableResult
    public func then<Value: Sendable>(
        name: String? = nil, _ body: @escaping @Sendable () throws -> Value
    ) -> ClosureProcedure<Value> {
        ClosureProcedure(name: name, body).dependingOnFresh(map { $0 as ConcurrentOperation })
    }

    /// Fan-in: makes a ``ClosureProcedure`` without a result that runs `body` once every
    /// operation of this sequence has finished, and returns it (not added to a queue).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work; the error it throws, if it throws, finishes the new procedure.
    /// - Returns: The new procedure, which depends on each of these operations.
    @discardableResult
    public func then(name: String? = nil, _ body: @escaping @Sendable () throws -> Void) -> ClosureProcedure<Void> {
        ClosureProcedure(name: name, body).dependingOnFresh(map { $0 as ConcurrentOperation })
    }
}

extension ProcedureOperation {
    /// Makes this procedure, new and in no queue, depend on `operations`, and returns it. Such a
    /// procedure cannot refuse a dependency (it has not started, and a cycle is found only once
    /// it is in a queue); should it ever, it is cancelled with the error instead of trapping.
    func dependingOnFresh(_ operations: [ConcurrentOperation]) -> Self {
        do {
            try addDependencies(operations)
        } catch {
            cancel(with: error)
        }
        return self
    }
}
