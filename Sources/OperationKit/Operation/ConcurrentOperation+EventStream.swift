import Synchronization

extension ConcurrentOperation {
    /// An event of an operation's lifecycle, as ``lifecycleEvents`` yields it. The events come
    /// in this order, each at most once: ``started`` (not for an operation cancelled before it
    /// started, which never executes), ``cancelled`` (only if ``cancel()`` was called before the
    /// operation finished), ``finished`` (always last).
    public enum LifecycleEvent: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// The operation started executing (``execute()`` is about to run).
        case started
        /// ``cancel()`` set ``isCancelled``: before the operation started (it then never starts)
        /// or while it executed.
        case cancelled
        /// The operation finished and its completion block has run: the last event.
        case finished

        /// The event's name, for example `cancelled`.
        public var description: String {
            switch self {
            case .started: "started"
            case .cancelled: "cancelled"
            case .finished: "finished"
            }
        }

        /// The event's bit in a set of events (see `LifecycleEventStreams`).
        var bit: UInt8 { 1 << UInt8(rawValue) }
    }

    /// A new stream of the operation's lifecycle events — ``LifecycleEvent/started``,
    /// ``LifecycleEvent/cancelled``, ``LifecycleEvent/finished`` — that ends after
    /// ``LifecycleEvent/finished``. Each read makes another stream; every stream of an operation
    /// yields the same events, in lifecycle order. Available on every operation, procedures
    /// included (a ``ProcedureOperation`` also has its richer ``ProcedureOperation/events``).
    ///
    /// ```swift
    /// let events = operation.lifecycleEvents
    /// try queue.addOperation(operation)
    /// for await event in events { print(event) }   // started, finished
    /// ```
    ///
    /// Whenever the stream is made, it yields the whole lifecycle: what has already happened at
    /// once, then the rest as it happens. Made after the operation finished, it yields its
    /// lifecycle (for example `cancelled`, `finished`) at once and ends; made while it executes,
    /// it yields `started` at once. So an operation's state can be followed without a race
    /// between reading the state and making the stream.
    ///
    /// The events are yielded on the thread where they happen, right after the step (`started`
    /// before ``execute()`` runs; `finished` after the completion block, before waiters and
    /// dependents are released), with no lock of the operation held; events are buffered without
    /// limit. Stopping the iteration removes the stream.
    ///
    /// The stream does not keep the operation alive. An operation released without having
    /// finished (it was never run) ends its streams without ``LifecycleEvent/finished``.
    ///
    /// An operation nobody listens to pays nothing for this: no stored property, and a flag test
    /// in its start, cancel and finish steps.
    public var lifecycleEvents: AsyncStream<LifecycleEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: LifecycleEvent.self)
        if !hasFinished && LifecycleEventStreams.add(continuation, for: self) {
            // Catch up with what has already happened (idempotent if a step delivered it).
            LifecycleEventStreams.deliver(for: self)
        } else {
            // Finished: the whole lifecycle at once; nothing is registered.
            let happened = lifecycleEventsSoFar()
            for event in LifecycleEvent.allCases where happened & event.bit != 0 { continuation.yield(event) }
            continuation.finish()
        }
        return stream
    }

    /// The lifecycle events that have happened, as a set of ``LifecycleEvent/bit``s. A snapshot
    /// of one moment: `finished` is read first, so with it the rest is final.
    func lifecycleEventsSoFar() -> UInt8 {
        let finished = lifeFlags.load(ordering: .acquiring) & LifeFlags.finished != 0
        return lock.withLock {
            var happened: UInt8 = finished ? LifecycleEvent.finished.bit : 0
            // Started and not merely passed through the start step to finish without executing
            // (that step sets `skippedExecution` under this lock).
            if !lifecycle.isReady && lifeFlags.load(ordering: .relaxed) & LifeFlags.skippedExecution == 0 {
                happened |= LifecycleEvent.started.bit
            }
            if lifecycle.isCancelled { happened |= LifecycleEvent.cancelled.bit }
            return happened
        }
    }

    /// Without any lock, after a start, cancel or finish step: tells the operation's event
    /// streams, if it may have any. One relaxed load when it has none.
    @inline(__always)
    final func tellLifecycleEventStreams() {
        if lifeFlags.load(ordering: .relaxed) & LifeFlags.hasEventStreams != 0 {
            LifecycleEventStreams.deliver(for: self)
        }
    }
}

