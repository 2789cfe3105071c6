/// The pure logic of a ``StateMachine``: which state it is in, whether it is suspended, and what a
/// request leads to. It holds no lock and calls no closure: where a barrier or a dynamic transition
/// must be consulted it says so (``Step/consultBarrier(target:)``, ``Step/pickDynamicTarget``) and
/// the caller feeds the answer back. Unit-tested without threads.
///
/// The preflight of a transition checks, in this order: suspended? · current state final? ·
/// target registered? · same state? · target's barrier (allow / deny / redirect) · target allowed
/// from here, or global?
@usableFromInline
struct TransitionRules<State: Hashable & Sendable> {
    /// What a request leads to.
    @usableFromInline
    enum Step {
        /// Nothing happens; the completion gets `nil` (same state or final state without the
        /// error options; suspend in a final state; resume when not suspended…).
        case ignore
        /// The request is refused; nothing changes.
        case fail(StateMachineError<State>)
        /// Call the target's barrier with the current state and pass its answer to
        /// ``barrierAnswered(_:target:)``.
        case consultBarrier(target: Int)
        /// Call the current state's dynamic transition and pass its answer to
        /// ``preflight(to:)``.
        case pickDynamicTarget
        /// Run the change: its actions, then ``commit(_:)``.
        case perform(Plan)
    }

    /// A change that passed its checks.
    @usableFromInline
    struct Plan: Equatable {
        @usableFromInline var from: Int
        @usableFromInline var to: Int
        @usableFromInline var cause: StateTransition<State>.Cause

        @inlinable
        init(from: Int, to: Int, cause: StateTransition<State>.Cause) {
            self.from = from
            self.to = to
            self.cause = cause
        }
    }

    @usableFromInline let table: StateTable<State>
    /// The index of the current state.
    @usableFromInline var current = 0
    /// While suspended: the index of the state to resume to.
    @usableFromInline var resumeTarget: Int?

    @inlinable
    init(table: StateTable<State>) {
        self.table = table
    }

    @inlinable var isSuspended: Bool { resumeTarget != nil }

    // MARK: Requests

    /// The preflight of a transition to `target`.
    @inlinable @inline(__always)
    func preflight(to target: State) -> Step {
        // The usual case, checked first without building anything: not suspended, not final, a
        // registered target other than the current state, no barrier, allowed or global.
        if resumeTarget == nil && !table.isFinal(current), let index = table.index(of: target), index != current,
           !table.hasBarrier(index), table.isGlobal(index) || table.allows(from: current, to: index)
        {
            return .perform(Plan(from: current, to: index, cause: .transition))
        }
        return preflightInFull(to: target)
    }

    /// ``preflight(to:)`` step by step, with the refusals and their errors.
    @inlinable @inline(never)
    func preflightInFull(to target: State) -> Step {
        if let refusal = refusalBeforeTarget(target) {
            return refusal
        }
        guard let index = table.index(of: target) else {
            return .fail(error(.unknownState, target, "state \(target) is not registered"))
        }
        if index == current {
            return table.options.contains(.sameStateIsError)
                ? .fail(error(.alreadyInState, target, "already in state \(target)")) : .ignore
        }
        if table.hasBarrier(index) {
            return .consultBarrier(target: index)
        }
        return allowedCheck(index)
    }

    /// The preflight of a dynamic transition.
    @inlinable
    func preflightDynamic() -> Step {
        if let refusal = refusalBeforeTarget(nil) {
            return refusal
        }
        guard table.definitions[current].dynamicTransition != nil else {
            return .fail(error(.dynamicTransitionNotDefined, nil,
                               "state \(table.state(at: current)) has no dynamic transition"))
        }
        return .pickDynamicTarget
    }

    /// What the barrier of `target` answering `response` leads to.
    @inlinable
    func barrierAnswered(_ response: BarrierResponse<State>, target: Int) -> Step {
        switch response {
        case .allow:
            return allowedCheck(target)
        case .deny:
            return .fail(error(.transitionDenied, table.state(at: target),
                               "the barrier of \(table.state(at: target)) denied the transition"))
        case .redirect(let redirect):
            guard let index = table.index(of: redirect) else {
                return .fail(error(.unknownState, redirect,
                                   "the barrier of \(table.state(at: target)) redirected to \(redirect), which is not registered"))
            }
            if index == current {
                return table.options.contains(.sameStateIsError)
                    ? .fail(error(.alreadyInState, redirect, "redirected to the current state \(redirect)")) : .ignore
            }
            return allowedCheck(index)
        }
    }

    /// The preflight of `suspend(to:)`.
    @inlinable
    func preflightSuspend(to state: State) -> Step {
        guard let index = table.index(of: state) else {
            return .fail(error(.unknownState, state, "cannot suspend to \(state): it is not registered"))
        }
        if table.isFinal(index) {
            return .fail(error(.finalState, state, "cannot suspend to \(state): it is a final state"))
        }
        if isSuspended || table.isFinal(current) || index == current {
            return .ignore
        }
        return .perform(Plan(from: current, to: index, cause: .suspend))
    }

    /// The preflight of `resume()`.
    @inlinable
    func preflightResume() -> Step {
        guard let target = resumeTarget else { return .ignore }
        return .perform(Plan(from: current, to: target, cause: .resume))
    }

    /// The preflight of `reset()`.
    @inlinable
    func preflightReset() -> Step {
        if current == 0 && !isSuspended { return .ignore }
        return .perform(Plan(from: current, to: 0, cause: .reset))
    }

    /// Whether a transition to `target` requested now would pass every check but the barrier's.
    @inlinable
    func canTransition(to target: State) -> Bool {
        guard !isSuspended, !table.isFinal(current), let index = table.index(of: target), index != current else {
            return false
        }
        return table.isGlobal(index) || table.allows(from: current, to: index)
    }

    // MARK: Changing state

    /// Makes `plan` the current state.
    @inlinable
    mutating func commit(_ plan: Plan) {
        precondition(plan.from == current, "Internal inconsistency: committing \(plan) in state \(current)")
        current = plan.to
        switch plan.cause {
        case .transition:
            break
        case .suspend:
            resumeTarget = plan.from
        case .resume, .reset:
            resumeTarget = nil
        }
    }

    // MARK: Helpers

    /// The refusals that do not depend on the target: suspended, then final.
    @inlinable
    func refusalBeforeTarget(_ target: State?) -> Step? {
        if isSuspended {
            return .fail(error(.suspended, target, "the machine is suspended in \(table.state(at: current))"))
        }
        if table.isFinal(current) {
            return table.options.contains(.finalStateIsError)
                ? .fail(error(.finalState, target, "\(table.state(at: current)) is a final state")) : .ignore
        }
        return nil
    }

    @inlinable
    func allowedCheck(_ index: Int) -> Step {
        if table.isGlobal(index) || table.allows(from: current, to: index) {
            return .perform(Plan(from: current, to: index, cause: .transition))
        }
        let allowed = table.definitions[current].allowedTransitions.map { "\($0)" }.joined(separator: ", ")
        return .fail(error(.illegalTransition, table.state(at: index),
                           "\(table.state(at: current)) cannot go to \(table.state(at: index)) (allowed: \(allowed.isEmpty ? "none" : allowed))"))
    }

    @inlinable
    func error(_ code: StateMachineError<State>.Code, _ target: State?, _ message: String) -> StateMachineError<State> {
        StateMachineError(code, machine: table.name, state: table.state(at: current), target: target, message)
    }
}
