@testable import OperationKit
import OperationKitTestSupport
import Testing

/// The pure preflight logic of `StateMachine` (`TransitionRules`), table-driven: every kind of
/// current state (normal, initial, global, final, global-final, with a dynamic transition,
/// suspended) against every kind of request, under every combination of options.
@Suite("StateMachine: TransitionRules", .offThePool)
struct TransitionRulesTests {
    /// `u` is never registered.
    enum R: String, Hashable, Sendable, CaseIterable, CustomStringConvertible {
        case a, b, c, g, gf, gb, f, barred, barredOff, dyn, s, u
        var description: String { rawValue }
    }

    static let machineName = "rules"

    /// a (initial) → b, f, barred, dyn · b → a, c · c → a · g global → a · gf global final ·
    /// gb global with a barrier · f final · barred (barrier) → a · barredOff (barrier, allowed from
    /// nowhere) · dyn (dynamic) → a · s (allowed from nowhere: a suspension state).
    static func makeTable(_ options: StateMachineOptions) throws -> StateTable<R> {
        let definitions: [StateDefinition<R>] = [
            StateDefinition(.a, allowedTransitions: .b, .f, .barred, .dyn),
            StateDefinition(.b, allowedTransitions: .a, .c),
            StateDefinition(.c, allowedTransitions: .a),
            StateDefinition(.g, allowedTransitions: .a).makeGlobal(),
            StateDefinition(.gf).makeGlobal().makeFinal(),
            StateDefinition(.gb).makeGlobal().withTransitionBarrier { _ in .allow },
            StateDefinition(.f).makeFinal(),
            StateDefinition(.barred, allowedTransitions: .a).withTransitionBarrier { _ in .deny },
            StateDefinition(.barredOff).withTransitionBarrier { _ in .deny },
            StateDefinition(.dyn, allowedTransitions: .a).withDynamicTransition { .a },
            StateDefinition(.s),
        ]
        return try StateTable(name: machineName, options: options, definitions: definitions,
                              beforeTransition: nil, afterTransition: nil)
    }

    /// Where the rules are when the request is made.
    enum Situation: Sendable, CustomStringConvertible {
        case inState(R)
        case suspended(in: R, from: R)

        var current: R {
            switch self {
            case .inState(let state), .suspended(in: let state, from: _): state
            }
        }

        var description: String {
            switch self {
            case .inState(let state): "in \(state)"
            case .suspended(let state, let from): "suspended in \(state) from \(from)"
            }
        }
    }

    /// Builds rules in `situation` by committing plans (the only way the state changes).
    static func makeRules(_ situation: Situation, _ options: StateMachineOptions = []) throws -> TransitionRules<R> {
        let table = try makeTable(options)
        var rules = TransitionRules(table: table)
        func index(_ state: R) -> Int { table.index(of: state)! }
        switch situation {
        case .inState(let state):
            if state != .a { rules.commit(.init(from: 0, to: index(state), cause: .transition)) }
        case .suspended(let state, let from):
            if from != .a { rules.commit(.init(from: 0, to: index(from), cause: .transition)) }
            rules.commit(.init(from: index(from), to: index(state), cause: .suspend))
        }
        return rules
    }

    enum Request: Sendable, CustomStringConvertible {
        case to(R), dynamic, suspend(R), resume, reset

        var kind: RequestKind<R> {
            switch self {
            case .to(let target): .transition(to: target)
            case .dynamic: .dynamic
            case .suspend(let target): .suspend(to: target)
            case .resume: .resume
            case .reset: .reset
            }
        }

        var description: String {
            switch self {
            case .to(let target): "transition to \(target)"
            case .dynamic: "dynamic"
            case .suspend(let target): "suspend to \(target)"
            case .resume: "resume"
            case .reset: "reset"
            }
        }
    }

    /// A `Step` (not `Equatable`) reduced to states, for comparison.
    enum Expect: Equatable, Sendable, CustomStringConvertible {
        case ignore
        case fail(StateMachineErrorCode, target: R?)
        case barrier(R)
        case pickDynamic
        case perform(R, R, StateTransition<R>.Cause)

