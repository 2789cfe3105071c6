import Synchronization

/// An operation that runs an `async` closure in a Swift `Task`.
///
/// ```swift
/// let fetch = AsyncOperation { try await client.data(from: url) }
/// try queue.addOperation(fetch)
/// let data = try await fetch.value
/// ```
///
/// Or, shorter, `queue.addOperation { try await client.data(from: url) }`.
///
/// - When a queue starts it, ``execute()`` starts one unstructured `Task` running the closure
///   and returns; the operation keeps its concurrency slot of the queue until the closure returns
///   or throws, then finishes. Dependencies, priority and cancellation apply as to any operation.
/// - The task's priority is the `priority` given to the initialiser, else the one matching the
///   operation's ``ConcurrentOperation/qualityOfService``, else its queue's; without either the
///   task gets Swift's default. ``ConcurrentOperation/queuePriority`` only orders the start.
/// - ``cancel()`` cancels the task (the closure sees `Task.isCancelled`, and its
///   `withTaskCancellationHandler` handlers run). Cancelled before it starts, the operation
///   finishes without running the closure.
/// - The result is kept: ``result``, ``output``, ``error``, or `try await` ``value``.
/// - ``ConcurrentOperation/finish()`` does nothing: the closure's end finishes the operation.
///
/// The closure is released once it has run, or once the operation finished without running it.
public final class AsyncOperation<Output: Sendable>: ConcurrentOperation, @unchecked Sendable {
    // Written in init; taken by `execute()`, which runs at most once, or cleared by
    // `didFinishWithoutExecuting()` (which runs instead of `execute()`); the queue's and the state
    // machine's locks order those accesses.
    private var body: (@Sendable () async throws -> Output)?
    /// The priority given to the initialiser, as a code (see `TaskPriorityCode`).
    private let priority: TaskPriorityCode

    // protected by lock
    /// The runner whose task runs the closure, from the start until the finish (see
    /// `AsyncRunner`). Not retained: the runner lives at least until it has finished the
    /// operation, and the finish step clears this (`willBecomeFinishedLocked()`); a cancel
    /// retains it under the lock. (A retain here, given back when the operation is freed —
    /// often on the thread adding the next ones — made the runner's reference count a line
    /// that two threads wrote for every operation.)
    private unowned(unsafe) var runner: AsyncRunner?
    /// The closure's value (boxed) or its error: two references, which every operation creates
    /// and destroys in a few instructions (a `Result<Output, any Error>?` or even
    /// `Result<Any, any Error>?` field is created and destroyed through runtime calls).
    private var _output: OutputBox<Output>?
    private var _error: (any Error)?
    /// Whether the closure of an `AsyncOperation<Void>` returned: its result, without boxing `()`
    /// into an `Any` (``result`` then reads `.success(())`). Not under the lock: it only ever
    /// becomes `true`, once, before the operation finishes.
    private let voidReturned = Atomic<Bool>(false)

    /// Creates an operation that runs `body` in a task when it starts, at the priority that
    /// follows the quality of service (see above).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work. Runs at most once, in a new task, never if the operation is cancelled
    ///     before it starts. Its value or thrown error becomes the operation's ``result``.
    public init(name: String? = nil, _ body: @escaping @Sendable () async throws -> Output) {
        // Its own initialiser rather than a default `priority: nil`: a `TaskPriority?` is passed,
        // copied, inspected and destroyed through value-witness calls (its layout is resilient),
        // some two hundred instructions for every operation made.
        self.body = body
        priority = .none
        super.init(name: name)
    }

    /// Creates an operation that runs `body` in a task of the given priority when it starts.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - priority: The task's priority; `nil` to follow the quality of service (see above), as
    ///     ``init(name:_:)`` does.
    ///   - body: The work. Runs at most once, in a new task, never if the operation is cancelled
    ///     before it starts. Its value or thrown error becomes the operation's ``result``.
    public init(
        name: String? = nil, priority: TaskPriority?, _ body: @escaping @Sendable () async throws -> Output
    ) {
        self.body = body
        self.priority = TaskPriorityCode(priority)
        super.init(name: name)
    }

    /// What the closure returned or threw; `nil` until the operation has finished, and for an
    /// operation that finished without running it (cancelled before it started). Readable from
    /// any thread.
    public var result: Result<Output, any Error>? {
        if voidReturned.load(ordering: .acquiring) { return .success(() as! Output) }
        let (output, error) = lock.withLock { (_output, _error) }
        if let error { return .failure(error) }
        if let output { return .success(output.value) }
        return nil
    }

    /// The value the closure returned, or `nil` (see ``result``). Readable from any thread.
    public var output: Output? {
        if case .success(let value)? = result { return value }
        return nil
    }

    /// The error the closure threw, or `nil` (see ``result``). Readable from any thread.
    public var error: (any Error)? {
        if case .failure(let error)? = result { return error }
        return nil
    }

