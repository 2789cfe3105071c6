import Synchronization

/// Told about operations entering and leaving a ``ConcurrentOperationQueue``. Every method has an
/// empty default implementation. Calls run on the thread doing the work (the adding thread, the
/// finishing thread), never while a lock is held.
public protocol ConcurrentOperationQueueDelegate: AnyObject, Sendable {
    /// `operation` is about to be added (it may still be refused).
    func operationQueue(_ queue: ConcurrentOperationQueue, willAdd operation: ConcurrentOperation)
    /// `operation` was added.
    func operationQueue(_ queue: ConcurrentOperationQueue, didAdd operation: ConcurrentOperation)
    /// `operation`, a ``ProcedureOperation``, is finishing: before its will-finish observers.
    /// (A plain ``ConcurrentOperation`` has no finishing state, so only did-finish is told.)
    func operationQueue(_ queue: ConcurrentOperationQueue, willFinish operation: ConcurrentOperation)
    /// `operation` finished: after its completion block, before the queue releases it.
    func operationQueue(_ queue: ConcurrentOperationQueue, didFinish operation: ConcurrentOperation)
}

extension ConcurrentOperationQueueDelegate {
    public func operationQueue(_ queue: ConcurrentOperationQueue, willAdd operation: ConcurrentOperation) {}
    public func operationQueue(_ queue: ConcurrentOperationQueue, didAdd operation: ConcurrentOperation) {}
    public func operationQueue(_ queue: ConcurrentOperationQueue, willFinish operation: ConcurrentOperation) {}
    public func operationQueue(_ queue: ConcurrentOperationQueue, didFinish operation: ConcurrentOperation) {}
}

/// The same events as ``ConcurrentOperationQueueDelegate``, as closures (held strongly by the
/// queue; capture the queue weakly).
public struct QueueEventHandlers: Sendable {
    public var willAdd: (@Sendable (ConcurrentOperation) -> Void)?
    public var didAdd: (@Sendable (ConcurrentOperation) -> Void)?
    public var willFinish: (@Sendable (ConcurrentOperation) -> Void)?
    public var didFinish: (@Sendable (ConcurrentOperation) -> Void)?

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
    /// The queue's delegate, held weakly.
    public var delegate: (any ConcurrentOperationQueueDelegate)? {
        get { lock.withLock { _delegate } }
        set {
            lock.withLock {
                _delegate = newValue
                hasListeners.store(newValue != nil || _eventHandlers != nil, ordering: .releasing)
            }
        }
    }

    /// Closures told about the queue's operations; `nil` by default.
    public var eventHandlers: QueueEventHandlers? {
        get { lock.withLock { _eventHandlers } }
        set {
            lock.withLock {
                _eventHandlers = newValue
                hasListeners.store(newValue != nil || _delegate != nil, ordering: .releasing)
            }
        }
    }

    private enum QueueEvent {
        case willAdd, didAdd, willFinish, didFinish
    }

    private func notify(_ event: QueueEvent, _ operation: ConcurrentOperation) {
        guard hasListeners.load(ordering: .acquiring) else { return }
        let (delegate, handlers) = lock.withLock { (_delegate, _eventHandlers) }
        switch event {
        case .willAdd:
            handlers?.willAdd?(operation)
            delegate?.operationQueue(self, willAdd: operation)
        case .didAdd:
            handlers?.didAdd?(operation)
            delegate?.operationQueue(self, didAdd: operation)
        case .willFinish:
            handlers?.willFinish?(operation)
            delegate?.operationQueue(self, willFinish: operation)
        case .didFinish:
            handlers?.didFinish?(operation)
            delegate?.operationQueue(self, didFinish: operation)
        }
    }

    func notifyDelegate(willAdd operation: ConcurrentOperation) { notify(.willAdd, operation) }
    func notifyDelegate(didAdd operation: ConcurrentOperation) { notify(.didAdd, operation) }
    func notifyDelegate(willFinish operation: ConcurrentOperation) { notify(.willFinish, operation) }
    func notifyDelegate(didFinish operation: ConcurrentOperation) { notify(.didFinish, operation) }
}
