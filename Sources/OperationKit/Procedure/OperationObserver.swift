import Dispatch

/// Something told about a ``ProcedureOperation``'s lifecycle.
///
/// Each event reaches each observer at most once per procedure, in lifecycle order — did attach;
/// will execute and did execute (only if it executes); did produce (while it executes); did cancel
/// (when it is cancelled: before, during or instead of executing); will finish and did finish,
/// last, exactly once — never two at a time for one procedure, and never while a lock is held.
/// Events run on the thread where they happen (the queue worker for will/did execute, the
/// cancelling thread for did cancel, the finishing thread for will/did finish); an event raised
/// while another is being delivered for the same procedure is delivered right after it, by the
/// thread delivering. So an observer must not wait for its procedure to finish.
///
/// Every method has an empty default implementation: implement only what you need.
public protocol OperationObserver: Sendable {
    /// The observer was added to `procedure`.
    func didAttach(to procedure: ProcedureOperation)
    /// `procedure` is about to execute: its conditions were satisfied and it was not cancelled.
    func willExecute(_ procedure: ProcedureOperation)
    /// `procedure`'s ``ProcedureOperation/execute()`` returned (or the procedure finished, if
    /// that came first).
    func didExecute(_ procedure: ProcedureOperation)
    /// `procedure` was cancelled, with `error` if one was given.
    func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?)
    /// `procedure` produced `operation` (see ``ProcedureOperation/produce(_:)``).
    func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation)
    /// `procedure` is finishing, with these errors; it has not finished yet.
    func willFinish(_ procedure: ProcedureOperation, with errors: [any Error])
    /// `procedure` finished, with these errors. The last event.
    func didFinish(_ procedure: ProcedureOperation, with errors: [any Error])
}

extension OperationObserver {
    public func didAttach(to procedure: ProcedureOperation) {}
    public func willExecute(_ procedure: ProcedureOperation) {}
    public func didExecute(_ procedure: ProcedureOperation) {}
    public func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) {}
    public func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {}
    public func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {}
    public func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {}
}

/// An observer made of closures, one per event; leave out the ones you do not need.
///
/// ```swift
/// try procedure.addObserver(ClosureObserver(didFinish: { procedure, errors in
///     log("\(procedure.displayName) finished with \(errors.count) errors")
/// }))
/// ```
public struct ClosureObserver: OperationObserver {
    let onDidAttach: (@Sendable (ProcedureOperation) -> Void)?
    let onWillExecute: (@Sendable (ProcedureOperation) -> Void)?
    let onDidExecute: (@Sendable (ProcedureOperation) -> Void)?
    let onDidCancel: (@Sendable (ProcedureOperation, (any Error)?) -> Void)?
    let onDidProduce: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)?
    let onWillFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)?
    let onDidFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)?

    /// Creates an observer from the closures given. Each runs as the event of the same name of
    /// ``OperationObserver``.
    public init(
        didAttach: (@Sendable (ProcedureOperation) -> Void)? = nil,
        willExecute: (@Sendable (ProcedureOperation) -> Void)? = nil,
        didExecute: (@Sendable (ProcedureOperation) -> Void)? = nil,
        didCancel: (@Sendable (ProcedureOperation, (any Error)?) -> Void)? = nil,
        didProduce: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)? = nil,
        willFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)? = nil,
        didFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)? = nil
    ) {
        onDidAttach = didAttach
        onWillExecute = willExecute
        onDidExecute = didExecute
        onDidCancel = didCancel
        onDidProduce = didProduce
        onWillFinish = willFinish
        onDidFinish = didFinish
    }

    public func didAttach(to procedure: ProcedureOperation) { onDidAttach?(procedure) }
    public func willExecute(_ procedure: ProcedureOperation) { onWillExecute?(procedure) }
    public func didExecute(_ procedure: ProcedureOperation) { onDidExecute?(procedure) }
    public func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) { onDidCancel?(procedure, error) }
    public func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        onDidProduce?(procedure, operation)
    }
    public func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { onWillFinish?(procedure, errors) }
    public func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { onDidFinish?(procedure, errors) }
}

/// Cancels a procedure with an ``OperationError/Code-swift.struct/timedOut`` error if it has not
/// finished within `timeout` of starting to execute. Does nothing if it finished or was cancelled
/// first. The procedure is cancelled, not finished: it is told, and finishes itself (or set
/// ``ProcedureOperation/finishesWhenCancelled``).
public struct TimeoutObserver: OperationObserver {
    /// How long the procedure may execute.
    public let timeout: Duration

    /// - Parameter timeout: How long the procedure may execute before it is cancelled.
    public init(timeout: Duration) {
        self.timeout = timeout
    }

    public func willExecute(_ procedure: ProcedureOperation) {
        let timeout = self.timeout
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout.dispatchInterval) { [weak procedure] in
            guard let procedure, !procedure.isFinished, !procedure.isCancelled else { return }
            procedure.cancel(with: OperationError(
                .timedOut, operations: [procedure.displayName], "did not finish within \(timeout)"))
        }
    }
}
