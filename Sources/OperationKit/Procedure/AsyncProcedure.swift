/// A ``ResultProcedure`` whose work is an `async` closure, run in a Swift `Task`: conditions,
/// observers, result injection and everything else of a procedure apply.
///
/// ```swift
/// let fetch = AsyncProcedure<Data>(name: "fetch") { try await client.data(from: url) }
/// try fetch.addCondition(NoFailedDependencies())
/// let decode = TransformProcedure<Data, Image> { try Image(data: $0) }
/// try decode.injectInput(from: fetch)
/// try queue.addOperations([fetch, decode], waitUntilFinished: false)
/// let image = try await decode.value
/// ```
///
/// - Executing starts one task running the closure; the procedure finishes with its value
///   (``ResultProcedure/finish(withValue:)``) or the error it throws
///   (``ProcedureOperation/finish(with:)``) and holds its queue slot until then. The task's
///   priority follows the same rule as ``AsyncOperation``'s.
/// - Cancelling the procedure cancels the task. If the procedure was cancelled without an error
///   and the closure then throws `CancellationError`, the procedure finishes without an error:
///   it is cancelled, not failed (its ``ResultProcedure/value`` throws
///   ``OperationError/Code-swift.struct/cancelled``). Any other error is recorded.
/// - A procedure cancelled before it executes never runs the closure.
/// - The hooks (`procedureWillExecute()`…) are not used: the class is final. Observe with an
///   ``OperationObserver`` or ``ProcedureOperation/events``.
public final class AsyncProcedure<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    // Set in init, taken by `execute()` (which runs at most once), cleared when the procedure
    // finishes without executing; the queue's and the state machine's locks order those accesses.
    @exclusivity(unchecked) private var body: (@Sendable () async throws -> Output)?
    private let priority: TaskPriority?

    // protected by lock
    /// The task running the closure, until it has returned.
    @exclusivity(unchecked) private var task: Task<Void, Never>?
    @exclusivity(unchecked) private var bodyReturned = false

    /// Creates a procedure that runs `body` in a task when it executes.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - priority: The task's priority; by default it follows the quality of service.
    ///   - body: The work. Runs at most once; its value or thrown error finishes the procedure.
    public init(
        name: String? = nil, priority: TaskPriority? = nil, _ body: @escaping @Sendable () async throws -> Output
    ) {
        self.body = body
        self.priority = priority
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// Starts the task that runs the closure, and returns; the closure's end finishes the
    /// procedure.
    public override func execute() {
        guard let body else {
            finish()
            return
        }
        self.body = nil
        let task = Task(priority: priority ?? taskPriorityForExecution) {
            let outcome: Result<Output, any Error>
            do {
                outcome = .success(try await body())
            } catch {
                outcome = .failure(error)
            }
            let cancelledWithoutError = self.lock.withLock { () -> Bool in
                self.task = nil
                self.bodyReturned = true
                return self.lifecycle.isCancelled && self._errors.isEmpty
            }
            switch outcome {
            case .success(let value):
                self.finish(withValue: value)
            case .failure(let error) where error is CancellationError && cancelledWithoutError:
                self.finish()
            case .failure(let error):
                self.finish(with: error)
            }
        }
        // Published in the same step as the cancelled flag is read: a cancel either comes after
        // (and finds the task) or before (and is seen here).
        let cancelled = lock.withLock { () -> Bool in
            if bodyReturned { return false }
            self.task = task
            return lifecycle.isCancelled
        }
        if cancelled { task.cancel() }
    }

    /// Cancels the procedure as ``ProcedureOperation/cancel(with:)`` describes, and the task
    /// running its closure, if it runs.
    ///
    /// - Parameter error: Why the procedure was cancelled, or `nil`.
    public override func cancel(with error: (any Error)?) {
        super.cancel(with: error)
        lock.withLock { task }?.cancel()
    }

    override func didFinishWithoutExecuting() {
        body = nil
    }
}
