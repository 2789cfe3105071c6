/// An operation that runs a closure.
///
/// Two forms:
/// - ``init(name:_:)`` runs a synchronous closure; the operation finishes when it returns.
/// - ``init(name:asynchronous:)`` hands the operation to the closure, which calls
///   ``ConcurrentOperation/finish()`` when the work is done — the way to wrap an existing
///   callback-based API:
///
/// ```swift
/// let run = ClosureOperation(asynchronous: { operation in
///     let process = Process()
///     process.executableURL = URL(fileURLWithPath: "/bin/sleep")
///     process.arguments = ["1"]
///     process.terminationHandler = { _ in operation.finish() }
///     do { try process.run() } catch { operation.finish() }
/// })
/// ```
///
/// The closure runs where ``ConcurrentOperation/execute()`` runs: on a worker of the operation's
/// queue, or on the thread that called ``ConcurrentOperation/start()``. It is released once it
/// has run, so a closure that captures the operation forms no lasting retain cycle.
public final class ClosureOperation: ConcurrentOperation, @unchecked Sendable {
    private enum Body {
        case synchronous(@Sendable () -> Void)
        case asynchronous(@Sendable (ClosureOperation) -> Void)
        /// The first block and those added by ``addExecutionBlock(_:)``, run in order. An array
        /// (one word) fits in the closures' payload: a pending operation is no bigger.
        case several([@Sendable () -> Void])
    }

    // Written in init (and by `addExecutionBlock(_:)` under `lock` before the operation
    // starts), then read and cleared by `execute()`, which runs at most once, or — for an
    // operation cancelled before it started, whose `execute()` never runs — cleared by
    // `didFinishWithoutExecuting()`; the queue's and the state machine's locks order those accesses.
    @exclusivity(unchecked) private var body: Body?

    /// Creates an operation that runs `block` and finishes when it returns.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - block: The work. Runs once, unless the operation is cancelled before it starts.
    public init(name: String? = nil, _ block: @escaping @Sendable () -> Void) {
        body = .synchronous(block)
        super.init(name: name)
    }

    /// Creates an operation that hands itself to `block`, which must call
    /// ``ConcurrentOperation/finish()`` on it once the work is done, from any thread.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - block: Starts the work. Runs once, unless the operation is cancelled before it starts.
    public init(name: String? = nil, asynchronous block: @escaping @Sendable (ClosureOperation) -> Void) {
        body = .asynchronous(block)
        super.init(name: name)
    }

    /// Adds a block that runs with the operation's first one, as Foundation's
    /// `BlockOperation.addExecutionBlock(_:)`; the operation finishes once every block has returned.
    ///
    /// The blocks run one after another, in the order they were added, on the thread that executes
    /// the operation (Foundation's may run at once on several threads): a block may rely on the
    /// ones before it having returned. Only for an operation made with ``init(name:_:)``, before it
    /// starts; an operation cancelled before it starts runs none of them.
    ///
    /// - Parameter block: More work, run once after the blocks before it.
    /// - Throws: ``OperationError/Code-swift.struct/alreadyStarted`` or
    ///   ``OperationError/Code-swift.struct/alreadyFinished`` once the operation has started or
    ///   finished; ``OperationError/Code-swift.struct/asynchronousClosure`` for an operation made
    ///   with ``init(name:asynchronous:)``, whose closure finishes it. The block is then not added.
    public func addExecutionBlock(_ block: @escaping @Sendable () -> Void) throws(OperationError) {
        let refusal = lock.withLock { () -> OperationError.Code? in
            let lifecycle = self.lifecycle
            if lifecycle.isFinished { return .alreadyFinished }
            if !lifecycle.isReady { return .alreadyStarted }
            switch body {
            case .synchronous(let first):
                body = .several([first, block])
            case .several(var blocks):
                body = nil  // the array is then uniquely referenced: appended in place
                blocks.append(block)
                body = .several(blocks)
            case .asynchronous:
                return .asynchronousClosure
            case nil:
                return .alreadyStarted
            }
            return nil
        }
        if let refusal {
            throw OperationError(refusal, operations: [displayName], "cannot add an execution block")
        }
    }

    override func didFinishWithoutExecuting() {
        body = nil
    }

    /// Runs the closure: the synchronous form finishes when it returns; the asynchronous form
    /// hands the operation to the closure, which finishes it. Runs at most once.
    public override func execute() {
        // Moved out rather than copied and cleared: with three cases of different payloads, a
        // copy and a destroy are outlined calls, a few instructions per operation.
        switch body.take() {
        case .synchronous(let block):
            block()
            finishAfterStart(asLastStep: true)
        case .asynchronous(let block):
            block(self)
        case .several(let blocks):
            for block in blocks { block() }
            finishAfterStart(asLastStep: true)
        case nil:
            finish()
        }
    }
}
