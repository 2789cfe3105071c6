/// A ``StateMachine``'s configuration, checked and compiled once: states by index, the allowed
/// transitions as a bit matrix, and each state's flags and closures. Immutable, so the thread
/// executing transitions reads it without a lock.
@usableFromInline
final class StateTable<State: Hashable & Sendable>: Sendable {
    @usableFromInline typealias TransitionAction = @Sendable (_ from: State, _ to: State) -> Void

    @usableFromInline let name: String
    @usableFromInline let options: StateMachineOptions
    @usableFromInline let definitions: [StateDefinition<State>]
    @usableFromInline let beforeTransition: TransitionAction?
    @usableFromInline let afterTransition: TransitionAction?
    /// The states by index (the hot path reads these, not whole definitions).
    @usableFromInline let states: [State]
    /// For up to ``linearSearchLimit`` states, `index(of:)` compares with each state (cheaper than
    /// hashing); above, it looks the state up here.
    @usableFromInline let indices: [State: Int]
    @usableFromInline static var linearSearchLimit: Int { 16 }
    /// Row `i` holds the states state `i` may go to: bit `j` of word `i * wordsPerRow + j / 64`.
    @usableFromInline let allowedBits: [UInt64]
    @usableFromInline let wordsPerRow: Int
    /// Per state, one bit each: final, global, has a barrier, runs code before the state changes
    /// (entering or leaving actions, or a barrier), runs code after it.
    @usableFromInline let flags: [UInt8]

    /// Checks `definitions` and compiles them.
    /// - Throws: ``StateMachineError`` with `tooFewStates`, `duplicateState`, `finalStateWithExits`,
    ///   `finalStateWithLeavingActions` or `unknownState`.
    @usableFromInline
    init(
        name: String,
        options: StateMachineOptions,
        definitions: [StateDefinition<State>],
        beforeTransition: TransitionAction?,
        afterTransition: TransitionAction?
    ) throws(StateMachineError<State>) {
        func configurationError(_ code: StateMachineError<State>.Code, _ state: State?, _ target: State?,
                                _ message: String) -> StateMachineError<State> {
            StateMachineError(code, machine: name, state: state, target: target, message)
        }
        guard definitions.count >= 2 else {
            throw configurationError(.tooFewStates, definitions.first?.state, nil,
                                     "a state machine needs at least two states; \(definitions.count) given")
        }
        var indices: [State: Int] = [:]
        indices.reserveCapacity(definitions.count)
        for (index, definition) in definitions.enumerated() {
            if indices.updateValue(index, forKey: definition.state) != nil {
                throw configurationError(.duplicateState, definition.state, nil,
                                         "state \(definition.state) is defined twice")
            }
        }
        for definition in definitions where definition.isFinal {
            if !definition.allowedTransitions.isEmpty || definition.dynamicTransition != nil {
                throw configurationError(.finalStateWithExits, definition.state, nil,
                                         "final state \(definition.state) cannot have allowed or dynamic transitions")
            }
            if !definition.beforeLeavingActions.isEmpty || !definition.afterLeavingActions.isEmpty {
                throw configurationError(.finalStateWithLeavingActions, definition.state, nil,
                                         "final state \(definition.state) cannot have leaving actions")
            }
        }
        let wordsPerRow = (definitions.count + 63) / 64
        var bits = [UInt64](repeating: 0, count: wordsPerRow * definitions.count)
        for (row, definition) in definitions.enumerated() {
            for target in definition.allowedTransitions {
                guard let column = indices[target] else {
                    throw configurationError(.unknownState, definition.state, target,
                                             "state \(definition.state) allows a transition to \(target), which is not registered")
                }
                bits[row * wordsPerRow + column / 64] |= 1 << UInt64(column % 64)
            }
        }
        self.name = name
        self.options = options
        self.definitions = definitions
        self.beforeTransition = beforeTransition
        self.afterTransition = afterTransition
        self.states = definitions.map(\.state)
        self.indices = indices
        self.allowedBits = bits
        self.wordsPerRow = wordsPerRow
        flags = definitions.map { definition in
            var flags: UInt8 = 0
            if definition.isFinal { flags |= StateFlags.final }
            if definition.isGlobal { flags |= StateFlags.global }
            if definition.barrier != nil { flags |= StateFlags.barrier }
            if !definition.beforeEnteringActions.isEmpty || !definition.beforeLeavingActions.isEmpty
                || definition.barrier != nil
            {
                flags |= StateFlags.codeBefore
            }
            if !definition.afterEnteringActions.isEmpty || !definition.afterLeavingActions.isEmpty {
                flags |= StateFlags.codeAfter
            }
            return flags
        }
    }