        var description: String {
            switch self {
            case .ignore: "ignore"
            case .fail(let code, let target): "fail(\(code), target: \(target.map { "\($0)" } ?? "nil"))"
            case .barrier(let target): "consultBarrier(\(target))"
            case .pickDynamic: "pickDynamicTarget"
            case .perform(let from, let to, let cause): "perform(\(from) -> \(to), \(cause))"
            }
        }
    }

    /// Reduces `step`, checking that an error names the machine and the current state.
    static func summary(_ step: TransitionRules<R>.Step, _ rules: TransitionRules<R>,
                        sourceLocation: SourceLocation = #_sourceLocation) -> Expect {
        let table = rules.table
        switch step {
        case .ignore:
            return .ignore
        case .fail(let error):
            #expect(error.machineName == machineName, sourceLocation: sourceLocation)
            #expect(error.state == table.state(at: rules.current), sourceLocation: sourceLocation)
            #expect(!error.message.isEmpty, sourceLocation: sourceLocation)
            return .fail(error.code, target: error.target)
        case .consultBarrier(let target):
            return .barrier(table.state(at: target))
        case .pickDynamicTarget:
            return .pickDynamic
        case .perform(let plan):
            return .perform(table.state(at: plan.from), table.state(at: plan.to), plan.cause)
        }
    }

    static let noOptions: StateMachineOptions = []
    static let both: StateMachineOptions = [.sameStateIsError, .finalStateIsError]
    static let all: [StateMachineOptions] = [noOptions, .sameStateIsError, .finalStateIsError, both]
    static let sameOff: [StateMachineOptions] = [noOptions, .finalStateIsError]
    static let sameOn: [StateMachineOptions] = [.sameStateIsError, both]
    static let finalOff: [StateMachineOptions] = [noOptions, .sameStateIsError]
    static let finalOn: [StateMachineOptions] = [.finalStateIsError, both]

    struct Row: Sendable, CustomTestStringConvertible {
        var situation: Situation
        var request: Request
        var options: [StateMachineOptions]
        var expected: Expect

        init(_ situation: Situation, _ request: Request, _ options: [StateMachineOptions], _ expected: Expect) {
            self.situation = situation
            self.request = request
            self.options = options
            self.expected = expected
        }

        var testDescription: String {
            "\(situation), \(request), options \(options.map(\.rawValue)) → \(expected)"
        }
    }

