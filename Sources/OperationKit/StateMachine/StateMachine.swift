import Dispatch
import Synchronization

/// A general state machine: states with allowed transitions, entering and leaving actions, global
/// and final states, transition barriers, dynamic transitions, typed errors, serialised
/// transitions, observation, reset, suspend and resume, and graph export.
///
/// ```swift
/// enum Light: Hashable, Sendable { case off, on, broken }
///
/// let light = try StateMachine<Light>(name: "light") {
///     StateDefinition(.off, allowedTransitions: .on)
///     StateDefinition(.on, allowedTransitions: .off)
///         .afterEntering { previous in print("on (was \(previous))") }
///     StateDefinition(.broken).makeGlobal().makeFinal()
/// }
/// try await light.transition(to: .on)
/// ```
///
/// The first definition is the initial state. Configuration is checked when the machine is built:
/// a duplicate state, a final state with exits or leaving actions, an allowed transition naming an
/// unregistered state or fewer than two states make the initialiser throw a ``StateMachineError``.
///
/// ## One transition
///
/// Preflight — suspended? current state final? target registered? same state? the target's
/// barrier? allowed or global? — then: the machine's `beforeTransition` → the old state's
/// `beforeLeaving` → the new state's `beforeEntering` → the state changes → the old state's
/// `afterLeaving` → the new state's `afterEntering` → the machine's `afterTransition` → observers
/// → the completion, which receives the ``StateTransition`` (its `from` is the previous state).
/// A refused request runs no action and changes nothing.
///
/// ## Threads
///
/// The machine is safe to use from any thread, and transitions are serialised: requests run one at
/// a time in the order they were made. A request made while another runs — from another thread,
/// or from inside one of its actions, barriers, observers or completion handlers — is queued and
/// runs right after it, never re-entrantly.
/// Without a `transitionQueue`, a request made while the machine is idle runs at once on the
/// requesting thread, and queued requests run on the thread that is already running transitions.
/// With a `transitionQueue`, every transition, its actions, observers and completion run on that
/// queue (Machinus's transition queue). No action, barrier, observer or completion is ever called
/// while a lock is held.
public final class StateMachine<State: Hashable & Sendable> {
    /// An action of the machine itself, receiving the state left and the state entered.
    public typealias TransitionAction = @Sendable (_ from: State, _ to: State) -> Void
    /// What a transition's completion handler receives: the change (`nil` when the request was a
    /// quiet no-op) or the reason it was refused.
    public typealias Outcome = Result<StateTransition<State>?, StateMachineError<State>>

    @usableFromInline let table: StateTable<State>
    /// The queue transitions run on, or `nil` to run them on the requesting thread.
    public let transitionQueue: DispatchQueue?

    @usableFromInline let lock = Lock()
    // protected by lock (the thread running transitions reads `rules` without it: it is the only
    // writer, and writes under the lock)
    @exclusivity(unchecked) @usableFromInline var rules: TransitionRules<State>
    // protected by lock
    @exclusivity(unchecked) @usableFromInline var pending = RequestQueue<State>()
    // protected by lock: whether a thread (or the transition queue) is running transitions
    @exclusivity(unchecked) @usableFromInline var running = false
    // protected by lock
    @exclusivity(unchecked) @usableFromInline var observers: [ObserverEntry] = []
    // protected by lock
    @exclusivity(unchecked) var nextObserverID = 0
    /// The ``instrument`` (Observability/OperationInstrument+Telling.swift).
    @usableFromInline let instrumentSlot = InstrumentSlot(OperationInstrumentation.default)

    /// Builds a machine from state definitions listed in a builder block.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default the state type and a serial number.
    ///   - options: Whether same-state and final-state requests are errors (by default they are
    ///     quiet no-ops).
    ///   - transitionQueue: Where transitions, actions, observers and completions run; `nil` (the
    ///     default) runs them on the requesting thread.
    ///   - beforeTransition: Runs first in every transition (not in suspend, resume or reset).
    ///   - afterTransition: Runs after the new state's `afterEntering` in every transition.
    ///   - states: The state definitions; the first is the initial state.
    /// - Throws: ``StateMachineError`` for a configuration mistake (`tooFewStates`,
    ///   `duplicateState`, `finalStateWithExits`, `finalStateWithLeavingActions`, `unknownState`).
    public convenience init(
        name: String? = nil,
        options: StateMachineOptions = [],
        transitionQueue: DispatchQueue? = nil,
        beforeTransition: TransitionAction? = nil,
        afterTransition: TransitionAction? = nil,
        @StateDefinitionBuilder<State> states: () -> [StateDefinition<State>]
    ) throws(StateMachineError<State>) {
        try self.init(name: name, options: options, transitionQueue: transitionQueue,
                      beforeTransition: beforeTransition, afterTransition: afterTransition, states: states())
    }

