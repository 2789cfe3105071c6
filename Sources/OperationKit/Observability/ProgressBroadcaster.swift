// ProgressBroadcaster: the latest progress value of a queue, group or workflow, and its
// subscribers (streams and handlers), each coalesced by its own ProgressCoalescer.

import Dispatch

/// Holds the current ``OperationProgress`` of one queue (group) or workflow and hands its
/// changes to subscribers: ``AsyncStream``s and handlers, each with its own
/// ``ProgressUpdatePolicy``.
///
/// Locking: `lock` is taken after the lock of the queue or workflow that owns it, never before;
/// under it nothing but the reported-progress side table's lock (a leaf) is taken, no user code
/// runs, and no stream is ended. Streams are yielded to under it (`yield` runs no user code), so
/// each stream gets the values in the order they were made. Handlers are called without it, one
/// call at a time per handler, in order: the thread whose change finds the handler idle delivers
/// its pending values (its mailbox) until none is left; other threads only add to the mailbox.
final class ProgressBroadcaster {
    typealias Continuation = AsyncStream<OperationProgress>.Continuation

    /// A subscriber; its fields are protected by the broadcaster's lock.
    final class Subscriber {
        enum Kind {
            case stream(Continuation)
            case handler(@Sendable (OperationProgress) -> Void)
        }

        let id: Int
        let kind: Kind
        var coalescer: ProgressCoalescer
        /// Values waiting for the handler; one at most when coalesced.
        var mailbox: [OperationProgress] = []
        /// A thread is calling the handler with the mailbox's values.
        var draining = false
        var cancelled = false

        init(id: Int, kind: Kind, interval: Duration?) {
            self.id = id
            self.kind = kind
            coalescer = ProgressCoalescer(interval: interval)
        }
    }

    /// What to do once the lock is released.
    struct Effects {
        var drains: [Subscriber] = []
        var timers: [(id: Int, at: ContinuousClock.Instant)] = []
        var ended: [Continuation] = []
    }

    let lock = Lock()
    // protected by lock
    private(set) var current: OperationProgress
    private var version: UInt64 = 1
    /// The owner's version of the value last published with `publish(_:sourceVersion:)`.
    private var publishedSourceVersion: UInt64 = 0
    private var subscribers: [Subscriber] = []
    private var nextID = 0
    /// No subscriber is taken any more (the group finished): streams made now end at once.
    private var closed = false

    init(initial: OperationProgress = .empty) {
        current = initial
    }

    deinit {
        // The owner is gone: its streams end. (`onTermination` finds no broadcaster.)
        for subscriber in subscribers {
            if case .stream(let continuation) = subscriber.kind { continuation.finish() }
        }
    }

    // MARK: Changes

    /// Under `lock`: the value is now `value`. Sends it to the subscribers as their policies say.
    func publishLocked(_ value: OperationProgress, into effects: inout Effects) {
        guard value != current else { return }
        current = value
        version += 1
        guard !subscribers.isEmpty else { return }
        let now = ContinuousClock.now
        for subscriber in subscribers {
            let action = subscriber.coalescer.changed(version: version, isFinal: value.isFinished, now: now)
            perform(action, for: subscriber, into: &effects)
        }
    }

    /// Publishes `value`, computed by its owner as its `sourceVersion`-th value (under the
    /// owner's lock, then published without it): a value older than one published already is
    /// dropped, so that values computed on two threads are never published out of order.
    func publish(_ value: OperationProgress, sourceVersion: UInt64) {
        var effects = Effects()
        lock.withLock {
            guard sourceVersion > publishedSourceVersion else { return }
            publishedSourceVersion = sourceVersion
            publishLocked(value, into: &effects)
        }
        perform(effects)
    }

    /// Under `lock`: carries out a coalescer's action for `subscriber`.
    private func perform(_ action: ProgressCoalescer.Action, for subscriber: Subscriber, into effects: inout Effects) {
        switch action {
        case .nothing:
            break
        case .schedule(let instant):
            effects.timers.append((subscriber.id, instant))
        case .send:
            switch subscriber.kind {
            case .stream(let continuation):
                continuation.yield(current)
            case .handler:
                if subscriber.coalescer.interval == nil {
                    subscriber.mailbox.append(current)
                } else {
                    subscriber.mailbox = [current]
                }
                if !subscriber.draining {
                    subscriber.draining = true
                    effects.drains.append(subscriber)
                }
            }
        }
    }

