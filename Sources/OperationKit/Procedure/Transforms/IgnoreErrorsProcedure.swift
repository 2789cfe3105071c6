// IgnoreErrorsProcedure: runs a procedure and finishes without its errors, keeping them in
// `ignoredErrors`, so dependents behind NoFailedDependencies still run.

/// A ``ResultProcedure`` that runs another procedure and finishes without its errors, whatever
/// they are: dependents behind ``NoFailedDependencies`` still run. The errors stay readable in
/// ``ignoredErrors``.
///
/// ```swift
/// let warmUp = IgnoreErrorsProcedure(ClosureProcedure<Void>(name: "warm cache") { try syncContacts() })
/// let show = ClosureProcedure<Void>(name: "show") { log("ready") }
/// try show.addDependency(warmUp)
/// try show.addCondition(NoFailedDependencies())   // runs even if warming the cache failed
/// try queue.addOperations([warmUp, show], waitUntilFinished: false)
/// ```
///
/// - The wrapped ``procedure`` runs on a queue of the wrapper's own, as ``AnyProcedure``'s does;
///   the wrapper finishes once it — and whatever it produced — has finished, and holds no slot of
///   its queue meanwhile.
/// - The wrapper finishes with the wrapped procedure's ``ResultProcedure/output`` when it has one;
///   otherwise an `IgnoreErrorsProcedure<Void>` finishes with `()` (so that a consumer of its
///   value runs), and any other without a value.
/// - A wrapped procedure cancelled by someone else, or by a failed condition, does not cancel the
///   wrapper: its error is ignored like any other.
/// - Cancelling the wrapper cancels the wrapped procedure; the wrapper is then cancelled, with the
///   error of its own ``ProcedureOperation/cancel(with:)`` if one was given (that error is the
///   wrapper's, not the wrapped procedure's, so it is not ignored). Cancelled before it executes,
///   the wrapper lets the cancelled procedure finish (without executing) before it finishes.
/// - The wrapped procedure must be in no queue, not started and not finished: otherwise the
///   wrapper finishes, when it executes, with the error its queue gave — an error about the
///   wrapper itself, which is not ignored.
public final class IgnoreErrorsProcedure<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    /// The wrapped procedure.
    public let procedure: ProcedureOperation
    private let run: WrappedProcedureRun
    private let valueOfProcedure: @Sendable () -> Output?
    // protected by lock
    private var _ignoredErrors: [any Error] = []

    /// Wraps a procedure with a result: the wrapper finishes with its value, if it has one.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default `IgnoreErrors(` the wrapped one's name `)`.
    ///   - procedure: The procedure to run: in no queue, not started.
    public init(name: String? = nil, _ procedure: ResultProcedure<Output>) {
        let name = name ?? "IgnoreErrors(\(procedure.displayName))"
        self.procedure = procedure
        run = WrappedProcedureRun(procedure, wrapperName: name)
        valueOfProcedure = { procedure.output ?? (() as? Output) }
        super.init(name: name)
        run.attach(to: self)
        hookEvents = .didCancel  // the only hook it overrides (the class is final)
    }

    /// Wraps any procedure (a ``GroupOperation``, a procedure without a result): the wrapper
    /// finishes with `()`.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default `IgnoreErrors(` the wrapped one's name `)`.
    ///   - procedure: The procedure to run: in no queue, not started.
    public init(name: String? = nil, ignoringErrorsOf procedure: ProcedureOperation) where Output == Void {
        let name = name ?? "IgnoreErrors(\(procedure.displayName))"
        self.procedure = procedure
        run = WrappedProcedureRun(procedure, wrapperName: name)
        valueOfProcedure = { () }
        super.init(name: name)
        run.attach(to: self)
        hookEvents = .didCancel  // the only hook it overrides (the class is final)
    }

    /// The errors of the wrapped procedure that the wrapper did not finish with: empty until the
    /// wrapped procedure has finished. Set before the wrapper's will-finish observers are told.
    /// Readable from any thread.
    public var ignoredErrors: [any Error] { lock.withLock { _ignoredErrors } }

    /// Adds the wrapped procedure to the wrapper's queue; its end finishes the wrapper.
    public override func execute() {
        do {
            try run.start { self.wrappedDidFinish() }
        } catch {
            finish(with: error)
        }
    }

    private func wrappedDidFinish() {
        let errors = procedure.errors
        lock.withLock { _ignoredErrors = errors }
        if let value = valueOfProcedure() {
            finish(withValue: value)
        } else {
            finish()
        }
    }

    /// Cancels the wrapped procedure.
    ///
    /// - Parameter error: The error the wrapper was cancelled with, or `nil`.
    public override func procedureDidCancel(with error: (any Error)?) {
        procedure.cancel()
    }

    /// A wrapper whose `execute()` has returned only waits for the wrapped procedure.
    override var waitsWithoutSlot: Bool { true }

    override func adoptInstrument(_ instrument: any OperationInstrument) {
        run.queue.adoptInstrument(instrument, tellHeld: true)
    }

    /// The inner queue takes the executor and clock of the queue the wrapper was added to.
    override func adoptQueueSettings(of queue: ConcurrentOperationQueue) {
        run.queue.adoptSettings(of: queue)
    }

    /// Cancelled before executing: the wrapped procedure, cancelled, finishes first.
    override func finishWithoutExecuting() {
        procedure.cancel()
        do {
            try run.start { self.finishWithoutExecutingAsProcedure() }
        } catch {
            super.finishWithoutExecuting()
        }
    }

    /// Cancelled between its queue's start and its execution: the wrapped procedure finishes first.
    override func finishCancelledAtStart() {
        procedure.cancel()
        do {
            try run.start { self.finishCancelledAtStartAsProcedure() }
        } catch {
            super.finishCancelledAtStart()
        }
    }

    private func finishWithoutExecutingAsProcedure() {
        super.finishWithoutExecuting()
    }

    private func finishCancelledAtStartAsProcedure() {
        super.finishCancelledAtStart()
    }
}
