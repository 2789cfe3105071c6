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

/// One lifecycle event of a procedure. Every payload is one reference, so the enum is copied
/// with a retain (an existential payload would make every copy a value-witness call).
enum ProcedureEvent {
    /// Delivered only to the observer being attached (the event's observer list).
    case didAttach
    case willExecute
    case didExecute
    case didCancel((any Error)?)
    /// A produced operation or a group's child is about to be added (see `produce(_:before:)`).
    case willAdd(ConcurrentOperation)
    /// A group's child was added.
    case didAdd(ConcurrentOperation)
    /// A produced operation was added: did add, and did produce too.
    case didProduce(ConcurrentOperation)
    case willFinish([any Error])
    case didFinish([any Error])
}

/// An event waiting for delivery: the observers registered when it happened, a semaphore if the
/// thread that raised it waits for its delivery, and what must run right after it is delivered
/// (the rest of a finish), when the thread delivering runs that.
struct PendingEvent {
    var event: ProcedureEvent
    var observers: ObserversToTell
    var delivered: DispatchSemaphore?
    var then: AfterDelivery
}

/// What must run right after an event has been delivered: nothing, or the rest of a finish once
/// will finish has been delivered. (An enum rather than a closure: no allocation per finish.)
enum AfterDelivery {
    case nothing
    /// The rest of a finish after executing (see `ProcedureOperation.finishExecuted`).
    case finishExecuted(asLastStep: Bool)
    /// The rest of a finish without executing.
    case finishWithoutExecuting
    /// After did finish: the queue lets go of the procedure and waiters are resumed (see
    /// `ProcedureOperation.didComplete`).
    case completeTail(ProcedureOperation.PendingTail)

    var isNothing: Bool {
        if case .nothing = self { return true }
        return false
    }
}

/// The observers an event goes to: those the procedure had when it happened.
enum ObserversToTell {
    case none
    /// The procedure's first observer, its only one then. Read without the lock when the event
    /// is delivered: it does not change until the procedure lets go of its observers, which
    /// happens only once nothing is being delivered.
    case first
    /// Several, in the order they were added (or the observer being attached, for did attach).
    case list([any OperationObserver])
}

/// What a thread that raised an event does next.
enum EventDisposition {
    /// Nothing was being delivered: deliver the event just raised to these observers (and run its
    /// `then`), then any raised meanwhile. The raising thread still holds the event, so it is not
    /// copied into a `PendingEvent` (events are large enums: each copy costs a value-witness call).
    case deliverNow(ObserversToTell)
    /// Another thread delivers it: wait on the semaphore, then run your `then` yourself.
    case wait(DispatchSemaphore)
    /// Queued; the thread delivering (possibly this one, further up its stack) delivers it and
    /// runs its `then`.
    case queued
    /// Nobody listens to this kind of event (no observer, and no hook that the class uses): it is
    /// not delivered; run your `then` yourself.
    case skipped
}

/// Kinds of procedure events, to say which ones an observer (or a procedure class's hooks)
/// listens to.
public struct ProcedureEventKinds: OptionSet, Hashable, Sendable {
    /// The set's bits, one per kind of event.
    public let rawValue: UInt8

    /// Creates a set from its bits.
    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// The did attach event.
    public static let didAttach = ProcedureEventKinds(rawValue: 1 << 0)
    /// The will execute event.
    public static let willExecute = ProcedureEventKinds(rawValue: 1 << 1)
    /// The did execute event.
    public static let didExecute = ProcedureEventKinds(rawValue: 1 << 2)
    /// The did cancel event.
    public static let didCancel = ProcedureEventKinds(rawValue: 1 << 3)
    /// The did add event: an operation was added by ``ProcedureOperation/produce(_:before:)`` or
    /// ``GroupOperation/addChild(_:before:)``.
    public static let didAdd = ProcedureEventKinds(rawValue: 1 << 4)
    /// The did produce event: the did add event of a produced operation. The same kind as
    /// ``didAdd`` (one bit): an observer that wants one is told both methods.
    public static let didProduce = didAdd
    /// The will add event: an operation is about to be added by
    /// ``ProcedureOperation/produce(_:before:)`` or ``GroupOperation/addChild(_:before:)``.
    public static let willAdd = ProcedureEventKinds(rawValue: 1 << 7)
    /// The will finish event.
    public static let willFinish = ProcedureEventKinds(rawValue: 1 << 5)
    /// The did finish event.
    public static let didFinish = ProcedureEventKinds(rawValue: 1 << 6)
    /// Every kind.
    public static let all = ProcedureEventKinds(rawValue: 0xFF)
}

