/// The error a ``StateMachine`` reports: a transition that was refused, or a configuration that
/// cannot make a machine.
///
/// Refused transitions (``StateMachineErrorCode/illegalTransition``, ``StateMachineErrorCode/transitionDenied``
/// and the rest) leave the machine exactly as it was and run no action. Configuration mistakes
/// (``StateMachineErrorCode/duplicateState``, ``StateMachineErrorCode/tooFewStates`` …) are thrown by the
/// machine's initialiser; nothing in ``StateMachine`` traps on bad input.
public struct StateMachineError<State: Hashable & Sendable>: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong; the same codes for every state type.
    public typealias Code = StateMachineErrorCode

    /// What went wrong.
    public let code: Code
    /// The name of the machine, as given to its initialiser.
    public let machineName: String
    /// The machine's state when the request was refused; for a configuration error, the state
    /// whose definition is wrong (if one is).
    public let state: State?
    /// The state that was requested (or that a barrier or dynamic transition chose), if any.
    public let target: State?
    /// A human-readable explanation naming the states involved.
    public let message: String

    /// Creates an error. ``StateMachine`` creates these; you rarely need to.
    public init(_ code: Code, machine machineName: String, state: State?, target: State?, _ message: String) {
        self.code = code
        self.machineName = machineName
        self.state = state
        self.target = target
        self.message = message
    }

    /// The code, the machine and the message, on one line.
    public var description: String {
        "StateMachineError.\(code) [\(machineName)]: \(message)"
    }

    /// Two errors are equal when their codes, machines, states and targets are equal.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.code == rhs.code && lhs.machineName == rhs.machineName && lhs.state == rhs.state
            && lhs.target == rhs.target
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(machineName)
        hasher.combine(state)
        hasher.combine(target)
    }
}

/// What a ``StateMachineError`` reports. New codes may be added in later versions, so switch with a `default`.
public struct StateMachineErrorCode: Hashable, Sendable, CustomStringConvertible {
    private enum Value: Hashable, Sendable {
        case alreadyInState
        case transitionDenied
        case illegalTransition
        case dynamicTransitionNotDefined
        case finalState
        case unknownState
        case suspended
        case duplicateState
        case finalStateWithExits
        case finalStateWithLeavingActions
        case tooFewStates
    }

    private let value: Value
    private init(_ value: Value) { self.value = value }

    /// The machine is already in the requested state, and the machine's options ask for this to
    /// be an error (``StateMachineOptions/sameStateIsError``). Without the option the request is
    /// a quiet no-op.
    public static let alreadyInState = StateMachineErrorCode(.alreadyInState)
    /// The target state's barrier answered ``BarrierResponse/deny``.
    public static let transitionDenied = StateMachineErrorCode(.transitionDenied)
    /// The target is neither in the current state's allowed transitions nor a global state.
    public static let illegalTransition = StateMachineErrorCode(.illegalTransition)
    /// A dynamic transition was requested in a state that has no dynamic transition.
    public static let dynamicTransitionNotDefined = StateMachineErrorCode(.dynamicTransitionNotDefined)
    /// The machine is in a final state and the options ask for this to be an error
    /// (``StateMachineOptions/finalStateIsError``); or a final state was named as the state to
    /// suspend to.
    public static let finalState = StateMachineErrorCode(.finalState)
    /// A state that was not registered with the machine: requested at run time, returned by a
    /// dynamic transition or a barrier's redirect, or named in another state's allowed
    /// transitions (a configuration error).
    public static let unknownState = StateMachineErrorCode(.unknownState)
    /// A transition was requested while the machine is suspended (see
    /// ``StateMachine/requestSuspend(to:completion:)``). Resume it first.
    public static let suspended = StateMachineErrorCode(.suspended)
    /// Configuration: two definitions for the same state.
    public static let duplicateState = StateMachineErrorCode(.duplicateState)
    /// Configuration: a final state with allowed transitions or a dynamic transition.
    public static let finalStateWithExits = StateMachineErrorCode(.finalStateWithExits)
    /// Configuration: a final state with `beforeLeaving` or `afterLeaving` actions.
    public static let finalStateWithLeavingActions = StateMachineErrorCode(.finalStateWithLeavingActions)
    /// Configuration: fewer than two states.
    public static let tooFewStates = StateMachineErrorCode(.tooFewStates)

    /// The code's name, for example `illegalTransition`.
    public var description: String { "\(value)" }
}
