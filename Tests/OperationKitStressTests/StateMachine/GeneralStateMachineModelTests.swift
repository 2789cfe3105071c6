import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// A model-based test of `StateMachine<State>`: random machines and random request sequences are
// run through the real machine and through `GSMModel`, a reference model written from the
// documented semantics (not from the library's `TransitionRules`), and every outcome, every
// action, barrier, dynamic-transition call, observer call and completion, the state, the
// suspension and `canTransition(to:)` are compared after each step.
//
// Everything here is prefixed `GSM` (general state machine): the stress target is one module.
//
// The parts: GeneralStateMachineModelInputs.swift (randomness, configurations, requests,
// outcomes, events), GeneralStateMachineReferenceModel.swift (`GSMModel`),
// GeneralStateMachineHarness.swift (the real machine, instrumented) and this file (the test).

// MARK: - The test

/// Where `actual` first differs from `expected`, with a little context; `nil` if they are equal.
func gsmFirstDifference<Element: Equatable>(_ actual: [Element], _ expected: [Element]) -> String? {
    guard actual != expected else { return nil }
    let index = zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        ?? min(actual.count, expected.count)
    let context = max(0, index - 3)
    return "differs at element \(index) (of \(actual.count), expected \(expected.count)): "
        + "got \(actual[context..<min(actual.count, index + 3)]), expected \(expected[context..<min(expected.count, index + 3)])"
}

extension StressTests {
    @Suite("GeneralStateMachine against a reference model")
    struct GeneralStateMachineModel {
        /// How a step's request is made.
        enum Form: CustomStringConvertible {
            case completion, async, noCompletion

            var description: String {
                switch self {
                case .completion: "completion handler"
                case .async: "async"
                case .noCompletion: "no completion"
                }
            }
        }

        /// Machines per batch; the batches are the test's arguments.
        static let machinesPerBatch = Stress.count(24, minimum: 4)
        static let stepsPerMachine = Stress.count(300, minimum: 100)

        @Test("random machines and requests: outcomes, actions, state and canTransition match the model",
              .timeLimit(.minutes(3)), arguments: 0..<8)
        func randomMachines(batch: Int) async throws {
            var seen: [String: Int] = [:]
            for index in 0..<Self.machinesPerBatch {
                let seed = UInt64(batch * 10_000 + index + 1)
                try await runMachine(seed: seed, tally: &seen)
            }
            // The generator must reach every outcome and every kind of call, or the comparison
            // proves little.
            let required = ["alreadyInState", "transitionDenied", "illegalTransition", "dynamicTransitionNotDefined",
                            "finalState", "unknownState", "suspended", "nil", "transition", "suspend", "resume", "reset",
                            "redirected", "barrier", "dynamic", "followUp", "observed", "leaving", "entering"]
            let missing = required.filter { seen[$0, default: 0] == 0 }
            if !missing.isEmpty {
                // At full size every batch sees everything; a scaled-down run may not.
                Issue.record("batch \(batch) never saw \(missing); saw \(seen.sorted { $0.key < $1.key })",
                             severity: Stress.scale < 1 ? .warning : .error)
            }
        }

        /// Counts, by kind, what the model expected: outcomes (error codes, `nil`, change causes,
        /// `redirected`) and calls (barrier, dynamic, followUp, observed, leaving, entering).
        static func count(_ request: GSMRequest, _ outcome: GSMOutcome, _ events: [GSMEvent], into tally: inout [String: Int]) {
            switch outcome {
            case .none: tally["nil", default: 0] += 1
            case .failure(let code, _, _): tally["\(code)", default: 0] += 1
            case .change(_, let to, let cause):
                tally["\(cause)", default: 0] += 1
                if case .transition(let target) = request, target != to { tally["redirected", default: 0] += 1 }
            }
            for event in events {
                let kind = switch event {
                case .barrier: "barrier"
                case .dynamic: "dynamic"
                case .followUpIssued: "followUp"
                case .observed: "observed"
                case .beforeLeaving, .afterLeaving: "leaving"
                case .beforeEntering, .afterEntering: "entering"
                case .machineBefore, .machineAfter, .completed, .completionReturned: "other"
                }
                tally[kind, default: 0] += 1
            }
        }

