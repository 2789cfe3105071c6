import Synchronization

/// Told about operations entering and leaving a ``ConcurrentOperationQueue``: every operation
/// added to the queue, including the dependencies a procedure's conditions produce and the
/// operations procedures produce.
///
/// Calls run on the thread doing the work — the adding thread for will-add and did-add, the
/// finishing thread for will-finish and did-finish — never while an OperationKit lock is held.
/// Calls for different operations may come at the same time from different threads. For one
/// operation they come in this order: will add, did add (before the operation can start), will
/// finish (procedures only), did finish. Every method has an empty default implementation.
public protocol ConcurrentOperationQueueDelegate: AnyObject, Sendable {
    /// `operation` is about to be added. It may still be refused (the call to `addOperation`
    /// then throws, and no other call follows).
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation being added.
    func operationQueue(_ queue: ConcurrentOperationQueue, willAdd operation: ConcurrentOperation)
    /// `operation` was added. Told before it can start, so before its will-finish and
    /// did-finish; a ``ProcedureOperation`` is already ``ProcedureState/pending``.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation added.
    func operationQueue(_ queue: ConcurrentOperationQueue, didAdd operation: ConcurrentOperation)
    /// `operation`, a ``ProcedureOperation``, is finishing: it is ``ProcedureState/finishing``,
    /// and its will-finish hook and observers come next. A plain ``ConcurrentOperation`` has no
    /// finishing state, so for it only did-finish is told.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The procedure finishing.
    func operationQueue(_ queue: ConcurrentOperationQueue, willFinish operation: ConcurrentOperation)
    /// `operation` finished: after its completion block; before its dependents and waiters are
    /// released and before the queue lets it go (and, for a ``ProcedureOperation``, before its
    /// did-finish hook and observers).
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation that finished.
    func operationQueue(_ queue: ConcurrentOperationQueue, didFinish operation: ConcurrentOperation)
}

extension ConcurrentOperationQueueDelegate {
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation being added.
    public func operationQueue(_ queue: ConcurrentOperationQueue, willAdd operation: ConcurrentOperation) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation added.
    public func operationQueue(_ queue: ConcurrentOperationQueue, didAdd operation: ConcurrentOperation) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The procedure finishing.
    public func operationQueue(_ queue: ConcurrentOperationQueue, willFinish operation: ConcurrentOperation) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation that finished.
    public func operationQueue(_ queue: ConcurrentOperationQueue, didFinish operation: ConcurrentOperation) {}
}

/// The same events as ``ConcurrentOperationQueueDelegate``, as closures, told on the same threads
/// and in the same order, each just before the delegate's method. The queue holds them strongly:
/// capture the queue weakly.
///
/// ```swift
/// queue.eventHandlers = QueueEventHandlers(didFinish: { operation in
///     log("\(operation.displayName) finished")
/// })
/// ```
public struct QueueEventHandlers: Sendable {
    /// Called with an operation about to be added (it may still be refused).
    public var willAdd: (@Sendable (ConcurrentOperation) -> Void)?
    /// Called with an operation that was added, before it can start.
    public var didAdd: (@Sendable (ConcurrentOperation) -> Void)?
    /// Called with a ``ProcedureOperation`` that is finishing, before its will-finish observers.
    public var willFinish: (@Sendable (ConcurrentOperation) -> Void)?
    /// Called with an operation that finished, after its completion block.
    public var didFinish: (@Sendable (ConcurrentOperation) -> Void)?

