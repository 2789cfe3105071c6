/// What a request asks for.
enum RequestKind<State: Hashable & Sendable>: Sendable {
    case transition(to: State)
    case dynamic
    case suspend(to: State)
    case resume
    case reset
}

/// A request waiting to run, with where its outcome goes.
struct Request<State: Hashable & Sendable> {
    var kind: RequestKind<State>
    var delivery: StateMachine<State>.Delivery
}

/// A first-in first-out list of requests: an array and the index of its head.
struct RequestQueue<State: Hashable & Sendable> {
    private var elements: [Request<State>] = []
    private var head = 0

    var isEmpty: Bool { head == elements.count }

    mutating func append(_ request: Request<State>) {
        elements.append(request)
    }

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
    /// Where a request's outcome goes.
    enum Delivery {
        case none
        case callback(@Sendable (Outcome) -> Void)
        case continuation(CheckedContinuation<Outcome, Never>)

        init(_ callback: (@Sendable (Outcome) -> Void)?) {
            self = callback.map(Delivery.callback) ?? .none
        }

        /// A delivery for requests that cannot fail (resume, reset).
        init(ignoringErrors callback: (@Sendable (StateTransition<State>?) -> Void)?) {
            guard let callback else {
                self = .none
                return
            }
            self = .callback { outcome in callback(try? outcome.get()) }
        }

        /// Whether delivering runs user code (whose order relative to other transitions matters).
        var runsUserCode: Bool {
            if case .callback = self { return true }
            return false
        }

        func deliver(_ outcome: Outcome) {
            switch self {
            case .none:
                break
            case .callback(let callback):
                callback(outcome)
            case .continuation(let continuation):
                continuation.resume(returning: outcome)
            }
        }
    }

    /// One observer: its callback, and what to do if the machine goes away first (finish a stream).
    struct ObserverEntry {
        var id: Int
        var callback: @Sendable (StateTransition<State>) -> Void
        var onMachineRelease: (@Sendable () -> Void)?
    }

    // MARK: Submitting

    /// Runs `request` now if the machine is idle, otherwise queues it behind the running ones.
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
        // Idle, and no queue: this thread runs the request. A request that runs no user code at
        // all (no barrier, action, observer or completion handler) is settled under the lock.
        if !request.delivery.runsUserCode {
            switch rules.firstStep(for: request.kind) {
            case .ignore:
                lock.unlock()
                request.delivery.deliver(.success(nil))
                return
            case .fail(let error):
                lock.unlock()
                request.delivery.deliver(.failure(error))
                return
            case .perform(let plan) where observers.isEmpty && table.isQuiet(from: plan.from, to: plan.to):
                rules.commit(plan)
                lock.unlock()
                request.delivery.deliver(.success(change(plan)))
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
    private func drain(first: Request<State>?) {
        var next = first
        if next == nil {
            lock.lock()
            next = pending.popFirst()
            if next == nil { running = false }
            lock.unlock()
        }
        while let request = next {
            let outcome = execute(request.kind)
            request.delivery.deliver(outcome)
            lock.lock()
            next = pending.popFirst()
            if next == nil { running = false }
            lock.unlock()
        }
    }

    // MARK: Executing

    /// Preflights `kind`, consulting barriers and dynamic transitions, and performs the change.
    private func execute(_ kind: RequestKind<State>) -> Outcome {
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
    private func perform(_ plan: TransitionRules<State>.Plan) {
        let from = table.state(at: plan.from)
        let to = table.state(at: plan.to)
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
        if !observers.isEmpty {
            let transition = change(plan)
            for observer in observers { observer.callback(transition) }
        }
    }

    /// Changes the state and returns the observers to tell.
    private func commit(_ plan: TransitionRules<State>.Plan) -> [ObserverEntry] {
        lock.lock()
        defer { lock.unlock() }
        rules.commit(plan)
        return observers
    }

    private func change(_ plan: TransitionRules<State>.Plan) -> StateTransition<State> {
        StateTransition(from: table.state(at: plan.from), to: table.state(at: plan.to), cause: plan.cause)
    }
}

extension TransitionRules {
    /// The first step of a request.
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
