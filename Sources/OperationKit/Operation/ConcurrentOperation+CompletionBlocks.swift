// ConcurrentOperation: several completion blocks — addCompletionBlock(_:), which appends a block
// to the one completionBlock (composed in place: no stored field, nothing for operations without).

extension ConcurrentOperation {
    /// Adds a block to run once the operation has finished, after the blocks added before it (and
    /// after a ``completionBlock`` set before it): every block runs exactly once, in the order
    /// added, on the thread that finished the operation, with no lock held, before its dependents
    /// are released — as ``completionBlock`` does, also when the operation was cancelled.
    ///
    /// The blocks are one: ``completionBlock`` reads as a block that runs them all in order, and
    /// setting it replaces them all. Meant for a handful of blocks (each added one nests a call).
    ///
    /// ```swift
    /// let save = ClosureOperation { store.save() }
    /// try save.addCompletionBlock { log("saved") }
    /// try save.addCompletionBlock { metrics.count("save") }
    /// ```
    ///
    /// - Parameter block: The block to run after the operation has finished.
    /// - Throws: ``OperationError/Code-swift.struct/alreadyFinished`` if the operation has
    ///   finished (its blocks have run or are running): the block is not run. So a block that was
    ///   accepted always runs after every block accepted before it.
    public func addCompletionBlock(_ block: @escaping @Sendable () -> Void) throws(OperationError) {
        let accepted = lock.withLock { () -> Bool in
            // The finish takes the blocks in the same critical section as it becomes finished.
            guard !lifecycle.isFinished else { return false }
            if let previous = _completionBlock {
                _completionBlock = {
                    previous()
                    block()
                }
            } else {
                _completionBlock = block
            }
            return true
        }
        guard accepted else {
            throw OperationError(.alreadyFinished, operations: [displayName], "a completion block added after the operation finished")
        }
    }
}