    static let requestRows: [Row] = [
        // A normal current state, the initial one.
        Row(.inState(.a), .to(.u), all, .fail(.unknownState, target: .u)),
        Row(.inState(.a), .to(.a), sameOff, .ignore),
        Row(.inState(.a), .to(.a), sameOn, .fail(.alreadyInState, target: .a)),
        Row(.inState(.a), .to(.b), all, .perform(.a, .b, .transition)),
        Row(.inState(.a), .to(.c), all, .fail(.illegalTransition, target: .c)),
        Row(.inState(.a), .to(.s), all, .fail(.illegalTransition, target: .s)),
        Row(.inState(.a), .to(.g), all, .perform(.a, .g, .transition)),
        Row(.inState(.a), .to(.gf), all, .perform(.a, .gf, .transition)),
        Row(.inState(.a), .to(.f), all, .perform(.a, .f, .transition)),
        Row(.inState(.a), .to(.barred), all, .barrier(.barred)),
        // The barrier comes before the allowed check: a target not allowed is still asked.
        Row(.inState(.a), .to(.barredOff), all, .barrier(.barredOff)),
        // A global state's barrier is consulted too.
        Row(.inState(.a), .to(.gb), all, .barrier(.gb)),
        Row(.inState(.a), .dynamic, all, .fail(.dynamicTransitionNotDefined, target: nil)),
        Row(.inState(.a), .suspend(.u), all, .fail(.unknownState, target: .u)),
        Row(.inState(.a), .suspend(.f), all, .fail(.finalState, target: .f)),
        Row(.inState(.a), .suspend(.gf), all, .fail(.finalState, target: .gf)),
        Row(.inState(.a), .suspend(.a), all, .ignore),
        Row(.inState(.a), .suspend(.s), all, .perform(.a, .s, .suspend)),
        // Suspending bypasses the allowed transitions and the barriers.
        Row(.inState(.a), .suspend(.c), all, .perform(.a, .c, .suspend)),
        Row(.inState(.a), .suspend(.barredOff), all, .perform(.a, .barredOff, .suspend)),
        Row(.inState(.a), .resume, all, .ignore),
        Row(.inState(.a), .reset, all, .ignore),
        // A normal state that is not the initial one.
        Row(.inState(.b), .to(.a), all, .perform(.b, .a, .transition)),
        Row(.inState(.b), .to(.b), sameOff, .ignore),
        Row(.inState(.b), .to(.b), sameOn, .fail(.alreadyInState, target: .b)),
        Row(.inState(.b), .to(.f), all, .fail(.illegalTransition, target: .f)),
        Row(.inState(.b), .to(.gf), all, .perform(.b, .gf, .transition)),
        Row(.inState(.b), .dynamic, all, .fail(.dynamicTransitionNotDefined, target: nil)),
        Row(.inState(.b), .suspend(.s), all, .perform(.b, .s, .suspend)),
        Row(.inState(.b), .resume, all, .ignore),
        Row(.inState(.b), .reset, all, .perform(.b, .a, .reset)),
        // A global current state: being global says nothing about where it may go.
        Row(.inState(.g), .to(.a), all, .perform(.g, .a, .transition)),
        Row(.inState(.g), .to(.b), all, .fail(.illegalTransition, target: .b)),
        Row(.inState(.g), .to(.g), sameOff, .ignore),
        Row(.inState(.g), .to(.g), sameOn, .fail(.alreadyInState, target: .g)),
        Row(.inState(.g), .to(.gf), all, .perform(.g, .gf, .transition)),
        Row(.inState(.g), .reset, all, .perform(.g, .a, .reset)),
        // A state with a dynamic transition; the rows `.to(...)` are what the picked target leads to.
        Row(.inState(.dyn), .dynamic, all, .pickDynamic),
        Row(.inState(.dyn), .to(.a), all, .perform(.dyn, .a, .transition)),
        Row(.inState(.dyn), .to(.b), all, .fail(.illegalTransition, target: .b)),
        Row(.inState(.dyn), .to(.u), all, .fail(.unknownState, target: .u)),
        Row(.inState(.dyn), .to(.dyn), sameOff, .ignore),
        Row(.inState(.dyn), .to(.dyn), sameOn, .fail(.alreadyInState, target: .dyn)),
        Row(.inState(.dyn), .to(.g), all, .perform(.dyn, .g, .transition)),
        Row(.inState(.dyn), .to(.barred), all, .barrier(.barred)),
        // A final state: the final check comes before registration, same state and globals.
        Row(.inState(.f), .to(.b), finalOff, .ignore),
        Row(.inState(.f), .to(.b), finalOn, .fail(.finalState, target: .b)),
        Row(.inState(.f), .to(.u), finalOff, .ignore),
        Row(.inState(.f), .to(.u), finalOn, .fail(.finalState, target: .u)),
        Row(.inState(.f), .to(.f), finalOff, .ignore),
        Row(.inState(.f), .to(.f), finalOn, .fail(.finalState, target: .f)),
        Row(.inState(.f), .to(.g), finalOff, .ignore),
        Row(.inState(.f), .to(.g), finalOn, .fail(.finalState, target: .g)),
        Row(.inState(.f), .to(.gf), finalOff, .ignore),
        Row(.inState(.f), .to(.gf), finalOn, .fail(.finalState, target: .gf)),
        Row(.inState(.f), .to(.barred), finalOff, .ignore),
        Row(.inState(.f), .dynamic, finalOff, .ignore),
        Row(.inState(.f), .dynamic, finalOn, .fail(.finalState, target: nil)),
        Row(.inState(.f), .suspend(.s), all, .ignore),
        Row(.inState(.f), .suspend(.u), all, .fail(.unknownState, target: .u)),
        Row(.inState(.f), .suspend(.f), all, .fail(.finalState, target: .f)),
        Row(.inState(.f), .resume, all, .ignore),
        Row(.inState(.f), .reset, all, .perform(.f, .a, .reset)),
        // A global final state cannot be left either.
        Row(.inState(.gf), .to(.a), finalOff, .ignore),
        Row(.inState(.gf), .to(.a), finalOn, .fail(.finalState, target: .a)),
        Row(.inState(.gf), .to(.g), finalOn, .fail(.finalState, target: .g)),
        Row(.inState(.gf), .suspend(.s), all, .ignore),
        Row(.inState(.gf), .reset, all, .perform(.gf, .a, .reset)),
        // Suspended: every transition fails, before any other check.
        Row(.suspended(in: .s, from: .a), .to(.a), all, .fail(.suspended, target: .a)),
        Row(.suspended(in: .s, from: .a), .to(.s), all, .fail(.suspended, target: .s)),
        Row(.suspended(in: .s, from: .a), .to(.u), all, .fail(.suspended, target: .u)),
        Row(.suspended(in: .s, from: .a), .to(.g), all, .fail(.suspended, target: .g)),
        Row(.suspended(in: .s, from: .a), .to(.barred), all, .fail(.suspended, target: .barred)),
        Row(.suspended(in: .s, from: .a), .dynamic, all, .fail(.suspended, target: nil)),
        Row(.suspended(in: .s, from: .a), .suspend(.b), all, .ignore),
        Row(.suspended(in: .s, from: .a), .suspend(.s), all, .ignore),
        Row(.suspended(in: .s, from: .a), .suspend(.u), all, .fail(.unknownState, target: .u)),
        Row(.suspended(in: .s, from: .a), .suspend(.f), all, .fail(.finalState, target: .f)),
        Row(.suspended(in: .s, from: .a), .resume, all, .perform(.s, .a, .resume)),
        Row(.suspended(in: .s, from: .a), .reset, all, .perform(.s, .a, .reset)),
        Row(.suspended(in: .dyn, from: .b), .dynamic, all, .fail(.suspended, target: nil)),
        Row(.suspended(in: .dyn, from: .b), .resume, all, .perform(.dyn, .b, .resume)),
        Row(.suspended(in: .dyn, from: .b), .reset, all, .perform(.dyn, .a, .reset)),
        // Suspended in the initial state: a reset still ends the suspension.
        Row(.suspended(in: .a, from: .b), .to(.b), all, .fail(.suspended, target: .b)),
        Row(.suspended(in: .a, from: .b), .resume, all, .perform(.a, .b, .resume)),
        Row(.suspended(in: .a, from: .b), .reset, all, .perform(.a, .a, .reset)),
    ]

