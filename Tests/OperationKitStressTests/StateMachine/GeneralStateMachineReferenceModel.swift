import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// The general state machine model test (see GeneralStateMachineModelTests.swift): the reference
// model, written from the documented semantics.

// MARK: - The reference model

/// The documented semantics of `StateMachine`, written from the documentation.
struct GSMModel {
    let config: GSMConfig
    private(set) var current = 0
    /// While suspended, the state `resume()` returns to.
    private(set) var resumeTo: Int?
    private var barrierCalls: [Int]
    private var dynamicCalls: [Int]
    /// Whether an observer is registered.
    var observing = false
    /// Follow-up requests the actions may still make in this step.
    var followUpBudget = 0
    /// Every change so far, in order (what a `changes` stream yields).
    private(set) var changes: [StateTransition<Int>] = []

    init(config: GSMConfig) {
        self.config = config
        barrierCalls = Array(repeating: 0, count: config.count)
        dynamicCalls = Array(repeating: 0, count: config.count)
    }

    var isSuspended: Bool { resumeTo != nil }
    var snapshot: GSMSnapshot { GSMSnapshot(state: current, suspended: isSuspended) }

    private func isRegistered(_ state: Int) -> Bool { state >= 0 && state < config.count }

    /// A random request for the next step, biased towards requests that change the state (out of
    /// a suspension, out of a final state, to a state allowed from here) so that runs do not
    /// spend most of their steps refused.
    func randomRequest(_ rng: inout GSMRandom) -> GSMRequest {
        if isSuspended && rng.chance(25) { return .resume }
        if config.isFinal[current] && rng.chance(25) { return .reset }
        if rng.chance(45) {
            let reachable = (0..<config.count).filter { config.isGlobal[$0] || config.allowed[current].contains($0) }
            if !reachable.isEmpty { return .transition(to: reachable[rng.below(reachable.count)]) }
        }
        return GSMRequest.random(&rng, count: config.count)
    }

    /// Whether a transition to `target` would pass the static checks (no barrier consulted).
    func canTransition(to target: Int) -> Bool {
        guard !isSuspended, !config.isFinal[current], isRegistered(target), target != current else { return false }
        return config.isGlobal[target] || config.allowed[current].contains(target)
    }

    /// Runs one request made from outside, and the follow-up requests made while it runs (queued
    /// behind it, first in first out). `withCompletion`: whether the request has a completion
    /// handler, which records a `completed` event, makes `completionFollowUp` if there is one,
    /// and records `completionReturned`. Returns its outcome and every event.
    mutating func run(
        _ request: GSMRequest, withCompletion: Bool, completionFollowUp: GSMRequest? = nil
    ) -> (GSMOutcome, [GSMEvent]) {
        var events: [GSMEvent] = []
        var queue: [(request: GSMRequest, followUpOf: Int?)] = []
        let outcome = execute(request, &events, &queue)
        if withCompletion {
            events.append(.completed(followUpOf: nil, outcome, snapshot))
            if let completionFollowUp {
                events.append(.followUpIssued(by: -1, completionFollowUp, snapshot))
                queue.append((completionFollowUp, -1))
            }
            events.append(.completionReturned)
        }
        var index = 0
        while index < queue.count {
            let (followUp, origin) = queue[index]
            index += 1
            let followUpOutcome = execute(followUp, &events, &queue)
            events.append(.completed(followUpOf: origin, followUpOutcome, snapshot))
        }
        return (outcome, events)
    }

    /// The model without follow-ups and events: the outcome of one request.
    mutating func outcome(of request: GSMRequest) -> GSMOutcome {
        var events: [GSMEvent] = []
        var queue: [(request: GSMRequest, followUpOf: Int?)] = []
        return execute(request, &events, &queue)
    }

    private enum Decision {
        case ignore
        case refuse(StateMachineErrorCode, target: Int?)
        case go(to: Int)
    }

