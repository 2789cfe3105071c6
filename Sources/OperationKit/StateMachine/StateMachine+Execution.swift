import Dispatch

// The execution of requests: serialised, first in first out, never re-entrant, no user code under
// the lock. The hot path is `@inlinable` so that a client's `StateMachine<MyState>` is specialised
// for its state type (unspecialised generic code spends most of a transition looking up type
// metadata).

/// What a request asks for.
@usableFromInline
enum RequestKind<State: Hashable & Sendable>: Sendable {
    case transition(to: State)
    case dynamic
    case suspend(to: State)
    case resume
    case reset
}

/// A request waiting to run, with where its outcome goes (a completion handler, or the resumption
/// of an awaiting task, as a closure: a stored `CheckedContinuation` would give the request no
/// fixed layout).
@usableFromInline
struct Request<State: Hashable & Sendable> {
    @usableFromInline typealias Delivery = (@Sendable (Result<StateTransition<State>?, StateMachineError<State>>) -> Void)?

    @usableFromInline var kind: RequestKind<State>
    @usableFromInline var delivery: Delivery

    @inlinable
    init(kind: RequestKind<State>, delivery: Delivery) {
        self.kind = kind
        self.delivery = delivery
    }
}

/// A first-in first-out list of requests: an array and the index of its head.
@usableFromInline
struct RequestQueue<State: Hashable & Sendable> {
    @usableFromInline var elements: [Request<State>] = []
    @usableFromInline var head = 0

    @inlinable
    init() {}

    @inlinable
    var isEmpty: Bool { head == elements.count }

    @inlinable
    mutating func append(_ request: Request<State>) {
        elements.append(request)
    }

    @inlinable
    mutating func popFirst() -> Request<State>? {
        guard head < elements.count else { return nil }
        let request = elements[head]
        head += 1
        if head == elements.count {
            elements.removeAll(keepingCapacity: elements.count <= 1_024)
            head = 0
        } else if head >= 1_024 && head * 2 >= elements.count {
            elements.removeFirst(head)
            head = 0
        }
        return request
    }
}

extension StateMachine {
    /// One observer: its callback, and what to do if the machine goes away first (finish a stream).
    @usableFromInline
    struct ObserverEntry {
        @usableFromInline var id: Int
        @usableFromInline var callback: @Sendable (StateTransition<State>) -> Void
        @usableFromInline var onMachineRelease: (@Sendable () -> Void)?

        @inlinable
        init(id: Int, callback: @escaping @Sendable (StateTransition<State>) -> Void, onMachineRelease: (@Sendable () -> Void)?) {
            self.id = id
            self.callback = callback
            self.onMachineRelease = onMachineRelease
        }
    }

    // MARK: Submitting

    /// Runs `request` now if the machine is idle, otherwise queues it behind the running ones.
    @inlinable
    func submit(_ request: Request<State>) {
        lock.lock()
        if running {
            pending.append(request)
            lock.unlock()
            return
        }
        if let transitionQueue {
            running = true
            pending.append(request)
            lock.unlock()
            transitionQueue.async { self.drain(first: nil) }
            return
        }
        // Idle, and no queue: this thread runs the request. A request that runs no user code —
        // no barrier, action, observer or completion handler — is settled under the lock.
        if request.delivery == nil {
            switch rules.firstStep(for: request.kind) {
            case .ignore, .fail:
                lock.unlock()
                return
            case .perform(let plan) where observers.isEmpty && table.isQuiet(from: plan.from, to: plan.to):
                rules.commit(plan)
                lock.unlock()
                if let instrument = instrumentSlot.current { tell(instrument, plan) }
                return
            case .perform, .consultBarrier, .pickDynamicTarget:
                break
            }
        }
        running = true
        lock.unlock()
        drain(first: request)
    }

    /// Runs requests until none is left. The caller has set `running`; this thread is now the only
    /// one that changes the state.
    @inlinable
    func drain(first: Request<State>?) {
        var next = first
        if next == nil {
            lock.lock()
            next = pending.popFirst()
            if next == nil { running = false }
            lock.unlock()
        }
        while let request = next {
            let outcome = execute(request.kind)
            request.delivery?(outcome)
            lock.lock()
            next = pending.popFirst()
            if next == nil { running = false }
            lock.unlock()
        }
    }

