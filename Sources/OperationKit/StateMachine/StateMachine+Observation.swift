/// A registration made by ``StateMachine/observe(_:)``; ``cancel()`` ends it.
public final class StateObservation: Sendable {
    private let cancellation: @Sendable () -> Void

    init(_ cancellation: @escaping @Sendable () -> Void) {
        self.cancellation = cancellation
    }

    /// Stops the observer. A change already being delivered may still reach it; no later one
    /// does. Cancelling twice is harmless. Dropping the observation does not cancel it.
    public func cancel() {
        cancellation()
    }
}

extension StateMachine {
    /// Calls `observer` with every change of state — transitions, suspend, resume and reset —
    /// after the actions of the change and before its completion handler, on the thread running
    /// transitions (or the transition queue), never while a lock is held and never two at a time.
    /// - Returns: The registration; call ``StateObservation/cancel()`` to end it.
    public func observe(_ observer: @escaping @Sendable (StateTransition<State>) -> Void) -> StateObservation {
        lock.lock()
        let id = addObserverLocked(observer, onMachineRelease: nil)
        lock.unlock()
        return StateObservation { [weak self] in self?.removeObserver(id) }
    }

    /// A stream of every change of state (transitions, suspend, resume and reset), in order.
    /// Changes are buffered without limit, so none is lost to a slow consumer. The stream ends when
    /// the machine is released; the machine stops feeding it when the iterating task is cancelled
    /// or the stream and its iterator are released (keeping the stream after breaking out of a
    /// loop keeps it buffering).
    public var changes: AsyncStream<StateTransition<State>> {
        let (stream, continuation) = AsyncStream.makeStream(of: StateTransition<State>.self)
        lock.lock()
        let id = addObserverLocked({ continuation.yield($0) }, onMachineRelease: { continuation.finish() })
        lock.unlock()
        continuation.onTermination = { [weak self] _ in self?.removeObserver(id) }
        return stream
    }

    /// A stream of the machine's states: the current state first, then each new state, in order
    /// (Machinus's publisher). It ends, and stops being fed, as ``changes`` does.
    public var stateUpdates: AsyncStream<State> {
        let (stream, continuation) = AsyncStream.makeStream(of: State.self)
        lock.lock()
        // Yielding under the lock is safe: nobody iterates the stream yet, so no continuation is
        // resumed; it orders the current state before any change delivered after this point.
        continuation.yield(table.state(at: rules.current))
        let id = addObserverLocked({ change in
            // A reset that only ends a suspension in the initial state changes no state.
            if change.from != change.to { continuation.yield(change.to) }
        }, onMachineRelease: { continuation.finish() })
        lock.unlock()
        continuation.onTermination = { [weak self] _ in self?.removeObserver(id) }
        return stream
    }

    private func addObserverLocked(
        _ callback: @escaping @Sendable (StateTransition<State>) -> Void,
        onMachineRelease: (@Sendable () -> Void)?
    ) -> Int {
        nextObserverID += 1
        observers.append(ObserverEntry(id: nextObserverID, callback: callback, onMachineRelease: onMachineRelease))
        return nextObserverID
    }

    private func removeObserver(_ id: Int) {
        lock.lock()
        defer { lock.unlock() }
        observers.removeAll { $0.id == id }
    }
}