    private mutating func execute(
        _ request: GSMRequest, _ events: inout [GSMEvent], _ queue: inout [(request: GSMRequest, followUpOf: Int?)]
    ) -> GSMOutcome {
        let decision: Decision
        var cause = StateTransition<Int>.Cause.transition
        switch request {
        case .transition(let target):
            decision = decide(target, &events)
        case .dynamic:
            if isSuspended {
                decision = .refuse(.suspended, target: nil)
            } else if config.isFinal[current] {
                decision = config.options.contains(.finalStateIsError) ? .refuse(.finalState, target: nil) : .ignore
            } else if let picks = config.dynamicPicks[current] {
                events.append(.dynamic(of: current, snapshot))
                let pick = picks[dynamicCalls[current] % picks.count]
                dynamicCalls[current] += 1
                decision = decide(pick, &events)
            } else {
                decision = .refuse(.dynamicTransitionNotDefined, target: nil)
            }
        case .suspend(let target):
            cause = .suspend
            if !isRegistered(target) {
                decision = .refuse(.unknownState, target: target)
            } else if config.isFinal[target] {
                decision = .refuse(.finalState, target: target)
            } else if isSuspended || config.isFinal[current] || target == current {
                decision = .ignore
            } else {
                decision = .go(to: target)
            }
        case .resume:
            cause = .resume
            decision = resumeTo.map { .go(to: $0) } ?? .ignore
        case .reset:
            cause = .reset
            decision = current == 0 && !isSuspended ? .ignore : .go(to: 0)
        }
        switch decision {
        case .ignore:
            return .none
        case .refuse(let code, let target):
            return .failure(code, state: current, target: target)
        case .go(let target):
            let from = current
            perform(from: from, to: target, cause: cause, &events, &queue)
            return .change(from: from, to: target, cause: cause)
        }
    }

    /// The preflight of a transition to `target`, after the suspended and final checks of a
    /// dynamic transition (repeating them is harmless: they cannot have changed).
    private mutating func decide(_ target: Int, _ events: inout [GSMEvent]) -> Decision {
        if isSuspended { return .refuse(.suspended, target: target) }
        if config.isFinal[current] {
            return config.options.contains(.finalStateIsError) ? .refuse(.finalState, target: target) : .ignore
        }
        guard isRegistered(target) else { return .refuse(.unknownState, target: target) }
        if target == current { return sameState(target) }
        var destination = target
        if let answers = config.barriers[target] {
            events.append(.barrier(of: target, from: current, snapshot))
            let variants = answers[current]
            let answer = variants[barrierCalls[target] % variants.count]
            barrierCalls[target] += 1
            switch answer {
            case .allow:
                break
            case .deny:
                return .refuse(.transitionDenied, target: target)
            case .redirect(let redirect):
                guard isRegistered(redirect) else { return .refuse(.unknownState, target: redirect) }
                if redirect == current { return sameState(redirect) }
                destination = redirect
            }
        }
        if config.isGlobal[destination] || config.allowed[current].contains(destination) {
            return .go(to: destination)
        }
        return .refuse(.illegalTransition, target: destination)
    }

    private func sameState(_ target: Int) -> Decision {
        config.options.contains(.sameStateIsError) ? .refuse(.alreadyInState, target: target) : .ignore
    }

    private mutating func perform(
        from: Int, to: Int, cause: StateTransition<Int>.Cause,
        _ events: inout [GSMEvent], _ queue: inout [(request: GSMRequest, followUpOf: Int?)]
    ) {
        let runsEntering = cause == .transition || cause == .suspend
        let runsLeaving = cause == .transition || cause == .resume
        let before = snapshot
        if cause == .transition && config.machineActions { events.append(.machineBefore(from: from, to: to, before)) }
        if runsLeaving {
            for action in 0..<config.beforeLeaving[from] {
                events.append(.beforeLeaving(state: from, action: action, other: to, before))
            }
        }
        if runsEntering {
            for action in 0..<config.beforeEntering[to] {
                events.append(.beforeEntering(state: to, action: action, other: from, before))
            }
        }
        current = to
        switch cause {
        case .transition: break
        case .suspend: resumeTo = from
        case .resume, .reset: resumeTo = nil
        }
        let after = snapshot
        if runsLeaving {
            for action in 0..<config.afterLeaving[from] {
                events.append(.afterLeaving(state: from, action: action, other: to, after))
            }
        }
        if runsEntering {
            for action in 0..<config.afterEntering[to] {
                events.append(.afterEntering(state: to, action: action, other: from, after))
            }
            for followUp in config.followUps[to] where followUpBudget > 0 {
                followUpBudget -= 1
                events.append(.followUpIssued(by: to, followUp, after))
                queue.append((followUp, to))
            }
        }
        if cause == .transition && config.machineActions { events.append(.machineAfter(from: from, to: to, after)) }
        let change = StateTransition(from: from, to: to, cause: cause)
        changes.append(change)
        if observing { events.append(.observed(change, after)) }
    }
}