    /// Creates handlers from the closures given; leave out the ones you do not need.
    ///
    /// - Parameters:
    ///   - willAdd: See ``ConcurrentOperationQueueDelegate/operationQueue(_:willAdd:)``.
    ///   - didAdd: See ``ConcurrentOperationQueueDelegate/operationQueue(_:didAdd:)``.
    ///   - willFinish: See ``ConcurrentOperationQueueDelegate/operationQueue(_:willFinish:)``.
    ///   - didFinish: See ``ConcurrentOperationQueueDelegate/operationQueue(_:didFinish:)``.
    public init(
        willAdd: (@Sendable (ConcurrentOperation) -> Void)? = nil,
        didAdd: (@Sendable (ConcurrentOperation) -> Void)? = nil,
        willFinish: (@Sendable (ConcurrentOperation) -> Void)? = nil,
        didFinish: (@Sendable (ConcurrentOperation) -> Void)? = nil
    ) {
        self.willAdd = willAdd
        self.didAdd = didAdd
        self.willFinish = willFinish
        self.didFinish = didFinish
    }
}

extension ConcurrentOperationQueue {
    /// The queue's delegate, held weakly; `nil` by default. Its methods are called after the
    /// ``eventHandlers`` of the same event.
    public var delegate: (any ConcurrentOperationQueueDelegate)? {
        get { lock.withLock { _delegate } }
        set {
            lock.withLock {
                _delegate = newValue
                updateHasListenersLocked()
            }
        }
    }

    /// Closures told about the queue's operations, held strongly; `nil` by default. Setting it
    /// replaces the previous handlers.
    public var eventHandlers: QueueEventHandlers? {
        get { lock.withLock { _eventHandlers } }
        set {
            lock.withLock {
                _eventHandlers = newValue
                updateHasListenersLocked()
            }
        }
    }

    /// Under `lock`: sets `hasListeners` from the delegate, the handlers, the event streams and
    /// the progress tracker.
    func updateHasListenersLocked() {
        let streams = !(_eventStreams?.continuations.isEmpty ?? true)
        let listened = _delegate != nil || _eventHandlers != nil || streams || _progressTracker != nil
        hasListeners.store(listened, ordering: .releasing)
    }

    private enum QueueEvent {
        case willAdd, didAdd, willFinish, didFinish
    }

    /// (Out of line: the callers check `hasListeners` inline, so that a queue nobody listens to
    /// pays one atomic load per event and no call.)
    @inline(never)
    private func notify(_ event: QueueEvent, _ operation: ConcurrentOperation) {
        let (delegate, handlers, streams, progress) = lock.withLock {
            (_delegate, _eventHandlers, _eventStreams?.continuations, _progressTracker)
        }
        if let streams { yield(event: event, operation, to: streams) }
        switch event {
        case .willAdd:
            handlers?.willAdd?(operation)
            delegate?.operationQueue(self, willAdd: operation)
        case .didAdd:
            progress?.operationAdded(operation)
            handlers?.didAdd?(operation)
            delegate?.operationQueue(self, didAdd: operation)
        case .willFinish:
            handlers?.willFinish?(operation)
            delegate?.operationQueue(self, willFinish: operation)
        case .didFinish:
            progress?.operationFinished(operation)
            handlers?.didFinish?(operation)
            delegate?.operationQueue(self, didFinish: operation)
        }
    }

    private func yield(event: QueueEvent, _ operation: ConcurrentOperation, to streams: QueueEventStreams.List) {
        let element: Event
        switch event {
        case .willAdd: element = .willAdd(operation)
        case .didAdd: element = .didAdd(operation)
        case .willFinish: element = .willFinish(operation)
        case .didFinish: element = .didFinish(operation)
        }
        for stream in streams { stream.continuation.yield(element) }
    }

    @inline(__always)
    func notifyDelegate(willAdd operation: ConcurrentOperation) {
        if hasListeners.load(ordering: .acquiring) { notify(.willAdd, operation) }
    }
    @inline(__always)
    func notifyDelegate(didAdd operation: ConcurrentOperation) {
        if hasListeners.load(ordering: .acquiring) { notify(.didAdd, operation) }
    }
    @inline(__always)
    func notifyDelegate(willFinish operation: ConcurrentOperation) {
        if hasListeners.load(ordering: .acquiring) { notify(.willFinish, operation) }
    }
    @inline(__always)
    func notifyDelegate(didFinish operation: ConcurrentOperation) {
        if hasListeners.load(ordering: .acquiring) { notify(.didFinish, operation) }
    }
}
