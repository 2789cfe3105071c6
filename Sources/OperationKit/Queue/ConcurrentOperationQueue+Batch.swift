extension ConcurrentOperationQueue {
    /// Runs `transform` on every element of `items`, each call as an ``AsyncOperation`` on this
    /// queue, at most `maxConcurrent` of them at a time, and returns the results in the order of
    /// `items`: the queue's form of a task group with limited parallelism.
    ///
    /// ```swift
    /// let thumbnails = try await queue.map(urls, maxConcurrent: 4) { url in
    ///     try await makeThumbnail(from: url)
    /// }
    /// ```
    ///
    /// - Both limits apply: the batch never has more than `maxConcurrent` operations in the queue
    ///   at once (it adds the next one when one finishes, in the order of `items`), and the queue
    ///   runs no more than its ``maxConcurrentOperationCount`` of all its operations.
    /// - It is structured, like a throwing task group: when it returns or throws, every operation
    ///   it added has finished.
    /// - The first failure — an error thrown by `transform`, or the cancellation of the awaiting
    ///   task — ends the batch: no further element is started, the batch's operations are
    ///   cancelled (their tasks see it), and once they have all finished the failure is thrown
    ///   (`CancellationError` for the task's cancellation). Later errors are dropped.
    /// - An operation of the batch cancelled from outside (``cancelAllOperations()``) before it
    ///   ran counts as a failure, ``OperationError`` with ``OperationError/Code-swift.struct/cancelled``.
    /// - A suspended queue holds the batch back until it is resumed.
    ///
    /// - Parameters:
    ///   - items: The elements, read once, at the start.
    ///   - maxConcurrent: How many operations of the batch may be in the queue at once; at least
    ///     1. By default only the queue's limit applies.
    ///   - priority: The priority of the tasks; by default it follows the quality of service (see
    ///     ``AsyncOperation``).
    ///   - transform: The work for one element, run in a task of its operation.
    /// - Returns: `transform`'s results, in the order of `items`.
    /// - Throws: The first failure (see above); ``OperationError`` with
    ///   ``OperationError/Code-swift.struct/invalidMaxConcurrentOperationCount`` if
    ///   `maxConcurrent` is below 1 (nothing ran).
    @discardableResult
    public func map<Element: Sendable, Output: Sendable>(
        _ items: some Sequence<Element>,
        maxConcurrent: Int = .max,
        priority: TaskPriority? = nil,
        _ transform: @escaping @Sendable (Element) async throws -> Output
    ) async throws -> [Output] {
        guard maxConcurrent >= 1 else {
            throw OperationError(
                .invalidMaxConcurrentOperationCount, operations: [displayName],
                "maxConcurrent must be at least 1, not \(maxConcurrent)")
        }
        let run = BatchRun(
            queue: self, items: Array(items), limit: maxConcurrent, priority: priority, transform: transform)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                run.start(then: continuation)
            }
        } onCancel: {
            run.fail(with: CancellationError())
        }
        return try run.outcome()
    }
}

/// One call of ``ConcurrentOperationQueue/map(_:maxConcurrent:priority:_:)``: feeds the queue one
/// operation per element, keeps at most `limit` of them in it, collects the results, and resumes
/// the caller once the batch is over.
final class BatchRun<Element: Sendable, Output: Sendable> {
    private let queue: ConcurrentOperationQueue
    private let limit: Int
    private let priority: TaskPriority?
    private let transform: @Sendable (Element) async throws -> Output
    private let lock = Lock()

    // protected by lock
    private var items: [Element?]
    private var results: [Output?]
    /// The batch's operations that have not finished, by element index.
    private var running: [Int: AsyncOperation<Output>] = [:]
    private var nextIndex = 0
    private var failure: (any Error)?
    private var isOver = false
    private var continuation: CheckedContinuation<Void, Never>?

    init(
        queue: ConcurrentOperationQueue, items: [Element], limit: Int, priority: TaskPriority?,
        transform: @escaping @Sendable (Element) async throws -> Output
    ) {
        self.queue = queue
        self.items = items
        self.results = Array(repeating: nil, count: items.count)
        self.limit = limit
        self.priority = priority
        self.transform = transform
    }

    /// Adds the first operations; `continuation` is resumed once the batch is over.
    func start(then continuation: CheckedContinuation<Void, Never>) {
        let (first, overAlready) = lock.withLock { () -> ([AsyncOperation<Output>], Bool) in
            self.continuation = continuation
            var first: [AsyncOperation<Output>] = []
            while failure == nil && running.count < limit, let operation = nextOperationLocked() {
                first.append(operation)
            }
            return (first, endIfOverLocked())
        }
        if overAlready {
            continuation.resume()
            return
        }
        try? queue.addOperations(first, waitUntilFinished: false)  // new operations are never refused
    }

    /// Ends the batch with `error` unless it has failed already: nothing more starts, and the
    /// operations in the queue are cancelled.
    func fail(with error: any Error) {
        let cancelled = lock.withLock { () -> [AsyncOperation<Output>] in
            guard failure == nil else { return [] }
            failure = error
            return Array(running.values)
        }
        for operation in cancelled { operation.cancel() }
    }

    /// Once the batch is over: the results in order, or the failure.
    func outcome() throws -> [Output] {
        try lock.withLock {
            if let failure { throw failure }
            return results.map { $0! }
        }
    }

    /// Under `lock`: makes the operation of the next element, if any is left.
    private func nextOperationLocked() -> AsyncOperation<Output>? {
        guard nextIndex < items.count, let item = items[nextIndex] else { return nil }
        let index = nextIndex
        items[index] = nil  // the closure holds it now
        nextIndex += 1
        let transform = self.transform
        let operation = AsyncOperation(priority: priority) { try await transform(item) }
        operation.completionBlock = { [self] in elementFinished(index) }
        running[index] = operation
        return operation
    }

    /// Under `lock`: whether the batch is over now (nothing in the queue, nothing more to add);
    /// marks it so, once.
    private func endIfOverLocked() -> Bool {
        guard !isOver, running.isEmpty, failure != nil || nextIndex == items.count else { return false }
        isOver = true
        return true
    }

    /// The completion block of the operation of element `index`: records its result, and adds
    /// the next operation or ends the batch.
    private func elementFinished(_ index: Int) {
        typealias Step = (next: AsyncOperation<Output>?, cancel: [AsyncOperation<Output>], resume: CheckedContinuation<Void, Never>?)
        let step = lock.withLock { () -> Step in
            guard let operation = running.removeValue(forKey: index) else { return (nil, [], nil) }
            var cancel: [AsyncOperation<Output>] = []
            switch operation.result {
            case .success(let value)?:
                results[index] = value
            case let outcome where failure == nil:
                failure = outcome.flatMap { result -> (any Error)? in
                    if case .failure(let error) = result { return error }
                    return nil
                } ?? OperationError(.cancelled, operations: [operation.displayName], "cancelled before it ran")
                cancel = Array(running.values)
            default:
                break
            }
            let next = failure == nil ? nextOperationLocked() : nil
            let over = endIfOverLocked()
            defer { if over { continuation = nil } }
            return (next, cancel, over ? continuation : nil)
        }
        for operation in step.cancel { operation.cancel() }
        if let next = step.next { try? queue.addOperation(next) }  // a new operation is never refused
        // We must not resume the continuation while holding the lock.
        step.resume?.resume()
    }
}

// Every mutable field is protected by `lock`; the others are immutable.
extension BatchRun: @unchecked Sendable {}
