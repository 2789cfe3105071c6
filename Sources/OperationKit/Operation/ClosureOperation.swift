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
    }

    // Written in init, then read and cleared by `execute()`, which runs at most once, or — for an
    // operation cancelled before it started, whose `execute()` never runs — cleared by
    // `didFinishWithoutExecuting()`; the queue's and the state machine's locks order those accesses.
    private var body: Body?

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

    override func didFinishWithoutExecuting() {
        body = nil
    }

    /// Runs the closure: the synchronous form finishes when it returns; the asynchronous form
    /// hands the operation to the closure, which finishes it. Runs at most once.
    public override func execute() {
        let body = self.body
        self.body = nil
        switch body {
        case .synchronous(let block):
            block()
            finishAfterStart(asLastStep: true)
        case .asynchronous(let block):
            block(self)
        case nil:
            finish()
        }
    }
}
