import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// The general state machine model test (see GeneralStateMachineModelTests.swift): the real
// machine, instrumented.

// MARK: - The real machine, instrumented

/// A value behind a serial queue (`Synchronization.Mutex` is reported by the thread sanitizer on
/// Linux with Swift 6.3, see Lock.swift), usable from any thread.
final class GSMLocked<Value>: @unchecked Sendable {  // `value` is confined to `queue`
    private let queue = DispatchQueue(label: "GSMLocked")
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try queue.sync { try body(&value) }
    }

    var current: Value { queue.sync { value } }
}

/// A weak reference to the machine, for its own closures (a strong one would be a cycle).
final class GSMMachineRef: @unchecked Sendable {  // `machine` is set once, before any request is made
    weak var machine: StateMachine<Int>?

    init() {}

    /// The machine's state and suspension as seen now (state -1 if the machine is gone).
    func snapshot() -> GSMSnapshot {
        guard let machine else { return GSMSnapshot(state: -1, suspended: false) }
        return GSMSnapshot(state: machine.state, suspended: machine.isSuspended)
    }
}

/// What the instrumented machine's closures record, and the counters they share.
final class GSMTrace: Sendable {
    let ref = GSMMachineRef()
    private let events = GSMLocked<[GSMEvent]>([])
    private let barrierCalls: GSMLocked<[Int]>
    private let dynamicCalls: GSMLocked<[Int]>
    private let followUpBudget = GSMLocked(0)

    init(count: Int) {
        barrierCalls = GSMLocked(Array(repeating: 0, count: count))
        dynamicCalls = GSMLocked(Array(repeating: 0, count: count))
    }

    func record(_ event: GSMEvent) { events.withLock { $0.append(event) } }

    /// The events recorded since the last call.
    func take() -> [GSMEvent] { events.withLock { events in defer { events = [] }; return events } }

    /// Returns how many times `state`'s barrier was called before, and counts this call.
    func nextBarrierCall(_ state: Int) -> Int { barrierCalls.withLock { calls in defer { calls[state] += 1 }; return calls[state] } }

    func nextDynamicCall(_ state: Int) -> Int { dynamicCalls.withLock { calls in defer { calls[state] += 1 }; return calls[state] } }

    func setFollowUpBudget(_ budget: Int) { followUpBudget.withLock { $0 = budget } }

    /// Takes one follow-up from the budget; `false` if none is left.
    func claimFollowUp() -> Bool {
        followUpBudget.withLock { budget in
            guard budget > 0 else { return false }
            budget -= 1
            return true
        }
    }
}

extension GSMConfig {
    /// Builds the real machine, every closure recording into `trace`.
    func makeMachine(name: String, trace: GSMTrace) throws -> StateMachine<Int> {
        let ref = trace.ref
        var definitions: [StateDefinition<Int>] = []
        for state in 0..<count {
            var definition = StateDefinition(state, allowedTransitions: allowed[state])
            if isGlobal[state] { definition = definition.makeGlobal() }
            if isFinal[state] { definition = definition.makeFinal() }
            for action in 0..<beforeEntering[state] {
                definition = definition.beforeEntering { other in
                    trace.record(.beforeEntering(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            for action in 0..<afterEntering[state] {
                definition = definition.afterEntering { other in
                    trace.record(.afterEntering(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            for action in 0..<beforeLeaving[state] {
                definition = definition.beforeLeaving { other in
                    trace.record(.beforeLeaving(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            for action in 0..<afterLeaving[state] {
                definition = definition.afterLeaving { other in
                    trace.record(.afterLeaving(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            if !followUps[state].isEmpty {
                let requests = followUps[state]
                definition = definition.afterEntering { _ in
                    guard let machine = ref.machine else { return }
                    for followUp in requests where trace.claimFollowUp() {
                        trace.record(.followUpIssued(by: state, followUp, ref.snapshot()))
                        machine.submit(followUp) { outcome in
                            trace.record(.completed(followUpOf: state, outcome, ref.snapshot()))
                        }
                    }
                }
            }
            if let answers = barriers[state] {
                definition = definition.withTransitionBarrier { from in
                    trace.record(.barrier(of: state, from: from, ref.snapshot()))
                    let call = trace.nextBarrierCall(state)
                    guard answers.indices.contains(from) else { return .deny }  // never: from is registered
                    return answers[from][call % answers[from].count].response
                }
            }
            if let picks = dynamicPicks[state] {
                definition = definition.withDynamicTransition {
                    trace.record(.dynamic(of: state, ref.snapshot()))
                    return picks[trace.nextDynamicCall(state) % picks.count]
                }
            }
            definitions.append(definition)
        }
        var beforeTransition: StateMachine<Int>.TransitionAction?
        var afterTransition: StateMachine<Int>.TransitionAction?
        if machineActions {
            beforeTransition = { from, to in trace.record(.machineBefore(from: from, to: to, ref.snapshot())) }
            afterTransition = { from, to in trace.record(.machineAfter(from: from, to: to, ref.snapshot())) }
        }
        let machine = try StateMachine(
            name: name, options: options, beforeTransition: beforeTransition, afterTransition: afterTransition,
            states: definitions)
        ref.machine = machine
        return machine
    }
}

extension StateMachine<Int> {
    /// Makes `request` with the completion-handler form; `completion` gets the outcome.
    func submit(_ request: GSMRequest, completion: @escaping @Sendable (GSMOutcome) -> Void) {
        switch request {
        case .transition(let target): requestTransition(to: target) { completion(GSMOutcome($0)) }
        case .dynamic: requestTransition(completion: { completion(GSMOutcome($0)) })
        case .suspend(let target): requestSuspend(to: target) { completion(GSMOutcome($0)) }
        case .resume: requestResume { completion(GSMOutcome($0)) }
        case .reset: requestReset { completion(GSMOutcome($0)) }
        }
    }

    /// Makes `request` without a completion handler.
    func submitWithoutCompletion(_ request: GSMRequest) {
        switch request {
        case .transition(let target): requestTransition(to: target, completion: nil)
        case .dynamic: requestTransition(completion: nil)
        case .suspend(let target): requestSuspend(to: target, completion: nil)
        case .resume: requestResume(completion: nil)
        case .reset: requestReset(completion: nil)
        }
    }

    /// Makes `request` with the async form.
    func outcome(of request: GSMRequest) async -> GSMOutcome {
        do throws(StateMachineError<Int>) {
            switch request {
            case .transition(let target): return GSMOutcome(try await transition(to: target))
            case .dynamic: return GSMOutcome(try await transition())
            case .suspend(let target): return GSMOutcome(try await suspend(to: target))
            case .resume: return GSMOutcome(await resume())
            case .reset: return GSMOutcome(await reset())
            }
        } catch {
            return GSMOutcome(error)
        }
    }
}