/// The process-wide side table of ``ConcurrentOperation/lifecycleEvents`` streams, so that an
/// operation has no field for them: the continuations of each operation that has streams, by
/// its identity. An operation with an entry has `LifeFlags.hasEventStreams` set; its steps look
/// here only then. (The flag is cleared when the finish is delivered; after the last stream of an
/// unfinished operation stops, it stays set and the steps find no entry.)
///
/// Delivery is by state, not by message: a step (or a new stream) reads the set of events that
/// have happened (`lifecycleEventsSoFar()`, a snapshot under the operation's lock), then, under
/// this table's lock, yields to each stream those it has not had yet, in lifecycle order. The
/// set only grows, and its events happen in lifecycle order, so however the steps' deliveries
/// interleave, each stream gets each event once, in order. A snapshot with `finished` is
/// complete: its delivery ends the streams and removes the entry.
///
/// Locking: `lock` is a leaf. Under it nothing takes another lock, no operation is released and
/// no stream is ended (`AsyncStream.yield` runs no user code and never calls `onTermination`;
/// `finish()` does, and `onTermination` takes this lock, so streams end after it is released).
/// So an operation's `deinit` may take it, from whatever locks its releaser holds.
enum LifecycleEventStreams {
    typealias Continuation = AsyncStream<ConcurrentOperation.LifecycleEvent>.Continuation

    struct Stream {
        let token: UInt64
        let continuation: Continuation
        /// The events this stream has had, as `LifecycleEvent.bit`s.
        var delivered: UInt8 = 0
    }

    private static let lock = Lock()
    // protected by lock. The key's operation is alive: its deinit removes its entry.
    nonisolated(unsafe) private static var entries: [ObjectIdentifier: [Stream]] = [:]
    /// Tokens are never reused, so an `onTermination` that runs late (after its operation was
    /// released and another object took its address) removes nothing else.
    private static let lastToken = Atomic<UInt64>(0)

    /// Registers `continuation` for `operation`, unless the operation has announced its finish
    /// (then returns `false`; the caller replays the lifecycle itself).
    static func add(_ continuation: Continuation, for operation: ConcurrentOperation) -> Bool {
        let token = lastToken.wrappingAdd(1, ordering: .relaxed).newValue
        let id = ObjectIdentifier(operation)
        // Set before the stream can be ended (by the consumer, or by a finish delivered from now on).
        continuation.onTermination = { _ in remove(token, of: id) }
        return lock.withLock {
            // Set the flag, then look for the finish: either the finish sees the flag (and
            // delivers under this lock, after this insertion) or this sees the finish.
            let previous = operation.lifeFlags.bitwiseOr(LifeFlags.hasEventStreams, ordering: .acquiringAndReleasing).oldValue
            guard previous & LifeFlags.finished == 0 else { return false }
            entries[id, default: []].append(Stream(token: token, continuation: continuation))
            return true
        }
    }

    /// Yields to `operation`'s streams the events that have happened and they have not had;
    /// after `finished`, ends them and removes the entry.
    @inline(never)
    static func deliver(for operation: ConcurrentOperation) {
        let happened = operation.lifecycleEventsSoFar()
        let id = ObjectIdentifier(operation)
        let ended = lock.withLock { () -> [Stream] in
            guard let index = entries.index(forKey: id) else { return [] }
            for position in entries.values[index].indices {
                let missing = happened & ~entries.values[index][position].delivered
                guard missing != 0 else { continue }
                let continuation = entries.values[index][position].continuation
                for event in ConcurrentOperation.LifecycleEvent.allCases where missing & event.bit != 0 {
                    continuation.yield(event)
                }
                entries.values[index][position].delivered |= missing
            }
            guard happened & ConcurrentOperation.LifecycleEvent.finished.bit != 0 else { return [] }
            // Every stream has had everything. (A stream made from now on sees the finish.)
            operation.lifeFlags.bitwiseAnd(~LifeFlags.hasEventStreams, ordering: .relaxed)
            return entries.remove(at: index).value
        }
        for stream in ended { stream.continuation.finish() }
    }

    /// A stream ended (`onTermination`): forgets it.
    private static func remove(_ token: UInt64, of id: ObjectIdentifier) {
        let removed = lock.withLock { () -> Stream? in
            guard let index = entries.index(forKey: id),
                let position = entries.values[index].firstIndex(where: { $0.token == token })
            else { return nil }
            let removed = entries.values[index].remove(at: position)
            if entries.values[index].isEmpty { entries.remove(at: index) }
            return removed
        }
        withExtendedLifetime(removed) {}  // released without the lock
    }

    /// From the deinit of an operation that had streams and did not finish: ends them (without
    /// `finished`) and removes its entry.
    @inline(never)
    static func operationWillDeallocate(_ id: ObjectIdentifier) {
        let ended = lock.withLock { entries.removeValue(forKey: id) ?? [] }
        for stream in ended { stream.continuation.finish() }
    }

    /// The number of streams registered for the operation with this identity (for tests).
    static func streamCount(for id: ObjectIdentifier) -> Int {
        lock.withLock { entries[id]?.count ?? 0 }
    }

    /// Whether the table has an entry for the operation with this identity (for tests).
    static func hasEntry(for id: ObjectIdentifier) -> Bool {
        lock.withLock { entries[id] != nil }
    }
}