    /// Builds a machine from an array of state definitions; the first is the initial state.
    /// See ``init(name:options:transitionQueue:beforeTransition:afterTransition:states:)-5yv5e``.
    public init(
        name: String? = nil,
        options: StateMachineOptions = [],
        transitionQueue: DispatchQueue? = nil,
        beforeTransition: TransitionAction? = nil,
        afterTransition: TransitionAction? = nil,
        states: [StateDefinition<State>]
    ) throws(StateMachineError<State>) {
        let name = name ?? "StateMachine<\(State.self)>#\(MachineSerial.next())"
        table = try StateTable(name: name, options: options, definitions: states,
                               beforeTransition: beforeTransition, afterTransition: afterTransition)
        rules = TransitionRules(table: table)
        self.transitionQueue = transitionQueue
    }

    deinit {
        for entry in observers {
            entry.onMachineRelease?()
        }
    }

    // MARK: Reading

    /// The machine's name, as given or generated.
    public var name: String { table.name }
    /// The options it was built with.
    public var options: StateMachineOptions { table.options }
    /// The registered states, initial state first.
    public var registeredStates: [State] { table.definitions.map(\.state) }
    /// The initial state (the first definition), which ``requestReset(completion:)`` returns to.
    public var initialState: State { table.state(at: 0) }

    /// The current state. While a transition runs this is the old state until the state changes
    /// (between the `beforeEntering` and `afterLeaving` actions) and the new one after.
    public var state: State {
        lock.lock()
        defer { lock.unlock() }
        return table.state(at: rules.current)
    }

    /// Whether the machine is suspended (see ``requestSuspend(to:completion:)``).
    public var isSuspended: Bool {
        lock.lock()
        defer { lock.unlock() }
        return rules.isSuspended
    }