    @Test("preflight of each request in each situation", arguments: requestRows)
    func preflight(_ row: Row) throws {
        for options in row.options {
            let rules = try Self.makeRules(row.situation, options)
            let direct: TransitionRules<R>.Step = switch row.request {
            case .to(let target): rules.preflight(to: target)
            case .dynamic: rules.preflightDynamic()
            case .suspend(let target): rules.preflightSuspend(to: target)
            case .resume: rules.preflightResume()
            case .reset: rules.preflightReset()
            }
            #expect(Self.summary(direct, rules) == row.expected, "options \(options.rawValue)")
            #expect(Self.summary(rules.firstStep(for: row.request.kind), rules) == row.expected,
                    "firstStep, options \(options.rawValue)")
            // Preflight never changes anything.
            #expect(rules.table.state(at: rules.current) == row.situation.current)
        }
    }

    struct BarrierRow: Sendable, CustomTestStringConvertible {
        var current: R
        var target: R
        var response: BarrierResponse<R>
        var options: [StateMachineOptions]
        var expected: Expect

        var testDescription: String { "in \(current), barrier of \(target) answers \(response) → \(expected)" }
    }

    static let barrierRows: [BarrierRow] = [
        BarrierRow(current: .a, target: .barred, response: .allow, options: all, expected: .perform(.a, .barred, .transition)),
        // Allowing does not skip the allowed check.
        BarrierRow(current: .a, target: .barredOff, response: .allow, options: all,
                   expected: .fail(.illegalTransition, target: .barredOff)),
        BarrierRow(current: .b, target: .gb, response: .allow, options: all, expected: .perform(.b, .gb, .transition)),
        BarrierRow(current: .a, target: .barred, response: .deny, options: all, expected: .fail(.transitionDenied, target: .barred)),
        BarrierRow(current: .a, target: .barredOff, response: .deny, options: all,
                   expected: .fail(.transitionDenied, target: .barredOff)),
        BarrierRow(current: .a, target: .gb, response: .deny, options: all, expected: .fail(.transitionDenied, target: .gb)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .b), options: all, expected: .perform(.a, .b, .transition)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .c), options: all,
                   expected: .fail(.illegalTransition, target: .c)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .u), options: all,
                   expected: .fail(.unknownState, target: .u)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .a), options: sameOff, expected: .ignore),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .a), options: sameOn,
                   expected: .fail(.alreadyInState, target: .a)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .g), options: all, expected: .perform(.a, .g, .transition)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .gf), options: all, expected: .perform(.a, .gf, .transition)),
        // A redirect target's own barrier is not consulted: redirects never loop.
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .barred), options: all,
                   expected: .perform(.a, .barred, .transition)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .gb), options: all, expected: .perform(.a, .gb, .transition)),
        BarrierRow(current: .a, target: .barred, response: .redirect(to: .barredOff), options: all,
                   expected: .fail(.illegalTransition, target: .barredOff)),
        // A target that is not allowed may redirect to one that is.
        BarrierRow(current: .a, target: .barredOff, response: .redirect(to: .f), options: all, expected: .perform(.a, .f, .transition)),
        BarrierRow(current: .b, target: .barred, response: .redirect(to: .c), options: all, expected: .perform(.b, .c, .transition)),
    ]

    @Test("what a barrier's answer leads to", arguments: barrierRows)
    func barrierAnswered(_ row: BarrierRow) throws {
        for options in row.options {
            let rules = try Self.makeRules(.inState(row.current), options)
            #expect(Self.summary(rules.preflight(to: row.target), rules) == .barrier(row.target))
            let target = try #require(rules.table.index(of: row.target))
            #expect(Self.summary(rules.barrierAnswered(row.response, target: target), rules) == row.expected,
                    "options \(options.rawValue)")
        }
    }

    struct CanRow: Sendable, CustomTestStringConvertible {
        var situation: Situation
        var possible: Set<R>
        var testDescription: String { "\(situation) → \(possible.map(\.rawValue).sorted())" }
    }

    static let canRows: [CanRow] = [
        CanRow(situation: .inState(.a), possible: [.b, .f, .barred, .dyn, .g, .gf, .gb]),
        CanRow(situation: .inState(.b), possible: [.a, .c, .g, .gf, .gb]),
        CanRow(situation: .inState(.g), possible: [.a, .gf, .gb]),
        CanRow(situation: .inState(.dyn), possible: [.a, .g, .gf, .gb]),
        CanRow(situation: .inState(.s), possible: [.g, .gf, .gb]),
        CanRow(situation: .inState(.f), possible: []),
        CanRow(situation: .inState(.gf), possible: []),
        CanRow(situation: .suspended(in: .s, from: .a), possible: []),
        CanRow(situation: .suspended(in: .a, from: .b), possible: []),
    ]

    @Test("canTransition: the static checks only, never the barrier", arguments: canRows)
    func canTransition(_ row: CanRow) throws {
        for options in Self.all {
            let rules = try Self.makeRules(row.situation, options)
            let answered = Set(R.allCases.filter { rules.canTransition(to: $0) })
            #expect(answered == row.possible, "options \(options.rawValue)")
        }
    }

    @Test("a new rules value is in the initial state, not suspended")
    func initialRules() throws {
        let rules = try Self.makeRules(.inState(.a))
        #expect(rules.current == 0)
        #expect(!rules.isSuspended)
        #expect(rules.resumeTarget == nil)
    }

    @Test("commit: a transition moves, a suspend remembers, resume and reset forget")
    func commitEffects() throws {
        var rules = try Self.makeRules(.inState(.a))
        func plan(_ step: TransitionRules<R>.Step) throws -> TransitionRules<R>.Plan {
            guard case .perform(let plan) = step else {
                Issue.record("expected perform, got \(Self.summary(step, rules))")
                throw CancellationError()
            }
            return plan
        }
        let index = { (state: R) in rules.table.index(of: state)! }

        try rules.commit(plan(rules.preflight(to: .b)))
        #expect(rules.current == index(.b) && !rules.isSuspended && rules.resumeTarget == nil)

        try rules.commit(plan(rules.preflightSuspend(to: .s)))
        #expect(rules.current == index(.s) && rules.isSuspended && rules.resumeTarget == index(.b))

        try rules.commit(plan(rules.preflightResume()))
        #expect(rules.current == index(.b) && !rules.isSuspended && rules.resumeTarget == nil)
        #expect(Self.summary(rules.preflightResume(), rules) == .ignore)

        try rules.commit(plan(rules.preflightSuspend(to: .c)))
        #expect(rules.isSuspended && rules.resumeTarget == index(.b))
        try rules.commit(plan(rules.preflightReset()))
        #expect(rules.current == 0 && !rules.isSuspended && rules.resumeTarget == nil)
        #expect(Self.summary(rules.preflightReset(), rules) == .ignore)

        // After a reset the machine behaves as new: the transition that was refused is allowed again.
        try rules.commit(plan(rules.preflight(to: .f)))
        #expect(rules.current == index(.f))
        #expect(Self.summary(rules.preflight(to: .a), rules) == .ignore)
        try rules.commit(plan(rules.preflightReset()))
        #expect(rules.current == 0)
        #expect(Self.summary(rules.preflight(to: .b), rules) == .perform(.a, .b, .transition))
    }

    @Test("more than 64 states: the allowed-transition matrix spans several words per row")
    func manyStates() throws {
        let count = 130
        func allowed(_ state: Int) -> Set<Int> {
            Set([(state + 1) % count, (state + 64) % count, (state * 7 + 3) % count]).subtracting([state])
        }
        let global = count - 1
        var definitions = (0..<count).map { StateDefinition($0, allowedTransitions: Array(allowed($0)).sorted()) }
        definitions[global] = definitions[global].makeGlobal()
        let table = try StateTable(name: "many", options: [], definitions: definitions,
                                   beforeTransition: nil, afterTransition: nil)
        var mismatches: [String] = []
        for from in 0..<count {
            var rules = TransitionRules(table: table)
            if from != 0 { rules.commit(.init(from: 0, to: from, cause: .transition)) }
            for to in 0..<count + 2 {  // count and count + 1 are not registered
                let expected = to < count && to != from && (allowed(from).contains(to) || to == global)
                if rules.canTransition(to: to) != expected { mismatches.append("\(from) -> \(to)") }
                let performs = if case .perform = rules.preflight(to: to) { true } else { false }
                if performs != expected { mismatches.append("preflight \(from) -> \(to)") }
            }
        }
        #expect(mismatches.isEmpty)
    }

    @Test("error messages name the states involved")
    func errorMessages() throws {
        let inA = try Self.makeRules(.inState(.a))
        guard case .fail(let illegal) = inA.preflight(to: .c) else { Issue.record("expected a failure"); return }
        #expect(illegal.message == "a cannot go to c (allowed: b, f, barred, dyn)")
        #expect(illegal.state == .a && illegal.target == .c)

        let inS = try Self.makeRules(.inState(.s))
        guard case .fail(let none) = inS.preflight(to: .a) else { Issue.record("expected a failure"); return }
        #expect(none.message == "s cannot go to a (allowed: none)")

        guard case .fail(let unknown) = inA.preflight(to: .u) else { Issue.record("expected a failure"); return }
        #expect(unknown.message.contains("u"))

        let suspended = try Self.makeRules(.suspended(in: .s, from: .a))
        guard case .fail(let refused) = suspended.preflight(to: .a) else { Issue.record("expected a failure"); return }
        #expect(refused.message.contains("suspended in s"))
        #expect(refused.state == .s)
    }
}