        /// Runs one random machine, counting what happened into `tally`. Records an issue naming
        /// the seed and the step at the first mismatch, and stops there.
        func runMachine(seed: UInt64, tally: inout [String: Int]) async throws {
            var rng = GSMRandom(seed: seed)
            let config = GSMConfig.random(&rng)
            var model = GSMModel(config: config)
            let trace = GSMTrace(count: config.count)
            let name = "gsm-model-\(seed)"
            let observerStart = rng.chance(60) ? rng.below(Self.stepsPerMachine / 2) : Int.max
            let observerEnd = rng.chance(40) ? observerStart &+ rng.below(Self.stepsPerMachine) : Int.max
            var history: [String] = []
            var stepsRun = 0
            var machineReference: WeakRef?
            var changesStream: AsyncStream<StateTransition<Int>>?
            var statesStream: AsyncStream<Int>?
            var observation: StateObservation?

            func fail(_ step: Int, _ what: String) {
                Issue.record("""
                    seed \(seed), step \(step): \(what)
                    machine:
                    \(config)
                    last requests (oldest first):
                    \(history.suffix(12).joined(separator: "\n"))
                    """)
            }

            do {
                let machine = try config.makeMachine(name: name, trace: trace)
                machineReference = WeakRef(machine)
                changesStream = machine.changes
                statesStream = machine.stateUpdates
                steps: for step in 0..<Self.stepsPerMachine {
                    if step == observerStart {
                        observation = machine.observe { transition in trace.record(.observed(transition, trace.ref.snapshot())) }
                        model.observing = true
                    }
                    if step == observerEnd {
                        observation?.cancel()
                        model.observing = false
                    }
                    let request = model.randomRequest(&rng)
                    let form: Form = switch rng.below(100) {
                    case 0..<45: .completion
                    case 45..<85: .async
                    default: .noCompletion
                    }
                    // The completion handler sometimes makes a request too: it must be queued.
                    let completionFollowUp = form == .completion && rng.chance(25)
                        ? GSMRequest.random(&rng, count: config.count) : nil
                    let before = model.snapshot
                    model.followUpBudget = GSMConfig.followUpBudget
                    trace.setFollowUpBudget(GSMConfig.followUpBudget)
                    let (expected, expectedEvents) = model.run(
                        request, withCompletion: form == .completion, completionFollowUp: completionFollowUp)
                    Self.count(request, expected, expectedEvents, into: &tally)
                    var actual: GSMOutcome?
                    switch form {
                    case .completion:
                        let delivered = GSMLocked<[GSMOutcome]>([])
                        machine.submit(request) { outcome in
                            trace.record(.completed(followUpOf: nil, outcome, trace.ref.snapshot()))
                            delivered.withLock { $0.append(outcome) }
                            if let completionFollowUp, let machine = trace.ref.machine {
                                trace.record(.followUpIssued(by: -1, completionFollowUp, trace.ref.snapshot()))
                                machine.submit(completionFollowUp) { outcome in
                                    trace.record(.completed(followUpOf: -1, outcome, trace.ref.snapshot()))
                                }
                            }
                            trace.record(.completionReturned)
                        }
                        let outcomes = delivered.current
                        if outcomes.count != 1 {
                            fail(step, "\(request): the completion ran \(outcomes.count) times before the call returned "
                                + "(an idle machine without a transition queue completes synchronously)")
                            break steps
                        }
                        actual = outcomes[0]
                    case .async:
                        actual = await machine.outcome(of: request)
                    case .noCompletion:
                        machine.submitWithoutCompletion(request)
                    }
                    stepsRun = step + 1
                    history.append("\(step): \(before) \(request) [\(form)] -> \(actual?.description ?? "(\(expected))")")
                    if let actual, actual != expected {
                        fail(step, "\(request) [\(form)] in \(before): expected \(expected), got \(actual)")
                        break
                    }
                    let events = trace.take()
                    if events != expectedEvents {
                        fail(step, """
                            \(request) [\(form)] in \(before): calls differ
                            expected: \(expectedEvents)
                            actual:   \(events)
                            """)
                        break
                    }
                    let state = machine.state
                    let suspended = machine.isSuspended
                    if state != model.current || suspended != model.isSuspended {
                        fail(step, "\(request) [\(form)] in \(before): expected \(model.snapshot) after, got "
                            + "\(GSMSnapshot(state: state, suspended: suspended))")
                        break
                    }
                    for target in 0..<(config.count + 2) where machine.canTransition(to: target) != model.canTransition(to: target) {
                        fail(step, "after \(request) [\(form)], now \(model.snapshot): canTransition(to: \(target)) is "
                            + "\(machine.canTransition(to: target)), expected \(model.canTransition(to: target))")
                        break steps
                    }
                }
            }
            // The machine is gone: its streams have finished and hold every change, in order. (A
            // machine still alive is a leak; its streams would not finish, so do not read them.)
            observation?.cancel()  // harmless once the machine is gone
            guard machineReference?.isReleased == true else {
                Issue.record("seed \(seed): the machine was not released")
                return
            }
            if stepsRun == Self.stepsPerMachine {
                var streamed: [StateTransition<Int>] = []
                for await change in changesStream! { streamed.append(change) }
                if let difference = gsmFirstDifference(streamed, model.changes) {
                    Issue.record("seed \(seed): the changes stream \(difference)")
                }
                var states: [Int] = []
                for await state in statesStream! { states.append(state) }
                // A reset that only ends a suspension in the initial state (0 -> 0) is no new state.
                let expectedStates = [0] + model.changes.filter { $0.from != $0.to }.map(\.to)
                if let difference = gsmFirstDifference(states, expectedStates) {
                    Issue.record("seed \(seed): the stateUpdates stream \(difference)")
                }
            }
        }
    }
}