    /// Whether a transition to `target` requested now would pass the static checks: the machine is
    /// not suspended, the current state is not final, `target` is registered, is not the current
    /// state, and is allowed from it or global. Barriers are not consulted (they may depend on
    /// anything, and run user code).
    public func canTransition(to target: State) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return rules.canTransition(to: target)
    }

    // MARK: Requests with a completion handler (fire-and-forget)

    // These enqueue a request and return at once; their names start with `request` so that none
    // shares a base name and argument labels with the async form below, which the compiler could
    // pick instead (at the top level of `main.swift`, `try await machine.transition(to:)` would
    // silently pick a same-named fire-and-forget twin and drop the error). See "Synchronous and
    // asynchronous twins" in Documentation/Semantics.md.

    /// Requests a transition to `target` and returns at once; `completion`, if any, is told the
    /// outcome. The async ``transition(to:)`` waits for it and throws a refusal.
    ///
    /// - Parameters:
    ///   - target: The state to go to.
    ///   - completion: Called once when the request has been handled, with the change, `nil` for a
    ///     quiet no-op, or the error. Runs on the thread running transitions (or the transition
    ///     queue), after the observers, before the next request starts. If the machine is idle and
    ///     has no transition queue, it runs before this method returns.
    @inlinable
    public func requestTransition(to target: State, completion: (@Sendable (Outcome) -> Void)? = nil) {
        submit(Request(kind: .transition(to: target), delivery: completion))
    }

    /// Requests a dynamic transition and returns at once: the current state's dynamic transition
    /// picks the target (``StateDefinition/withDynamicTransition(_:)``), then the usual checks
    /// apply. Without one the completion gets `dynamicTransitionNotDefined`. The async form is
    /// ``transition()``.
    @inlinable
    public func requestTransition(completion: (@Sendable (Outcome) -> Void)? = nil) {
        submit(Request(kind: .dynamic, delivery: completion))
    }

    /// Requests a suspension and returns at once (the async form is ``suspend(to:)``): the machine
    /// enters `state` without the allowed-transition checks and barriers,
    /// remembering the current state for ``requestResume(completion:)``. Only `state`'s entering actions
    /// run (no leaving actions of the current state, no machine actions). Ignored (completion gets
    /// `nil`) when already suspended, in a final state, or already in `state`; fails with
    /// `unknownState` or `finalState` when `state` is unregistered or final. While suspended,
    /// transitions fail with `suspended`.
    @inlinable
    public func requestSuspend(to state: State, completion: (@Sendable (Outcome) -> Void)? = nil) {
        submit(Request(kind: .suspend(to: state), delivery: completion))
    }

    /// Requests that a suspended machine return to the state it was suspended from, and returns
    /// at once (the async form is ``resume()``); only the suspension state's leaving actions run.
    /// Ignored (completion gets `nil`) when not suspended.
    @inlinable
    public func requestResume(completion: (@Sendable (StateTransition<State>?) -> Void)? = nil) {
        submit(Request(kind: .resume, delivery: completion.map { handler in { handler(try? $0.get()) } }))
    }

    /// Requests a reset and returns at once (the async form is ``reset()``): the machine returns
    /// to its initial state, running no action, and a suspension ends.
    /// Observers are told (with cause ``StateTransition/Cause/reset``) whenever the reset changed
    /// anything — the state, or only a suspension in the initial state (then `from == to`). Like
    /// every request it runs after the transitions requested before it.
    @inlinable
    public func requestReset(completion: (@Sendable (StateTransition<State>?) -> Void)? = nil) {
        submit(Request(kind: .reset, delivery: completion.map { handler in { handler(try? $0.get()) } }))
    }

    // MARK: Transitions with async/await

    /// Transitions to `target` and returns the change, or `nil` for a quiet no-op.
    ///
    /// The request is queued like any other; cancelling the awaiting task does not withdraw it.
    /// - Throws: ``StateMachineError`` when the transition is refused; the machine is unchanged.
    @discardableResult
    @inlinable
    public func transition(to target: State) async throws(StateMachineError<State>) -> StateTransition<State>? {
        try await outcome(of: .transition(to: target)).get()
    }

    /// Makes a dynamic transition (see ``requestTransition(completion:)``) and returns the change, or
    /// `nil` for a quiet no-op.
    /// - Throws: ``StateMachineError`` when it is refused.
    @discardableResult
    @inlinable
    public func transition() async throws(StateMachineError<State>) -> StateTransition<State>? {
        try await outcome(of: .dynamic).get()
    }

    /// Suspends the machine to `state` (see ``requestSuspend(to:completion:)``) and returns the change, or
    /// `nil` when the request was ignored.
    /// - Throws: ``StateMachineError`` (`unknownState`, `finalState`) when `state` cannot be a
    ///   suspension state.
    @discardableResult
    @inlinable
    public func suspend(to state: State) async throws(StateMachineError<State>) -> StateTransition<State>? {
        try await outcome(of: .suspend(to: state)).get()
    }

    /// Resumes a suspended machine (see ``requestResume(completion:)``) and returns the change, or `nil`
    /// when it was not suspended.
    @discardableResult
    @inlinable
    public func resume() async -> StateTransition<State>? {
        try? await outcome(of: .resume).get()
    }

    /// Resets the machine (see ``requestReset(completion:)``) and returns the change, or `nil` when it was
    /// already in its initial state and not suspended.
    @discardableResult
    @inlinable
    public func reset() async -> StateTransition<State>? {
        try? await outcome(of: .reset).get()
    }

    @inlinable
    func outcome(of kind: RequestKind<State>) async -> Outcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
            submit(Request(kind: kind, delivery: { continuation.resume(returning: $0) }))
        }
    }
}

// The table is immutable; every mutable field is protected by `lock` (see the field comments).
extension StateMachine: @unchecked Sendable {}

extension StateMachine: CustomStringConvertible {
    /// The machine's name and current state.
    public var description: String { "StateMachine(\(name), state: \(state))" }
}

/// Serial numbers for default machine names.
enum MachineSerial {
    private static let counter = Atomic<Int>(0)

    static func next() -> Int {
        counter.wrappingAdd(1, ordering: .relaxed).newValue
    }
}
