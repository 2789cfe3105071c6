import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section O of SCENARIOS.md (105–118), adapted to `StateMachine<State>`.
///
/// Adaptations, in general: Machinus's `(previousState, error)` completion is an
/// `Outcome` (`.success(change)`, `.success(nil)` for a quiet no-op, `.failure(error)`);
/// TransitionKit events map to allowed transitions (a TK event with several sources is the target
/// listed in each source's allowed transitions) or to dynamic transitions; there is no activation:
/// the machine starts in its initial state without running any action; Machinus's background state
/// is `suspend(to:)` / `resume()`; notifications are `observe`, `changes` and `stateUpdates`.
@Suite("StateMachine: scenarios O105–O118", .offThePool, .timeLimit(.minutes(1)))
struct StateMachineScenarioTests {
    enum N: String, Hashable, Sendable, CustomStringConvertible {
        case a, b, c, d, global, globalFinal, final, barred, detour, dyn, background, unknown
        var description: String { rawValue }
    }

    typealias Machine = StateMachine<N>
    typealias Summary = StateMachineOutcomeSummary<N>

    /// A definition whose four actions record `"<state> <action> <argument>"`.
    static func recorded(_ state: N, _ allowed: [N] = [], _ log: Recorder<String>) -> StateDefinition<N> {
        entering(state, allowed, log)
            .beforeLeaving { log.record("\(state) beforeLeaving \($0)") }
            .afterLeaving { log.record("\(state) afterLeaving \($0)") }
    }

    /// A definition whose entering actions record (a final state may not have leaving actions).
    static func entering(_ state: N, _ allowed: [N] = [], _ log: Recorder<String>) -> StateDefinition<N> {
        StateDefinition(state, allowedTransitions: allowed)
            .beforeEntering { log.record("\(state) beforeEntering \($0)") }
            .afterEntering { log.record("\(state) afterEntering \($0)") }
    }

    /// a → b, c · b → a, c · c → d · d; every action of every state recorded, and observed.
    static func plainMachine(_ log: Recorder<String>, options: StateMachineOptions = []) throws -> Machine {
        try Machine(name: "plain", options: options) {
            recorded(.a, [.b, .c], log)
            recorded(.b, [.a, .c], log)
            recorded(.c, [.d], log)
            recorded(.d, [], log)
        }
    }

    // MARK: 105, 106