extension ProcedureEvent {
    /// Will execute or will finish.
    var isWill: Bool {
        switch self {
        case .willExecute, .willFinish: true
        default: false
        }
    }

    var kind: ProcedureEventKinds {
        switch self {
        case .didAttach: .didAttach
        case .willExecute: .willExecute
        case .didExecute: .didExecute
        case .didCancel: .didCancel
        case .willAdd: .willAdd
        case .didAdd, .didProduce: .didAdd
        case .willFinish: .willFinish
        case .didFinish: .didFinish
        }
    }
}

// Event delivery: one procedure's events run one at a time, in the order they happened. The thread
// that raises an event while none is being delivered delivers it (and any raised meanwhile);
// otherwise the event is queued for the thread delivering. Nothing is delivered under a lock.
extension ProcedureOperation {
    /// Adds an observer. It is told ``OperationObserver/didAttach(to:)`` first — at once, on the
    /// calling thread, unless another thread is delivering this procedure's events, which then
    /// tells it right after — and then every later event, but none that happened before.
    ///
    /// The procedure holds its observers until it has finished, then lets them go, so an observer
    /// may capture the procedure without making a retain cycle that outlives it.
    ///
    /// - Parameter observer: The observer to add.
    /// - Throws: ``OperationError/Code-swift.struct/tooLateToAddObserver`` once the procedure has
    ///   started executing (or has finished).
    public func addObserver(_ observer: any OperationObserver) throws(OperationError) {
        // An observer that asks for an event queue is told through a wrapper that posts to it
        // (asked once, here: the delivery path stays the same for every other observer).
        if let queue = observer.eventQueue {
            let mailbox = EventMailbox(queue: queue)
            try addObserver(ObserverOnEventQueue(base: observer, mailbox: mailbox), mailbox: mailbox)
        } else {
            try addObserver(observer, mailbox: nil)
        }
    }

    /// Adds `observer` (see the public method), whose events go to `mailbox` if it has one.
    private func addObserver(_ observer: any OperationObserver, mailbox: EventMailbox?) throws(OperationError) {
        let (event, state) = lock.withLock { () -> (EventDisposition?, ProcedureState) in
            guard procedureLifecycle.acceptsObservers && !lifecycle.isFinished else {
                return (nil, procedureLifecycle.state)
            }
            // In the same step: no event reaches the observer before did attach.
            guard storeObserverLocked(observer, mailbox: mailbox) else { return (.skipped, procedureLifecycle.state) }
            return (enqueueEventLocked(.didAttach, observers: [observer]), procedureLifecycle.state)
        }
        guard let event else {
            throw OperationError(.tooLateToAddObserver, operations: [displayName], "the procedure is \(state)")
        }
        handle(event, delivering: .didAttach, then: .nothing)
    }

    /// Under `lock` (or in the initialiser, before the procedure is shared): stores `observer`
    /// after the others, its events going to `mailbox` if it has one. Returns whether it wants
    /// did attach.
    @inline(__always)
    private func storeObserverLocked(_ observer: any OperationObserver, mailbox: EventMailbox?) -> Bool {
        if observerTotal == 0 { firstObserver = FirstObserver(observer) } else { extrasLocked.moreObservers.append(observer) }
        observerTotal += 1
        if let mailbox {
            extrasLocked.eventMailboxes.append(mailbox)
            hasEventQueueObservers.store(true, ordering: .releasing)
        }
        let wanted = observer.observedEvents
        observedEvents.formUnion(wanted)
        return wanted.contains(.didAttach)
    }

    /// In the initialiser, once the procedure is complete but before it is shared: stores the
    /// observers given to it, in order, without the lock and with the same bookkeeping as
    /// ``addObserver(_:)``; then tells did attach, on this thread, to those that want it, in
    /// order. All are attached before the first is told: an event raised from a did attach (a
    /// cancel, say) is delivered after every did attach, to every observer.
    func attachObserversAtInit(_ observers: borrowing [any OperationObserver]) {
        var attaching: [any OperationObserver] = []
        for index in observers.indices {
            let observer = observers[index]
            let wantsDidAttach: Bool
            if let queue = observer.eventQueue {
                let mailbox = EventMailbox(queue: queue)
                let wrapped = ObserverOnEventQueue(base: observer, mailbox: mailbox)
                wantsDidAttach = storeObserverLocked(wrapped, mailbox: mailbox)
                if wantsDidAttach { attaching.append(wrapped) }
            } else {
                wantsDidAttach = storeObserverLocked(observer, mailbox: nil)
                if wantsDidAttach { attaching.append(observer) }
            }
        }
        guard !attaching.isEmpty else { return }
        // Through the delivery (the observers may share the procedure from their did attach):
        // the first is delivered now, the others queued behind it, in order.
        let first = lock.withLock { () -> EventDisposition in
            var first: EventDisposition?
            for observer in attaching {
                let disposition = enqueueEventLocked(.didAttach, observers: [observer])
                if first == nil { first = disposition }
            }
            return first!
        }
        handle(first, delivering: .didAttach, then: .nothing)
    }