    @inlinable @inline(__always)
    func index(of state: State) -> Int? {
        if states.count <= Self.linearSearchLimit {
            for index in states.indices where states[index] == state { return index }
            return nil
        }
        return indices[state]
    }

    @inlinable @inline(__always)
    func state(at index: Int) -> State {
        states[index]
    }

    /// Whether state `from` lists `to` among its allowed transitions.
    @inlinable @inline(__always)
    func allows(from: Int, to: Int) -> Bool {
        allowedBits[from * wordsPerRow + to / 64] & (1 << UInt64(to % 64)) != 0
    }

    @inlinable @inline(__always)
    func isFinal(_ index: Int) -> Bool {
        flags[index] & StateFlags.final != 0
    }

    @inlinable @inline(__always)
    func isGlobal(_ index: Int) -> Bool {
        flags[index] & StateFlags.global != 0
    }

    @inlinable @inline(__always)
    func hasBarrier(_ index: Int) -> Bool {
        flags[index] & StateFlags.barrier != 0
    }

    /// Whether a transition between the two states runs no code at all besides changing the
    /// state: no barrier, no state action and no machine action. (Observers are checked apart.)
    @inlinable @inline(__always)
    func isQuiet(from: Int, to: Int) -> Bool {
        beforeTransition == nil && afterTransition == nil
            && (flags[from] | flags[to]) & (StateFlags.codeBefore | StateFlags.codeAfter) == 0
    }
}

/// The bits of ``StateTable/flags``.
@usableFromInline
enum StateFlags {
    @usableFromInline static var final: UInt8 { 1 }
    @usableFromInline static var global: UInt8 { 2 }
    @usableFromInline static var barrier: UInt8 { 4 }
    @usableFromInline static var codeBefore: UInt8 { 8 }
    @usableFromInline static var codeAfter: UInt8 { 16 }
}

/// Options of a ``StateMachine``.
public struct StateMachineOptions: OptionSet, Hashable, Sendable {
    public let rawValue: Int

    public init(rawValue: Int) {
        self.rawValue = rawValue
    }

    /// A request for the state the machine is already in fails with `alreadyInState` (without this
    /// option it is a quiet no-op: no action runs and the completion gets `nil`).
    public static let sameStateIsError = StateMachineOptions(rawValue: 1 << 0)
    /// A request made in a final state fails with `finalState` (without this option it is a quiet
    /// no-op).
    public static let finalStateIsError = StateMachineOptions(rawValue: 1 << 1)
}

/// A change of a ``StateMachine``'s state: what its completion handlers, observers and streams
/// receive.
public struct StateTransition<State: Hashable & Sendable>: Hashable, Sendable, CustomStringConvertible {
    /// Why the state changed.
    public enum Cause: Hashable, Sendable {
        /// A transition (requested by state or dynamic).
        case transition
        /// ``StateMachine/requestSuspend(to:completion:)``.
        case suspend
        /// ``StateMachine/requestResume(completion:)``.
        case resume
        /// ``StateMachine/requestReset(completion:)``.
        case reset
    }

    /// The state the machine left: the previous state.
    public let from: State
    /// The state the machine entered.
    public let to: State
    /// Why the state changed.
    public let cause: Cause

    /// Creates a transition value.
    public init(from: State, to: State, cause: Cause = .transition) {
        self.from = from
        self.to = to
        self.cause = cause
    }

    /// `from -> to`, with the cause unless it is a plain transition.
    public var description: String {
        cause == .transition ? "\(from) -> \(to)" : "\(from) -> \(to) (\(cause))"
    }
}
