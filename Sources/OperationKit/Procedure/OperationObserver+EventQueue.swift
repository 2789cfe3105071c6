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

/// Marks a dispatch queue used as an event queue, to recognise a thread already running on it.
private final class EventQueueMark: Sendable {
    let queue: ObjectIdentifier
    init(_ queue: DispatchQueue) { self.queue = ObjectIdentifier(queue) }
}

/// The key of the marks (set on the observers' queues only; never read as anything but a mark).
private let eventQueueKey = DispatchSpecificKey<EventQueueMark>()

/// What a procedure stores for an observer with an ``OperationObserver/eventQueue``: each event
/// runs the observer on that queue and waits for it, or runs it directly on a thread already on
/// that queue (a `sync` there would wait for itself). Waiting keeps the delivery one event at a
/// time, in order, and will execute / will finish ahead of what follows them.
struct ObserverOnEventQueue: OperationObserver {
    let base: any OperationObserver
    let queue: DispatchQueue

    /// `observer`, or a wrapper hopping onto its event queue if it has one.
    static func wrapping(_ observer: any OperationObserver) -> any OperationObserver {
        guard let queue = observer.eventQueue else { return observer }
        if queue.getSpecific(key: eventQueueKey) == nil { queue.setSpecific(key: eventQueueKey, value: EventQueueMark(queue)) }
        return ObserverOnEventQueue(base: observer, queue: queue)
    }

    var observedEvents: ProcedureEventKinds { base.observedEvents }

    private func run(_ body: () -> Void) {
        if DispatchQueue.getSpecific(key: eventQueueKey)?.queue == ObjectIdentifier(queue) {
            body()
        } else {
            queue.sync(execute: body)
        }
    }

    func didAttach(to procedure: ProcedureOperation) { run { base.didAttach(to: procedure) } }
    func willExecute(_ procedure: ProcedureOperation) { run { base.willExecute(procedure) } }
    func didExecute(_ procedure: ProcedureOperation) { run { base.didExecute(procedure) } }
    func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) { run { base.didCancel(procedure, with: error) } }
    func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        run { base.procedure(procedure, didProduce: operation) }
    }
    func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation) {
        run { base.procedure(procedure, willAdd: operation) }
    }
    func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation) {
        run { base.procedure(procedure, didAdd: operation) }
    }
    func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { run { base.willFinish(procedure, with: errors) } }
    func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { run { base.didFinish(procedure, with: errors) } }
}