    // MARK: Executing

    /// Preflights `kind`, consulting barriers and dynamic transitions, and performs the change.
    @inlinable
    func execute(_ kind: RequestKind<State>) -> Outcome {
        // Reading `rules` without the lock is safe here: only the running thread changes it.
        var step = rules.firstStep(for: kind)
        while true {
            switch step {
            case .ignore:
                return .success(nil)
            case .fail(let error):
                return .failure(error)
            case .pickDynamicTarget:
                let current = rules.current
                guard let pick = table.definitions[current].dynamicTransition else {
                    preconditionFailure("Internal inconsistency: no dynamic transition in state \(table.state(at: current))")
                }
                step = rules.preflight(to: pick())
            case .consultBarrier(let target):
                guard let barrier = table.definitions[target].barrier else {
                    preconditionFailure("Internal inconsistency: no barrier on state \(table.state(at: target))")
                }
                step = rules.barrierAnswered(barrier(table.state(at: rules.current)), target: target)
            case .perform(let plan):
                perform(plan)
                return .success(change(plan))
            }
        }
    }

    /// Runs the actions of `plan` around the state change, then the observers.
    @inlinable
    func perform(_ plan: TransitionRules<State>.Plan) {
        let from = table.state(at: plan.from)
        let to = table.state(at: plan.to)
        if table.isQuiet(from: plan.from, to: plan.to) {
            let observers = commit(plan)
            if let instrument = instrumentSlot.current { tell(instrument, plan) }
            if !observers.isEmpty { notify(observers, of: plan) }
            return
        }
        let leaving = table.definitions[plan.from]
        let entering = table.definitions[plan.to]
        let observers: [ObserverEntry]
        switch plan.cause {
        case .transition:
            table.beforeTransition?(from, to)
            for action in leaving.beforeLeavingActions { action(to) }
            for action in entering.beforeEnteringActions { action(from) }
            observers = commit(plan)
            for action in leaving.afterLeavingActions { action(to) }
            for action in entering.afterEnteringActions { action(from) }
            table.afterTransition?(from, to)
        case .suspend:
            for action in entering.beforeEnteringActions { action(from) }
            observers = commit(plan)
            for action in entering.afterEnteringActions { action(from) }
        case .resume:
            for action in leaving.beforeLeavingActions { action(to) }
            observers = commit(plan)
            for action in leaving.afterLeavingActions { action(to) }
        case .reset:
            observers = commit(plan)
        }
        if let instrument = instrumentSlot.current { tell(instrument, plan) }
        if !observers.isEmpty { notify(observers, of: plan) }
    }

    /// Tells `instrument` the transition of `plan` (made), with the states as text.
    @usableFromInline
    func tell(_ instrument: any OperationInstrument, _ plan: TransitionRules<State>.Plan) {
        instrument.record(StateMachineEvent(
            machineName: name, from: String(describing: table.state(at: plan.from)),
            to: String(describing: table.state(at: plan.to))))
    }

    @inlinable
    func notify(_ observers: [ObserverEntry], of plan: TransitionRules<State>.Plan) {
        let transition = change(plan)
        for observer in observers { observer.callback(transition) }
    }

    /// Changes the state and returns the observers to tell.
    @inlinable
    func commit(_ plan: TransitionRules<State>.Plan) -> [ObserverEntry] {
        lock.lock()
        defer { lock.unlock() }
        rules.commit(plan)
        return observers
    }

    @inlinable
    func change(_ plan: TransitionRules<State>.Plan) -> StateTransition<State> {
        StateTransition(from: table.state(at: plan.from), to: table.state(at: plan.to), cause: plan.cause)
    }
}

extension TransitionRules {
    /// The first step of a request.
    @inlinable
    func firstStep(for kind: RequestKind<State>) -> Step {
        switch kind {
        case .transition(let target):
            return preflight(to: target)
        case .dynamic:
            return preflightDynamic()
        case .suspend(let state):
            return preflightSuspend(to: state)
        case .resume:
            return preflightResume()
        case .reset:
            return preflightReset()
        }
    }
}
