/// A barrier's answer to a transition into its state.
public enum BarrierResponse<State: Hashable & Sendable>: Hashable, Sendable {
    /// Let the transition go on (the allowed-transition check still applies).
    case allow
    /// Refuse it: the request fails with ``StateMachineErrorCode/transitionDenied``
    /// and the machine stays where it is.
    case deny
    /// Go to another state instead. The redirect target must be registered and allowed (or
    /// global) from the current state; the state first requested is not checked against the
    /// allowed transitions, and the redirect target's own barrier is not consulted, so redirects
    /// never loop.
    case redirect(to: State)
}

/// How one state of a ``StateMachine`` behaves: where it may go, whether it is global or final,
/// its barrier and dynamic transition, and the actions that run when it is entered or left.
///
/// A definition is a value; the chainable methods return a changed copy:
///
/// ```swift
/// StateDefinition(Connection.connecting, allowedTransitions: [.connected, .backingOff])
///     .afterEntering { previous in dialer.dial() }
///     .beforeLeaving { next in dialer.stop() }
/// ```
///
/// Actions are `@Sendable` because they run on whichever thread executes the transition (or on the
/// machine's transition queue, if it has one) — one at a time, never while a lock is held.
public struct StateDefinition<State: Hashable & Sendable>: Sendable {
    /// An action that receives the other state of the transition.
    public typealias Action = @Sendable (_ other: State) -> Void

    /// The state this definition describes.
    public let state: State
    /// The states this one may go to (global states need not be listed).
    public private(set) var allowedTransitions: [State]
    /// Whether every state may enter this one without listing it.
    public private(set) var isGlobal = false
    /// Whether this state can never be left (except by ``StateMachine/requestReset(completion:)``).
    public private(set) var isFinal = false

    @usableFromInline var beforeEnteringActions: [Action] = []
    @usableFromInline var afterEnteringActions: [Action] = []
    @usableFromInline var beforeLeavingActions: [Action] = []
    @usableFromInline var afterLeavingActions: [Action] = []
    @usableFromInline var barrier: (@Sendable (_ from: State) -> BarrierResponse<State>)?
    @usableFromInline var dynamicTransition: (@Sendable () -> State)?

    /// Defines `state` with the states it may go to.
    /// - Parameters:
    ///   - state: The state.
    ///   - allowedTransitions: The states this one may go to. Every one must be registered with
    ///     the same machine; a global state need not be listed.
    public init(_ state: State, allowedTransitions: [State] = []) {
        self.state = state
        self.allowedTransitions = allowedTransitions
    }

    /// Defines `state` with the states it may go to, listed one by one.
    public init(_ state: State, allowedTransitions first: State, _ others: State...) {
        self.init(state, allowedTransitions: [first] + others)
    }

    /// Adds an action run just before the machine enters this state; it receives the state being
    /// left. Several actions run in the order they were added.
    public func beforeEntering(_ action: @escaping Action) -> Self {
        var copy = self
        copy.beforeEnteringActions.append(action)
        return copy
    }

    /// Adds an action run just after the machine entered this state; it receives the state that
    /// was left.
    public func afterEntering(_ action: @escaping Action) -> Self {
        var copy = self
        copy.afterEnteringActions.append(action)
        return copy
    }

    /// Adds an action run just before the machine leaves this state; it receives the state being
    /// entered. A final state cannot have one (the machine's initialiser throws).
    public func beforeLeaving(_ action: @escaping Action) -> Self {
        var copy = self
        copy.beforeLeavingActions.append(action)
        return copy
    }

    /// Adds an action run just after the machine left this state; it receives the state that was
    /// entered. A final state cannot have one (the machine's initialiser throws).
    public func afterLeaving(_ action: @escaping Action) -> Self {
        var copy = self
        copy.afterLeavingActions.append(action)
        return copy
    }

    /// Makes this state global: any state may enter it without listing it (a final state still
    /// cannot be left).
    public func makeGlobal() -> Self {
        var copy = self
        copy.isGlobal = true
        return copy
    }

    /// Makes this state final: once entered, only a reset leaves it. A final state may not have
    /// allowed transitions, leaving actions or a dynamic transition.
    public func makeFinal() -> Self {
        var copy = self
        copy.isFinal = true
        return copy
    }

    /// Sets the barrier consulted before any transition into this state (after the same-state
    /// check and before the allowed-transition check). It receives the state being left and
    /// allows, denies or redirects. It runs without any lock held, on the thread executing the
    /// transition.
    public func withTransitionBarrier(_ barrier: @escaping @Sendable (_ from: State) -> BarrierResponse<State>) -> Self {
        var copy = self
        copy.barrier = barrier
        return copy
    }

    /// Sets the closure that picks the target of a dynamic transition
    /// (``StateMachine/requestTransition(completion:)``) requested while the machine is in this state.
    /// The usual checks then apply to the state it returns.
    public func withDynamicTransition(_ pick: @escaping @Sendable () -> State) -> Self {
        var copy = self
        copy.dynamicTransition = pick
        return copy
    }
}

/// Builds a list of state definitions:
///
/// ```swift
/// let machine = try StateMachine<Light>(name: "light") {
///     StateDefinition(.off, allowedTransitions: .on)
///     StateDefinition(.on, allowedTransitions: .off)
/// }
/// ```
@resultBuilder
public enum StateDefinitionBuilder<State: Hashable & Sendable> {
    public static func buildExpression(_ definition: StateDefinition<State>) -> [StateDefinition<State>] {
        [definition]
    }

    public static func buildExpression(_ definitions: [StateDefinition<State>]) -> [StateDefinition<State>] {
        definitions
    }

    public static func buildBlock(_ parts: [StateDefinition<State>]...) -> [StateDefinition<State>] {
        parts.flatMap { $0 }
    }

    public static func buildOptional(_ part: [StateDefinition<State>]?) -> [StateDefinition<State>] {
        part ?? []
    }

    public static func buildEither(first part: [StateDefinition<State>]) -> [StateDefinition<State>] {
        part
    }

    public static func buildEither(second part: [StateDefinition<State>]) -> [StateDefinition<State>] {
        part
    }

    public static func buildArray(_ parts: [[StateDefinition<State>]]) -> [StateDefinition<State>] {
        parts.flatMap { $0 }
    }
}