    /// The number of observers added; 0 again once the procedure has finished and let them go
    /// (as for ``conditionCount``: by the time did finish is told, and before waits return).
    public var observerCount: Int { lock.withLock { Int(observerTotal) } }

    /// Raises `event`. With `waitForDelivery`, returns only once it has been delivered — unless
    /// this thread is the one delivering, which delivers it after the event in progress. `then`
    /// runs right after the event is delivered (on the thread delivering, or on this one).
    func emit(_ event: ProcedureEvent, waitForDelivery: Bool = false, then: AfterDelivery = .nothing) {
        let disposition = lock.withLock {
            enqueueEventLocked(event, waitForDelivery: waitForDelivery, then: then)
        }
        handle(disposition, delivering: event, then: then)
    }

    /// Acts on what ``enqueueEventLocked(_:waitForDelivery:then:)`` returned, without the lock.
    /// `event` and `then` are the ones given to ``enqueueEventLocked(_:waitForDelivery:then:)``.
    /// Returns the procedure's state as read when this thread ended the delivery, if it delivered.
    @discardableResult
    func handle(_ disposition: EventDisposition, delivering event: ProcedureEvent, then: AfterDelivery) -> ProcedureState? {
        switch disposition {
        case .deliverNow(let observers):
            deliver(event, to: observers)
            run(then)
            return deliverQueuedEvents()
        case .wait(let delivered):
            delivered.wait()
            run(then)
            return nil
        case .queued:
            return nil
        case .skipped:
            run(then)
            return nil
        }
    }

    /// Runs what follows an event's delivery (or its skipping), on this thread, or once the
    /// observers with an event queue have been told.
    func run(_ after: AfterDelivery) {
        if case .nothing = after { return }
        // The rest of a finish, after will finish or did finish: once the observers with an event
        // queue have been told (a last job on their queue if they have not yet).
        run(after, after: hasEventQueueObservers.load(ordering: .acquiring) ? eventMailboxes() : [])
    }

    /// ``run(_:)`` once `mailboxes` (read by the caller) have run what was posted to them.
    func run(_ after: AfterDelivery, after mailboxes: [EventMailbox]) {
        if case .nothing = after { return }
        if !mailboxes.isEmpty {
            let after = UncheckedSendable(after)
            EventMailboxes.after(mailboxes) { [self] in runNow(after.value) }
            return
        }
        runNow(after)
    }

    private func runNow(_ after: AfterDelivery) {
        switch after {
        case .nothing: break
        case .finishExecuted(let asLastStep): finishExecuted(asLastStep: asLastStep)
        case .finishWithoutExecuting: finishedWithoutExecuting()
        case .completeTail(let pending): completeTail(pending.tail)
        }
    }

    /// Under `lock`: queues `event`, in the same critical section as the state change it
    /// reports, so that no later event overtakes it.
    ///
    /// `handOffThen`: if another thread is delivering, it runs `then` after delivering the event,
    /// and this thread goes on at once (instead of waiting for the delivery to run `then` itself).
    func enqueueEventLocked(
        _ event: ProcedureEvent, observers attached: [any OperationObserver]? = nil, waitForDelivery: Bool = false,
        then: AfterDelivery = .nothing, handOffThen: Bool = false
    ) -> EventDisposition {
        // An event nobody listens to is dropped — unless it carries the rest of a finish while
        // another thread delivers, which must then wait its turn. (`addObserver` raises did attach
        // only for an observer that wants it.)
        let kind = event.kind
        if kind != .didAttach && !observedEvents.union(hookEvents).contains(kind) && (then.isNothing || !eventDelivery.isDelivering) {
            return .skipped
        }
        // Did attach goes to the attached observer only.
        let observers: ObserversToTell
        if let attached {
            observers = .list(attached)
        } else if observerTotal == 0 {
            observers = .none
        } else if observerTotal == 1 {
            observers = .first
        } else {
            observers = .list(observersLocked)
        }
        if eventDelivery.begin(on: .current, will: event.isWill) {
            return .deliverNow(observers)
        }
        if eventDelivery.isDeliveringOnCurrentThread || handOffThen {
            // Raised while this thread delivers an event of this procedure: delivered (and `then`
            // run) by this thread's delivery loop once the current event returns. (Or handed
            // off: the thread delivering runs `then`.)
            eventDelivery.enqueue(PendingEvent(event: event, observers: observers, delivered: nil, then: then))
            return .queued
        }
        if waitForDelivery || !then.isNothing {
            let delivered = DispatchSemaphore(value: 0)
            eventDelivery.enqueue(PendingEvent(event: event, observers: observers, delivered: delivered, then: .nothing))
            return .wait(delivered)
        }
        eventDelivery.enqueue(PendingEvent(event: event, observers: observers, delivered: nil, then: .nothing))
        return .queued
    }