    /// Suspends the calling task until the operation has finished, then returns the closure's
    /// value or throws its error.
    ///
    /// Cancelling the awaiting task neither cancels the operation nor ends the wait
    /// (``TaskCancellationPolicy/keepWaiting``); use ``value(whenCancelled:)`` to choose.
    ///
    /// - Throws: The error the closure threw (often `CancellationError` for a closure that was
    ///   cancelled); ``OperationError`` with ``OperationError/Code-swift.struct/cancelled`` if the
    ///   operation was cancelled before the closure ran.
    public var value: Output {
        get async throws { try await value(whenCancelled: .keepWaiting) }
    }

    /// Suspends the calling task until the operation has finished, then returns the closure's
    /// value, doing what `policy` says if the task is cancelled meanwhile (see
    /// ``ConcurrentOperation/waitUntilFinished(whenCancelled:)``).
    ///
    /// - Parameter policy: What to do when the awaiting task is cancelled.
    /// - Returns: The closure's value.
    /// - Throws: `CancellationError` if the task stopped waiting
    ///   (``TaskCancellationPolicy/stopWaiting``); otherwise what ``value`` throws.
    public func value(whenCancelled policy: TaskCancellationPolicy) async throws -> Output {
        try await awaitValue(whenCancelled: policy) { result }
    }

    /// Starts the task that runs the closure, and returns; the operation finishes when the
    /// closure does. (The task may go on to run the closures of the async operations the queue
    /// makes ready next: see `AsyncRunner`.)
    public override func execute() {
        guard body != nil else {
            finishAfterStart()
            return
        }
        // `queue` is set before a queue publishes the operation and cleared by its finish, which
        // comes after this: its worker reads it without the lock (`nil`: started by hand).
        let runner = AsyncRunner(running: self, in: queue, priority: priority.priority ?? taskPriorityForExecution)
        // Published in the same step as the cancelled flag is read: a cancel either comes after
        // (and finds the runner) or before (and is seen here).
        let cancelled = lock.withLock { () -> Bool in
            self.runner = runner
            return lifecycle.isCancelled
        }
        if cancelled { runner.cancel(for: self) }
        runner.start(with: self)
    }

    override func attachAsyncRunnerLocked(_ runner: AsyncRunner) {
        self.runner = runner
    }

    override func willBecomeFinishedLocked() {
        // The runner may end once the operation has finished (see `runner`).
        runner = nil
        super.willBecomeFinishedLocked()
    }

    override func canRunOnAsyncRunner(priority runnerPriority: TaskPriorityCode, queue: ConcurrentOperationQueue) -> Bool {
        // Not started yet: nothing else touches these fields now.
        guard body != nil else { return false }
        if priority != .none { return priority == runnerPriority }
        let qualityOfService = queuedQualityOfService == .unspecified ? queue.qualityOfService : queuedQualityOfService
        return TaskPriorityCode(qualityOfService) == runnerPriority
    }

    nonisolated(nonsending) override func runOnAsyncRunner(_ runner: AsyncRunner) async -> ConcurrentOperation? {
        // The runner's loop, for a run of operations of this very class: each closure is called
        // from here, without a call (a task allocation and a hop back) per operation in between.
        var operation = self
        while true {
            if let body = operation.body {
                operation.body = nil
                do {
                    operation.didReturn(try await body())
                } catch {
                    operation.didThrow(error)
                }
            }
            guard let next = runner.advance(after: operation) else { return nil }
            // The class is final: the same metatype means the same `Output`.
            guard type(of: next) == Self.self else { return next }
            operation = unsafeDowncast(next, to: Self.self)
        }
    }

    /// Keeps what the closure returned. Out of line: its temporaries would otherwise take task
    /// allocations in `runOnAsyncRunner()` for every operation.
    @inline(never)
    private func didReturn(_ value: consuming Output) {
        if Output.self == Void.self {
            voidReturned.store(true, ordering: .releasing)
            return
        }
        let output = OutputBox(value)
        lock.withLock { _output = output }
    }

    /// Keeps the error the closure threw.
    private func didThrow(_ error: any Error) {
        lock.withLock { _error = error }
    }

    /// Cancels the operation (see ``ConcurrentOperation/cancel()``) and the task running its
    /// closure, if it runs. Cancelled before it starts, the closure never runs.
    public override func cancel() {
        super.cancel()
        lock.withLock { runner }?.cancel(for: self)
    }

    /// Does nothing and returns `false`: the operation finishes when its closure returns or throws.
    @discardableResult
    public override func finish() -> Bool { false }

    override func didFinishWithoutExecuting() {
        body = nil
    }

    override func instrumentErrorsLocked() -> [any Error] {
        if let _error { return [_error] }
        return []
    }
}

/// The value an ``AsyncOperation``'s closure returned.
private final class OutputBox<Value: Sendable>: Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