    @Test("O105 action order: machine, leaving, entering, change, observers, completion — with arguments")
    func actionOrder() throws {
        let log = Recorder<String>()
        let machines = Recorder<Machine>()  // lets the actions read the machine's state
        @Sendable func seen() -> String { machines.values.first.map { "\($0.state)" } ?? "?" }
        let machine = try Machine(
            name: "O105",
            beforeTransition: { from, to in log.record("machine beforeTransition \(from) \(to) [\(seen())]") },
            afterTransition: { from, to in log.record("machine afterTransition \(from) \(to) [\(seen())]") }
        ) {
            StateDefinition(.a, allowedTransitions: .b)
                .beforeLeaving { log.record("a beforeLeaving \($0) [\(seen())]") }
                .afterLeaving { log.record("a afterLeaving \($0) [\(seen())]") }
                .beforeEntering { log.record("a beforeEntering \($0)") }
                .afterEntering { log.record("a afterEntering \($0)") }
            StateDefinition(.b, allowedTransitions: .a)
                .beforeEntering { log.record("b beforeEntering \($0) [\(seen())]") }
                .afterEntering { log.record("b afterEntering \($0) [\(seen())]") }
                .beforeLeaving { log.record("b beforeLeaving \($0)") }
                .afterLeaving { log.record("b afterLeaving \($0)") }
        }
        machines.record(machine)
        let observation = machine.observe { log.record("observer \($0) [\(seen())]") }
        defer { observation.cancel() }
        let outcome = machine.waitForOutcome { completion in
            machine.requestTransition(to: .b) { outcome in
                log.record("completion [\(seen())]")
                completion(outcome)
            }
        }
        #expect(outcome?.successValue == StateTransition(from: .a, to: .b, cause: .transition))
        // The state changes between the new state's beforeEntering and the old state's afterLeaving.
        #expect(log.values == [
            "machine beforeTransition a b [a]",
            "a beforeLeaving b [a]",
            "b beforeEntering a [a]",
            "a afterLeaving b [b]",
            "b afterEntering a [b]",
            "machine afterTransition a b [b]",
            "observer a -> b [b]",
            "completion [b]",
        ])
        #expect(machine.state == .b)
    }

    @Test("O106 (MA 0.1 order, not TK's): several actions of one kind run in the order they were added")
    func severalActionsInOrder() throws {
        let log = Recorder<String>()
        let machine = try Machine(name: "O106") {
            StateDefinition(.a, allowedTransitions: .b)
                .beforeLeaving { _ in log.record("leave 1") }
                .beforeLeaving { _ in log.record("leave 2") }
            StateDefinition(.b)
                .afterEntering { _ in log.record("enter 1") }
                .afterEntering { _ in log.record("enter 2") }
                .afterEntering { _ in log.record("enter 3") }
        }
        #expect(Summary(machine.outcome(to: .b)) == .changed(StateTransition(from: .a, to: .b)))
        #expect(log.values == ["leave 1", "leave 2", "enter 1", "enter 2", "enter 3"])
    }

    // MARK: 107, 108

    @Test("O107 same state: quiet no-op by default, alreadyInState with the option; no action either way")
    func sameState() throws {
        let log = Recorder<String>()
        let quiet = try Self.plainMachine(log)
        let quietObservation = quiet.observe { log.record("observer \($0)") }
        defer { quietObservation.cancel() }
        #expect(Summary(quiet.outcome(to: .a)) == .nothing)
        #expect(quiet.state == .a)

        let strict = try Self.plainMachine(log, options: .sameStateIsError)
        let strictObservation = strict.observe { log.record("observer \($0)") }
        defer { strictObservation.cancel() }
        let error = try #require(strict.outcome(to: .a)?.failureValue)
        #expect(error.code == .alreadyInState)
        #expect(error.state == .a && error.target == .a && error.machineName == "plain")
        #expect(strict.state == .a)
        #expect(log.values.isEmpty)
        #expect(!strict.canTransition(to: .a) && !quiet.canTransition(to: .a))
    }

    @Test("O108 illegal transition: illegalTransition naming both states, state unchanged, no action")
    func illegalTransition() throws {
        let log = Recorder<String>()
        let machine = try Self.plainMachine(log)
        let observation = machine.observe { log.record("observer \($0)") }
        defer { observation.cancel() }
        #expect(!machine.canTransition(to: .d))
        let error = try #require(machine.outcome(to: .d)?.failureValue)
        #expect(error.code == .illegalTransition)
        #expect(error.state == .a && error.target == .d)
        #expect(error.message.contains("a") && error.message.contains("d") && error.message.contains("b, c"))
        #expect(machine.state == .a)
        #expect(log.values.isEmpty)
        // An unregistered target is refused the same way, with its own code.
        #expect(Summary(machine.outcome(to: .unknown)) == .failed(.unknownState))
        #expect(machine.state == .a && log.values.isEmpty)
    }

    // MARK: 109, 110

    @Test("O109 global states: entered from anywhere unlisted; a global final state is not left")
    func globalStates() throws {
        let log = Recorder<String>()
        let machine = try Machine(name: "O109") {
            Self.recorded(.a, [.b], log)
            Self.recorded(.b, [.c], log)
            Self.recorded(.c, [], log)
            Self.recorded(.global, [.a], log).makeGlobal()
            Self.entering(.globalFinal, [], log).makeGlobal().makeFinal()
        }
        #expect(machine.canTransition(to: .global))
        #expect(machine.outcome(to: .global)?.successValue == StateTransition(from: .a, to: .global))
        #expect(log.values == ["a beforeLeaving global", "global beforeEntering a",
                               "a afterLeaving global", "global afterEntering a"])
        #expect(machine.outcome(to: .a)?.successValue == StateTransition(from: .global, to: .a))
        #expect(machine.outcome(to: .b)?.successValue == StateTransition(from: .a, to: .b))
        #expect(machine.outcome(to: .c)?.successValue == StateTransition(from: .b, to: .c))
        #expect(machine.canTransition(to: .globalFinal))
        #expect(machine.outcome(to: .globalFinal)?.successValue == StateTransition(from: .c, to: .globalFinal))
        // Not even another global state leaves it.
        #expect(!machine.canTransition(to: .global))
        #expect(Summary(machine.outcome(to: .global)) == .nothing)
        #expect(machine.state == .globalFinal)
    }

    @Test("O109 a global state's barrier still applies")
    func globalBarrier() throws {
        let machine = try Machine(name: "O109-barrier") {
            StateDefinition(.a, allowedTransitions: .b)
            StateDefinition(.b)
            StateDefinition(.global).makeGlobal().withTransitionBarrier { _ in .deny }
        }
        #expect(Summary(machine.outcome(to: .global)) == .failed(.transitionDenied))
        #expect(machine.state == .a)
    }

    @Test("O110 final state: quiet no-op by default, finalState with the option, only reset leaves it")
    func finalState() throws {
        for options: StateMachineOptions in [[], .finalStateIsError] {
            let log = Recorder<String>()
            let machine = try Machine(name: "O110", options: options) {
                Self.recorded(.a, [.final], log)
                Self.recorded(.b, [], log).makeGlobal()
                Self.entering(.final, [], log).makeFinal()
            }
            #expect(machine.outcome(to: .final)?.successValue == StateTransition(from: .a, to: .final))
            let entered = log.values
            for target in [N.a, .b, .final, .unknown] {
                let outcome = machine.outcome(to: target)
                if options.contains(.finalStateIsError) {
                    let error = try #require(outcome?.failureValue)
                    #expect(error.code == .finalState && error.state == .final && error.target == target)
                } else {
                    #expect(Summary(outcome) == .nothing)
                }
            }
            #expect(Summary(machine.dynamicOutcome())
                        == (options.isEmpty ? .nothing : .failed(.finalState)))
            // "cannot be the background state"; and suspending a machine in a final state is ignored.
            #expect(Summary(machine.suspendOutcome(to: .final)) == .failed(.finalState))
            #expect(Summary(machine.suspendOutcome(to: .b)) == .nothing)
            #expect(machine.state == .final && !machine.isSuspended)
            #expect(log.values == entered)
            #expect(machine.resetOutcome()?.successValue == StateTransition(from: .final, to: .a, cause: .reset))
            #expect(machine.state == .a)
            #expect(log.values == entered)
        }
    }

    @Test("O110/O116 configuration mistakes throw from the initialiser", arguments: [
        ("final with allowed transitions", StateMachineErrorCode.finalStateWithExits, N.final),
        ("final with a dynamic transition", .finalStateWithExits, .final),
        ("final with beforeLeaving", .finalStateWithLeavingActions, .final),
        ("final with afterLeaving", .finalStateWithLeavingActions, .final),
        ("duplicate state", .duplicateState, .b),
        ("allowed transition to an unregistered state", .unknownState, .b),
        ("one state", .tooFewStates, .a),
    ])
    func configurationErrors(_ label: String, _ code: StateMachineErrorCode, _ state: N) throws {
        let definitions: [StateDefinition<N>] = switch label {
        case "final with allowed transitions":
            [StateDefinition(.a, allowedTransitions: .final), StateDefinition(.final, allowedTransitions: .a).makeFinal()]
        case "final with a dynamic transition":
            [StateDefinition(.a), StateDefinition(.final).withDynamicTransition { .a }.makeFinal()]
        case "final with beforeLeaving":
            [StateDefinition(.a), StateDefinition(.final).beforeLeaving { _ in }.makeFinal()]
        case "final with afterLeaving":
            [StateDefinition(.a), StateDefinition(.final).makeFinal().afterLeaving { _ in }]
        case "duplicate state":
            [StateDefinition(.a), StateDefinition(.b), StateDefinition(.b)]
        case "allowed transition to an unregistered state":
            [StateDefinition(.a), StateDefinition(.b, allowedTransitions: .unknown)]
        default:
            [StateDefinition(.a)]
        }
        do {
            _ = try Machine(name: "config", states: definitions)
            Issue.record("\(label) was accepted")
        } catch {
            #expect(error.code == code)
            #expect(error.machineName == "config")
            #expect(error.state == state)
            #expect(error.description.contains("\(code)") && error.description.contains("config"))
        }
    }

    @Test("O116 construction: fewer than two states throws; two are enough")
    func tooFewStates() throws {
        #expect(throws: StateMachineError<N>(.tooFewStates, machine: "none", state: nil, target: nil, "")) {
            try Machine(name: "none", states: [])
        }
        let two = try Machine { StateDefinition(.a, allowedTransitions: .b); StateDefinition(.b) }
        #expect(two.registeredStates == [.a, .b])
    }

    @Test("O116 construction: first definition is initial, default name has the type, builder control flow")
    func construction() throws {
        let includeC = Bool.random()
        let machine = try Machine {
            StateDefinition(.d, allowedTransitions: .a)
            StateDefinition(.a)
            if includeC { StateDefinition(.c) } else { StateDefinition(.b) }
            for state in [N.global, .background] { StateDefinition(state) }
            [StateDefinition(.dyn)]
        }
        #expect(machine.state == .d && machine.initialState == .d)
        #expect(machine.registeredStates == [.d, .a, includeC ? .c : .b, .global, .background, .dyn])
        #expect(machine.name.hasPrefix("StateMachine<N>#"), "default name \(machine.name) names the state type")
        let other = try Machine { StateDefinition(.a); StateDefinition(.b) }
        #expect(other.name != machine.name, "default names are distinct")
        #expect(machine.options == [] && machine.transitionQueue == nil)
        #expect(machine.description == "StateMachine(\(machine.name), state: d)")
        let named = try Machine(name: "named", options: .sameStateIsError) { StateDefinition(.a); StateDefinition(.b) }
        #expect(named.name == "named" && named.options == .sameStateIsError)
    }

    @Test("O117 (adapted: no activation): building a machine runs no action; the first transition runs them")
    func noActivation() throws {
        let log = Recorder<String>()
        let machine = try Self.plainMachine(log)
        #expect(machine.state == .a && log.values.isEmpty)
        #expect(machine.outcome(to: .b)?.successValue == StateTransition(from: .a, to: .b))
        #expect(log.values.count == 4)
    }
}
