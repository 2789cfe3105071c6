// AnyProcedure: a type-erased result procedure, wrapping any ResultProcedure<Output> so that
// procedures of different classes with the same output share one type.

/// A ``ResultProcedure`` that runs another `ResultProcedure<Output>` and finishes as it does:
/// procedures of different classes with the same output fit in one collection, one property or
/// one return type.
///
/// ```swift
/// let sources: [AnyProcedure<Data>] = [
///     AnyProcedure(Download(url: "https://example.com/a")),
///     AnyProcedure(ClosureProcedure<Data> { Data() }),
/// ]
/// try queue.addOperations(sources, waitUntilFinished: false)
/// ```
///
/// - Executing adds the wrapped ``procedure`` to a queue of the wrapper's own (as a
///   ``GroupOperation`` does its children); the wrapper finishes once it — and whatever it
///   produced — has finished, and holds no slot of its queue meanwhile.
/// - The wrapper's ``ProcedureOperation/errors`` are the wrapped procedure's (after the error of a
///   ``ProcedureOperation/cancel(with:)`` of the wrapper, if any); without errors it finishes with
///   the wrapped procedure's ``ResultProcedure/output``, if it has one. A wrapped procedure that
///   ends cancelled leaves the wrapper cancelled too.
/// - Cancelling the wrapper cancels the wrapped procedure. Cancelled before it executes, the
///   wrapper lets the cancelled procedure finish (without executing) before it finishes.
/// - Other procedures can take its value like any result procedure's
///   (``ResultConsuming/injectResult(from:_:)``, ``TransformProcedure/injectInput(from:)``). To
///   inject into the wrapped procedure, inject into ``procedure`` itself — before or after
///   wrapping it, before the wrapper executes: it may depend on procedures outside.
/// - The wrapped procedure must be in no queue, not started and not finished: otherwise the
///   wrapper finishes, when it executes, with the error its queue gave
///   (``OperationError/Code-swift.struct/alreadyEnqueued``…).
public final class AnyProcedure<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    /// The wrapped procedure.
    public let procedure: ResultProcedure<Output>
    private let run: WrappedProcedureRun

    /// Wraps `procedure`.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default `AnyProcedure(` the wrapped one's name `)`.
    ///   - procedure: The procedure to run: in no queue, not started.
    public init(name: String? = nil, _ procedure: ResultProcedure<Output>) {
        let name = name ?? "AnyProcedure(\(procedure.displayName))"
        self.procedure = procedure
        run = WrappedProcedureRun(procedure, wrapperName: name)
        super.init(name: name)
        run.attach(to: self)
        hookEvents = .didCancel  // the only hook it overrides (the class is final)
    }

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
        // A wrapped procedure cancelled by someone else (or a failed condition): so is the wrapper.
        if procedure.isCancelled && !isCancelled { cancel() }
        if !errors.isEmpty {
            finish(withErrors: errors)
        } else if let value = procedure.output {
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
