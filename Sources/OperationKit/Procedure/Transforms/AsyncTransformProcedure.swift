// AsyncTransformProcedure: a result procedure that turns an input into an output asynchronously,
// with an `async` closure run in a Swift task or with a callback-style closure.

/// A ``ResultProcedure`` that turns an `Input` into an `Output` asynchronously: the asynchronous
/// twin of ``TransformProcedure``. The work is an `async` closure, run in a Swift `Task` as
/// ``AsyncProcedure`` runs its own, or a closure handed a completion to call once, from any thread.
///
/// ```swift
/// let ids = ClosureProcedure<[Int]>(name: "ids") { [1, 2, 3] }
/// let fetch = AsyncTransformProcedure<[Int], [String]>(name: "fetch") { ids in
///     try await directory.names(of: ids)
/// }
/// try fetch.injectInput(from: ids)
/// try queue.addOperations([ids, fetch], waitUntilFinished: false)
/// ```
///
/// - The input is set in the initialiser, through ``input``, or injected with
///   ``injectInput(from:)``. Run without one, the procedure finishes with an
///   ``OperationError/Code-swift.struct/inputUnavailable`` error, as ``TransformProcedure`` does.
/// - An `async` closure: its value or thrown error finishes the procedure. Cancelling the
///   procedure cancels the task; if the procedure was cancelled without an error and the closure
///   then throws `CancellationError`, it finishes without an error (cancelled, not failed).
/// - A callback-style closure: the procedure finishes when `completion` is first called, with its
///   result; later calls are ignored. A cancel while it runs is only told (as to any procedure):
///   the closure's work must still call `completion`, unless ``ProcedureOperation/finishesWhenCancelled``
///   is set.
/// - Cancelled before it executes, it never runs the closure.
public final class AsyncTransformProcedure<Input: Sendable, Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    /// The callback a callback-style transform calls with its result.
    public typealias Completion = @Sendable (Result<Output, any Error>) -> Void

    // Set in init, taken by `execute()` (which runs at most once), cleared when the procedure
    // finishes without executing; the queue's and the state machine's locks order those accesses.
    @exclusivity(unchecked) private var asyncBody: (@Sendable (Input) async throws -> Output)?
    @exclusivity(unchecked) private var callbackBody: (@Sendable (Input, @escaping Completion) -> Void)?
    private let priority: TaskPriority?

    // protected by lock
    private var _input: Input?
    // protected by lock: the task running an `async` closure, until it has returned
    @exclusivity(unchecked) private var task: Task<Void, Never>?
    @exclusivity(unchecked) private var bodyReturned = false

    /// Creates a procedure whose transform is an `async` closure, run in a task when it executes.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - input: The input, if known now.
    ///   - priority: The task's priority; by default it follows the quality of service, as
    ///     ``AsyncProcedure``'s.
    ///   - transform: Runs at most once; its value or thrown error finishes the procedure.
    public init(
        name: String? = nil, input: Input? = nil, priority: TaskPriority? = nil,
        _ transform: @escaping @Sendable (Input) async throws -> Output
    ) {
        _input = input
        asyncBody = transform
        self.priority = priority
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// Creates a procedure whose transform is handed the input and a completion to call with the
    /// result, now or later, from any thread.
    ///
    /// ```swift
    /// let decode = AsyncTransformProcedure<Data, Image>(name: "decode", callback: { data, completion in
    ///     decoder.decode(data) { completion($0) }
    /// })
    /// ```
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - input: The input, if known now.
    ///   - transform: Runs at most once, on the thread that executes the procedure. The first call
    ///     of its completion finishes the procedure; every path must call it.
    public init(
        name: String? = nil, input: Input? = nil,
        callback transform: @escaping @Sendable (Input, @escaping Completion) -> Void
    ) {
        _input = input
        callbackBody = transform
        priority = nil
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// The input. Set it before the procedure executes; the procedure lets go of it when its
    /// transform starts. Readable and writable from any thread.
    public var input: Input? {
        get { lock.withLock { _input } }
        set { lock.withLock { _input = newValue } }
    }

    /// Makes this procedure depend on `producer` and take its value as ``input``; as
    /// ``TransformProcedure/injectInput(from:)``.
    ///
    /// - Parameter producer: The procedure whose value becomes the input.
    /// - Throws: What ``ResultConsuming/injectResult(from:_:)`` throws.
    public func injectInput(from producer: ResultProcedure<Input>) throws(OperationError) {
        try injectResult(from: producer) { consumer, value in consumer.input = value }
    }

    /// Takes the input and starts the transform, or finishes with
    /// ``OperationError/Code-swift.struct/inputUnavailable`` if there is no input.
    public override func execute() {
        let asyncBody = self.asyncBody
        let callbackBody = self.callbackBody
        self.asyncBody = nil
        self.callbackBody = nil
        let input = lock.withLock { () -> Input? in
            defer { _input = nil }
            return _input
        }
        guard let input else {
            finish(with: missingInputError())
            return
        }
        if let callbackBody {
            callbackBody(input) { result in self.finish(withResult: result) }
        } else if let asyncBody {
            start(asyncBody, with: input)
        } else {
            finish()
        }
    }

    private func start(_ body: @escaping @Sendable (Input) async throws -> Output, with input: Input) {
        let task = Task(priority: priority ?? taskPriorityForExecution) {
            let outcome: Result<Output, any Error>
            do {
                outcome = .success(try await body(input))
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
    /// running an `async` transform, if it runs.
    ///
    /// - Parameter error: Why the procedure was cancelled, or `nil`.
    public override func cancel(with error: (any Error)?) {
        super.cancel(with: error)
        lock.withLock { task }?.cancel()
    }

    override func didFinishWithoutExecuting() {
        asyncBody = nil
        callbackBody = nil
    }
}
