extension ProcedureOperation {
    /// An event of a procedure's lifecycle, as ``events`` yields it: the events of
    /// ``OperationObserver`` (did attach excepted).
    public enum Event: Sendable, CustomStringConvertible {
        /// The procedure is about to execute.
        case willExecute
        /// Its `execute()` returned (or it finished first).
        case didExecute
        /// It was cancelled, with this error if one was given.
        case didCancel((any Error)?)
        /// It produced this operation (see ``ProcedureOperation/produce(_:)``).
        case didProduce(ConcurrentOperation)
        /// It is finishing, with these errors.
        case willFinish([any Error])
        /// It finished, with these errors: the last event.
        case didFinish([any Error])

        /// The event's name, for example `didCancel`.
        public var description: String {
            switch self {
            case .willExecute: "willExecute"
            case .didExecute: "didExecute"
            case .didCancel: "didCancel"
            case .didProduce(let operation): "didProduce(\(operation.displayName))"
            case .willFinish(let errors): "willFinish(\(errors.count) errors)"
            case .didFinish(let errors): "didFinish(\(errors.count) errors)"
            }
        }
    }

    /// A new stream of the procedure's lifecycle events, from now on; each read makes another
    /// stream (and adds an observer). It ends after ``Event/didFinish(_:)``. Events are buffered
    /// without limit.
    ///
    /// ```swift
    /// let events = procedure.events       // before the procedure executes
    /// try queue.addOperation(procedure)
    /// for await event in events { print(event) }
    /// ```
    ///
    /// The events are yielded as the observers are told (see ``OperationObserver``): in order,
    /// one at a time, on the thread where they happen.
    ///
    /// Observers can be added only until the procedure executes. Read the stream before that to
    /// get every event. Read later, while the procedure executes or finishes, the stream yields
    /// only ``Event/didFinish(_:)`` once the procedure has finished (told when waiters are
    /// resumed, which may be just before the did-finish observers), then ends; read after it has
    /// finished, it yields that at once and ends. The stream holds the procedure until it has
    /// finished; stopping the iteration early is allowed.
    ///
    /// The base operation's ``ConcurrentOperation/lifecycleEvents`` (started, cancelled,
    /// finished) is available too, also after the procedure executed.
    public var events: AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self)
        do {
            try addObserver(EventStreamObserver(continuation: continuation))
        } catch {
            // Too late for an observer: tell the finish only.
            let waiter = Waiter.callback { [self] in
                continuation.yield(.didFinish(errors))
                continuation.finish()
            }
            let added = lock.withLock { addWaiter(waiter) }
            if !added { waiter.resume() }
        }
        return stream
    }
}

/// The observer behind ``ProcedureOperation/events``.
private struct EventStreamObserver: OperationObserver {
    let continuation: AsyncStream<ProcedureOperation.Event>.Continuation

    var observedEvents: ProcedureEventKinds { ProcedureEventKinds.all.subtracting(.didAttach) }

    func willExecute(_ procedure: ProcedureOperation) { continuation.yield(.willExecute) }
    func didExecute(_ procedure: ProcedureOperation) { continuation.yield(.didExecute) }
    func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) { continuation.yield(.didCancel(error)) }
    func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        continuation.yield(.didProduce(operation))
    }
    func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { continuation.yield(.willFinish(errors)) }
    func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        continuation.yield(.didFinish(errors))
        continuation.finish()
    }
}
