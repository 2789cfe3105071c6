// OperationObserver's will-add / did-add defaults and event queues: an observer told its events
// on a dispatch queue of its choosing (`eventQueue`, `observer.on(queue)`), and the wrapper that does it.

import Dispatch

extension OperationObserver {
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation about to be added.
    public func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation added.
    public func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation) {}

    /// `nil`: the observer is told on the thread where each event happens.
    public var eventQueue: DispatchQueue? { nil }

    /// This observer, told its events on `queue` (see ``OperationObserver/eventQueue``).
    ///
    /// ```swift
    /// let ui = DispatchQueue(label: "ui")
    /// try procedure.addObserver(ClosureObserver(didFinish: { _, errors in show(errors) }).on(ui))
    /// ```
    ///
    /// To be told in step with another object that works on a serial queue of its own, pass that
    /// queue: its work and this observer's events then never run at the same time.
    ///
    /// - Parameter queue: The queue the events are told on; a serial one.
    /// - Returns: An observer that forwards every event to this one, on `queue`.
    public func on(_ queue: DispatchQueue) -> EventQueueObserver {
        EventQueueObserver(self, on: queue)
    }
}

/// An observer told its events on a given dispatch queue: made by ``OperationObserver/on(_:)``.
/// It forwards every event, and its ``observedEvents``, to the observer it wraps.
public struct EventQueueObserver: OperationObserver {
    /// The observer told.
    public let base: any OperationObserver
    /// The queue it is told on.
    public let eventQueue: DispatchQueue?

    /// Wraps `base`, to be told on `queue`.
    ///
    /// - Parameters:
    ///   - base: The observer told.
    ///   - queue: The queue the events are told on; a serial one.
    public init(_ base: any OperationObserver, on queue: DispatchQueue) {
        self.base = (base as? EventQueueObserver)?.base ?? base
        eventQueue = queue
    }

    /// The events the wrapped observer wants.
    public var observedEvents: ProcedureEventKinds { base.observedEvents }

    /// Forwards the event. - Parameter procedure: The procedure observed.
    public func didAttach(to procedure: ProcedureOperation) { base.didAttach(to: procedure) }
    /// Forwards the event. - Parameter procedure: The procedure observed.
    public func willExecute(_ procedure: ProcedureOperation) { base.willExecute(procedure) }
    /// Forwards the event. - Parameter procedure: The procedure observed.
    public func didExecute(_ procedure: ProcedureOperation) { base.didExecute(procedure) }
    /// Forwards the event.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - error: The cancel's error, or `nil`.
    public func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) { base.didCancel(procedure, with: error) }
    /// Forwards the event.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation it produced.
    public func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        base.procedure(procedure, didProduce: operation)
    }
    /// Forwards the event.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation about to be added.
    public func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation) {
        base.procedure(procedure, willAdd: operation)
    }
    /// Forwards the event.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation added.
    public func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation) {
        base.procedure(procedure, didAdd: operation)
    }
    /// Forwards the event.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { base.willFinish(procedure, with: errors) }
    /// Forwards the event.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { base.didFinish(procedure, with: errors) }
}

/// What a procedure stores for an observer with an ``OperationObserver/eventQueue``: each event
/// is posted to the observer's mailbox, which tells it on that queue, in order (see
/// EventMailbox.swift for what waits for it).
struct ObserverOnEventQueue: OperationObserver {
    let base: any OperationObserver
    let mailbox: EventMailbox

    var observedEvents: ProcedureEventKinds { base.observedEvents }

    func didAttach(to procedure: ProcedureOperation) {
        mailbox.post(.didAttach) { [base] in base.didAttach(to: procedure) }
    }
    func willExecute(_ procedure: ProcedureOperation) {
        mailbox.post(.willExecute) { [base] in base.willExecute(procedure) }
    }
    func didExecute(_ procedure: ProcedureOperation) {
        mailbox.post(.didExecute) { [base] in base.didExecute(procedure) }
    }
    func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) {
        let error = UncheckedSendable(error)
        mailbox.post(.didCancel) { [base] in base.didCancel(procedure, with: error.value) }
    }
    func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        mailbox.post(.didProduce) { [base] in base.procedure(procedure, didProduce: operation) }
    }
    func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation) {
        mailbox.post(.willAdd) { [base] in base.procedure(procedure, willAdd: operation) }
    }
    func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation) {
        mailbox.post(.didAdd) { [base] in base.procedure(procedure, didAdd: operation) }
    }
    func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        let errors = UncheckedSendable(errors)
        mailbox.post(.willFinish) { [base] in base.willFinish(procedure, with: errors.value) }
    }
    func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        let errors = UncheckedSendable(errors)
        mailbox.post(.didFinish) { [base] in base.didFinish(procedure, with: errors.value) }
    }
}

/// Errors handed to an observer on its queue. Errors need not be `Sendable` (the observer
/// protocol passes them as `any Error`); the procedure's errors no longer change once they are
/// told, and are only read.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