    /// Without the lock: arms timers, ends streams, and calls handlers.
    func perform(_ effects: Effects) {
        for continuation in effects.ended { continuation.finish() }
        if !effects.timers.isEmpty {
            let now = ContinuousClock.now
            for (id, instant) in effects.timers {
                let delay = max(.zero, instant - now)
                DispatchQueue.global().asyncAfter(deadline: .now() + delay.dispatchInterval) { [weak self] in
                    self?.timerFired(for: id)
                }
            }
        }
        for subscriber in effects.drains { drain(subscriber) }
    }

    private func timerFired(for id: Int) {
        var effects = Effects()
        lock.withLock {
            guard let subscriber = subscribers.first(where: { $0.id == id }) else { return }
            let action = subscriber.coalescer.timerFired(version: version, now: .now)
            perform(action, for: subscriber, into: &effects)
        }
        perform(effects)
    }

    /// Calls the handler with its mailbox's values until the mailbox is empty.
    private func drain(_ subscriber: Subscriber) {
        guard case .handler(let handler) = subscriber.kind else { return }
        while true {
            let batch = lock.withLock { () -> [OperationProgress] in
                if subscriber.cancelled || subscriber.mailbox.isEmpty {
                    subscriber.draining = false
                    subscriber.mailbox = []
                    return []
                }
                defer { subscriber.mailbox = [] }
                return subscriber.mailbox
            }
            if batch.isEmpty { return }
            for value in batch { handler(value) }
        }
    }

    // MARK: Subscribing

    /// A stream of the values, starting with the current one.
    func stream(_ policy: ProgressUpdatePolicy) -> AsyncStream<OperationProgress> {
        // Coalesced: a slow consumer gets the latest value, never a backlog (the final one is
        // the newest, so it is never dropped). Every change: every value.
        let buffering: Continuation.BufferingPolicy = policy.interval == nil ? .unbounded : .bufferingNewest(1)
        let (stream, continuation) = AsyncStream.makeStream(of: OperationProgress.self, bufferingPolicy: buffering)
        let id = subscribe(.stream(continuation), policy: policy)
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return stream
    }

    /// Calls `handler` with the current value, then with changes, as `policy` says.
    func observe(
        _ policy: ProgressUpdatePolicy, _ handler: @escaping @Sendable (OperationProgress) -> Void
    ) -> ProgressObservation {
        let id = subscribe(.handler(handler), policy: policy)
        return ProgressObservation { [weak self] in self?.unsubscribe(id) }
    }

    private func subscribe(_ kind: Subscriber.Kind, policy: ProgressUpdatePolicy) -> Int {
        var effects = Effects()
        let id = lock.withLock { () -> Int in
            nextID += 1
            let subscriber = Subscriber(id: nextID, kind: kind, interval: policy.interval)
            let action = subscriber.coalescer.subscribed(version: version, now: .now)
            perform(action, for: subscriber, into: &effects)
            if closed {
                // It had the last value (a handler gets it from the drain below): nothing follows.
                if case .stream(let continuation) = kind { effects.ended.append(continuation) }
            } else {
                subscribers.append(subscriber)
            }
            return nextID
        }
        perform(effects)
        return id
    }

    private func unsubscribe(_ id: Int) {
        let removed = lock.withLock { () -> Subscriber? in
            guard let index = subscribers.firstIndex(where: { $0.id == id }) else { return nil }
            let subscriber = subscribers.remove(at: index)
            subscriber.cancelled = true
            return subscriber
        }
        // Ended without the lock (its `onTermination` comes back here, and finds nothing).
        if let removed, case .stream(let continuation) = removed.kind { continuation.finish() }
    }

    /// Publishes `final` and ends every stream; handlers get `final` and stop. Later
    /// subscribers get the last value and end at once.
    func close(with final: OperationProgress) {
        var effects = Effects()
        lock.withLock {
            publishLocked(final, into: &effects)
            closed = true
            for subscriber in subscribers {
                if case .stream(let continuation) = subscriber.kind { effects.ended.append(continuation) }
            }
            // Handlers still get what their mailboxes hold (the final value is there by now).
            subscribers.removeAll()
        }
        perform(effects)
    }

    /// The number of subscribers (for tests).
    var subscriberCount: Int { lock.withLock { subscribers.count } }
}

// Mutable state (and every Subscriber's) is protected by `lock`.
extension ProgressBroadcaster: @unchecked Sendable {}
extension ProgressBroadcaster.Subscriber: @unchecked Sendable {}
