extension ConcurrentOperationQueue {
    /// An event of a queue, as ``events`` yields it: the events of
    /// ``ConcurrentOperationQueueDelegate``.
    public enum Event: Sendable, CustomStringConvertible {
        /// The operation is about to be added (it may still be refused).
        case willAdd(ConcurrentOperation)
        /// The operation was added; it has not started.
        case didAdd(ConcurrentOperation)
        /// The operation, a ``ProcedureOperation``, is finishing.
        case willFinish(ConcurrentOperation)
        /// The operation finished (after its completion block).
        case didFinish(ConcurrentOperation)

        /// The operation the event is about.
        public var operation: ConcurrentOperation {
            switch self {
            case .willAdd(let operation), .didAdd(let operation), .willFinish(let operation),
                .didFinish(let operation):
                operation
            }
        }

        /// The event's name and the operation's name, for example `didFinish(fetch)`.
        public var description: String {
            switch self {
            case .willAdd(let operation): "willAdd(\(operation.displayName))"
            case .didAdd(let operation): "didAdd(\(operation.displayName))"
            case .willFinish(let operation): "willFinish(\(operation.displayName))"
            case .didFinish(let operation): "didFinish(\(operation.displayName))"
            }
        }
    }

    /// A new stream of the queue's events, from now on; each read makes another stream, and
    /// every stream gets every event. Events are buffered without limit.
    ///
    /// ```swift
    /// for await event in queue.events {
    ///     if case .didFinish(let operation) = event { log("\(operation) finished") }
    /// }
    /// ```
    ///
    /// The events are those of ``ConcurrentOperationQueueDelegate``, yielded on the thread where
    /// they happen, before the ``eventHandlers`` and the delegate are told, in the same order
    /// for one operation; events of operations on different threads may interleave.
    ///
    /// The stream does not keep the queue alive: it ends when the queue is released (a queue
    /// keeps itself alive while it holds operations, so after its last operation has finished
    /// and the last outside reference is gone). Stopping the iteration ends it too. The streams
    /// do not take the place of ``delegate`` or ``eventHandlers``, which stay yours.
    public var events: AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self)
        let id = lock.withLock { () -> Int in
            let streams = _eventStreams ?? QueueEventStreams()
            _eventStreams = streams
            let id = streams.add(continuation)
            updateHasListenersLocked()
            return id
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            lock.withLock {
                _eventStreams?.remove(id)
                updateHasListenersLocked()
            }
        }
        return stream
    }
}

/// The continuations of a queue's ``ConcurrentOperationQueue/events`` streams. Owned by the queue
/// alone: it is released with the queue, and its deinit finishes the streams.
final class QueueEventStreams {
    typealias List = [(id: Int, continuation: AsyncStream<ConcurrentOperationQueue.Event>.Continuation)]

    // protected by the queue's lock (and touched by deinit alone once the queue is gone)
    /// An array, not a dictionary: an event copies it (one retain), never allocates.
    private(set) var continuations: List = []
    private var nextID = 0

    func add(_ continuation: AsyncStream<ConcurrentOperationQueue.Event>.Continuation) -> Int {
        nextID += 1
        continuations.append((nextID, continuation))
        return nextID
    }

    func remove(_ id: Int) {
        continuations.removeAll { $0.id == id }
    }

    deinit {
        // The queue is gone: its streams end. (`onTermination` finds no queue and does nothing.)
        for stream in continuations { stream.continuation.finish() }
    }
}

// Protected by the lock of the queue that owns it (see the field comments).
extension QueueEventStreams: @unchecked Sendable {}