    /// Delivers the queued events until none is left, running each one's `then` after it; then
    /// ends the delivery. Called by the thread that began the delivery, after the event it raised.
    /// Returns the procedure's state, read in the critical section that ended the delivery (so
    /// that the caller need not take the lock again to read it).
    ///
    /// Did finish, queued last once the procedure has finished, is delivered in the order of a
    /// finish that tells it at once (`completeDirectly`): the counts read 0 while it is told, the
    /// conditions and observers are let go after it, and only then does its `then` complete the
    /// finish (completion block, the queue, waiters).
    @discardableResult
    func deliverQueuedEvents() -> ProcedureState {
        var state = ProcedureState.initialized
        var released = false
        var releasesNow = false
        while let current = lock.withLock({ () -> PendingEvent? in
            switch eventDelivery.next() {
            case .deliver(let pending):
                if case .didFinish = pending.event, eventDelivery.releasesAfterLastEvent {
                    // Nothing comes after did finish (the observers to tell are read from the
                    // fields, which only `releaseUnlocked()` clears).
                    _ = markReleasedLocked()
                    releasesNow = true
                }
                return pending
            case .ended(let release):
                state = procedureLifecycle.state
                if release && !released {
                    // Did finish was delivered (and did not release itself): nothing comes after it.
                    _ = markReleasedLocked()
                    releasesNow = true
                }
                return nil
            }
        }) {
            deliver(current.event, to: current.observers)
            current.delivered?.signal()
            if releasesNow {
                // The observers told on an event queue are read before they are let go: the rest
                // of the finish waits until they have been told did finish.
                let mailboxes = eventMailboxes()
                releaseUnlocked()
                releasesNow = false
                released = true
                run(current.then, after: mailboxes)
            } else {
                run(current.then)
            }
        }
        if releasesNow { releaseUnlocked() }
        return state
    }

    private func deliver(_ event: ProcedureEvent, to observers: ObserversToTell) {
        switch event {
        case .didAttach:
            if case .list(let attached) = observers {
                for observer in attached { observer.didAttach(to: self) }
            }
            return
        case .willExecute: procedureWillExecute()
        case .didExecute: procedureDidExecute()
        case .didCancel(let error): procedureDidCancel(with: error)
        case .willAdd(let operation): procedureWillAdd(operation)
        case .didAdd(let operation), .didProduce(let operation): procedureDidAdd(operation)
        case .willFinish(let errors): procedureWillFinish(with: errors)
        case .didFinish(let errors): procedureDidFinish(with: errors)
        }
        switch observers {
        case .none:
            break
        case .first:
            // A ``ClosureObserver`` (the usual first observer) is told without an existential.
            switch firstObserver {
            case .none: break
            case .closure(let observer): tell(observer, event)
            case .boxed(let box): tell(box.observer, event)
            }
        case .list(let list):
            for observer in list { tell(observer, event) }
        }
    }

    /// Tells one observer, if it wants this kind of event.
    private func tell<Observer: OperationObserver>(_ observer: Observer, _ event: ProcedureEvent) {
        // Each observer is told only the kinds of event it wants.
        guard observer.observedEvents.contains(event.kind) else { return }
        switch event {
        case .didAttach: observer.didAttach(to: self)
        case .willExecute: observer.willExecute(self)
        case .didExecute: observer.didExecute(self)
        case .didCancel(let error): observer.didCancel(self, with: error)
        case .willAdd(let operation): observer.procedure(self, willAdd: operation)
        case .didAdd(let operation): observer.procedure(self, didAdd: operation)
        case .didProduce(let operation):
            observer.procedure(self, didAdd: operation)
            observer.procedure(self, didProduce: operation)
        case .willFinish(let errors): observer.willFinish(self, with: errors)
        case .didFinish(let errors): observer.didFinish(self, with: errors)
        }
    }
}

/// The placeholder in a procedure's inline observer slot while it has none.
struct NoObserver: OperationObserver {}
