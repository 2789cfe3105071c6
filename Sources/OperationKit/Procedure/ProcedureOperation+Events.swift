import Dispatch

#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The calling thread, to recognise the thread that is delivering a procedure's events.
struct ThreadIdentity {
    private let thread: pthread_t

    static var current: ThreadIdentity { ThreadIdentity(thread: pthread_self()) }

    func isCurrent() -> Bool { pthread_equal(thread, pthread_self()) != 0 }
}

/// One lifecycle event of a procedure.
enum ProcedureEvent {
    case didAttach(any OperationObserver)
    case willExecute
    case didExecute
    case didCancel((any Error)?)
    case didProduce(ConcurrentOperation)
    case willFinish([any Error])
    case didFinish([any Error])
}

/// An event waiting for delivery: the observers registered when it happened, and a semaphore if
/// the thread that raised it waits for its delivery.
struct PendingEvent {
    var event: ProcedureEvent
    var observers: [any OperationObserver]
    var delivered: DispatchSemaphore?
}

// Event delivery: one procedure's events run one at a time, in the order they happened. The thread
// that raises an event while none is being delivered delivers it (and any raised meanwhile);
// otherwise the event is queued for the thread delivering. Nothing is delivered under a lock.
extension ProcedureOperation {
    /// Adds an observer. It is told ``OperationObserver/didAttach(to:)`` at once, then every
    /// later event.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/tooLateToAddObserver`` once the procedure has
    ///   started executing (or finished).
    public func addObserver(_ observer: any OperationObserver) throws(OperationError) {
        let (accepted, state) = machine.lock.withLock { () -> (Bool, ProcedureState) in
            guard procedureLifecycle.acceptsObservers && !machine.lifecycle.isFinished else {
                return (false, procedureLifecycle.state)
            }
            observers.append(observer)
            return (true, procedureLifecycle.state)
        }
        guard accepted else {
            throw OperationError(.tooLateToAddObserver, operations: [displayName], "the procedure is \(state)")
        }
        emit(.didAttach(observer))
    }

    /// The number of observers added.
    public var observerCount: Int { machine.lock.withLock { observers.count } }

    /// Raises `event`. With `waitForDelivery`, returns only once it has been delivered (unless
    /// this thread is the one delivering, which delivers it after the event in progress).
    func emit(_ event: ProcedureEvent, waitForDelivery: Bool = false) {
        let (mustDeliver, delivered) = machine.lock.withLock {
            enqueueEventLocked(event, waitForDelivery: waitForDelivery)
        }
        if mustDeliver {
            deliverEvents()
        } else {
            delivered?.wait()
        }
    }

    /// Under `machine.lock`: queues `event`. Returns whether the caller must now deliver the
    /// queue (``deliverEvents()``), and the semaphore to wait on otherwise, if asked for.
    func enqueueEventLocked(_ event: ProcedureEvent, waitForDelivery: Bool)
        -> (mustDeliver: Bool, delivered: DispatchSemaphore?)
    {
        let observers: [any OperationObserver]
        if case .didAttach(let observer) = event { observers = [observer] } else { observers = self.observers }
        if !deliveringEvents {
            deliveringEvents = true
            deliveringThread = .current
            pendingEvents.append(PendingEvent(event: event, observers: observers, delivered: nil))
            return (true, nil)
        }
        let semaphore = waitForDelivery && deliveringThread?.isCurrent() != true ? DispatchSemaphore(value: 0) : nil
        pendingEvents.append(PendingEvent(event: event, observers: observers, delivered: semaphore))
        return (false, semaphore)
    }

    /// Delivers queued events until none is left. Called by the thread that set `deliveringEvents`.
    func deliverEvents() {
        while true {
            let next = machine.lock.withLock { () -> PendingEvent? in
                if pendingEvents.isEmpty {
                    deliveringEvents = false
                    deliveringThread = nil
                    return nil
                }
                return pendingEvents.removeFirst()
            }
            guard let next else { return }
            deliver(next.event, to: next.observers)
            next.delivered?.signal()
        }
    }

    private func deliver(_ event: ProcedureEvent, to observers: [any OperationObserver]) {
        switch event {
        case .didAttach(let observer):
            observer.didAttach(to: self)
        case .willExecute:
            procedureWillExecute()
            for observer in observers { observer.willExecute(self) }
        case .didExecute:
            procedureDidExecute()
            for observer in observers { observer.didExecute(self) }
        case .didCancel(let error):
            procedureDidCancel(with: error)
            for observer in observers { observer.didCancel(self, with: error) }
        case .didProduce(let operation):
            for observer in observers { observer.procedure(self, didProduce: operation) }
        case .willFinish(let errors):
            procedureWillFinish(with: errors)
            for observer in observers { observer.willFinish(self, with: errors) }
        case .didFinish(let errors):
            procedureDidFinish(with: errors)
            for observer in observers { observer.didFinish(self, with: errors) }
        }
    }
}
