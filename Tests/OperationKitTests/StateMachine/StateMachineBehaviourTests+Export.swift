import OperationKit
import OperationKitTestSupport
import Testing

/// Graph export, errors and value descriptions.
extension StateMachineBehaviourTests {
    /// Idle → "Running job", "3rd" · "Running job" → Idle, Error · "3rd" → `a"b\c` ·
    /// `a"b\c` · "Running-job" → Idle · Error (global, final). The labels exercise Mermaid's
    /// identifier sanitising (space, leading digit, quote, backslash, a clash) and DOT's escaping.
    static func exportMachine() throws -> StateMachine<String> {
        try StateMachine<String>(name: #"my "machine""#) {
            StateDefinition("Idle", allowedTransitions: "Running job", "3rd")
            StateDefinition("Running job", allowedTransitions: "Idle", "Error")
            StateDefinition("3rd", allowedTransitions: #"a"b\c"#)
            StateDefinition(#"a"b\c"#)
            StateDefinition("Running-job", allowedTransitions: "Idle")
            StateDefinition("Error").makeGlobal().makeFinal()
        }
    }

    static let mermaidBody = #"""
        stateDiagram-v2
            state "Running job" as Running_job
            state "3rd" as s_3rd
            state "a'b\c" as a_b_c
            state "Running-job" as Running_job_2
            [*] --> Idle
            Idle --> Running_job
            Idle --> s_3rd
            Idle --> Error
            Running_job --> Idle
            Running_job --> Error
            s_3rd --> a_b_c
            s_3rd --> Error
            a_b_c --> Error
            Running_job_2 --> Idle
            Running_job_2 --> Error
            Error --> [*]
            note right of Error : global
        """#

    @Test("Mermaid export: sanitised unique ids, labels, initial and final markers, global edges and note")
    func mermaid() throws {
        let machine = try Self.exportMachine()
        #expect(machine.mermaidDiagram() == Self.mermaidBody + "\n")
        #expect(machine.mermaidDiagram(markingCurrentState: true) == Self.mermaidBody + "\n" + """
                classDef current font-weight:bold,stroke-width:3px
                class Idle current

            """)
        machine.requestTransition(to: "Running job", completion: nil)
        #expect(machine.mermaidDiagram(markingCurrentState: true).hasSuffix("""
                class Running_job current

            """))
        #expect(machine.mermaidDiagram() == Self.mermaidBody + "\n", "the unmarked diagram does not depend on the state")
    }

    static func dot(_ attributes: [String]) -> String {
        (#"""
        digraph "my \"machine\"" {
            rankdir=LR;
            node [shape=ellipse];
            "__initial" [shape=point];
            "__initial" -> "Idle";

        """# + attributes.map { "    \($0)\n" }.joined() + #"""
            "Idle" -> "Running job";
            "Idle" -> "3rd";
            "Idle" -> "Error" [style=dashed];
            "Running job" -> "Idle";
            "Running job" -> "Error";
            "3rd" -> "a\"b\\c";
            "3rd" -> "Error" [style=dashed];
            "a\"b\\c" -> "Error" [style=dashed];
            "Running-job" -> "Idle";
            "Running-job" -> "Error" [style=dashed];
        }

        """#)
    }

    @Test("DOT export: escaped names, initial point, double-circle final, dashed global edges, filled current")
    func graphviz() throws {
        let machine = try Self.exportMachine()
        #expect(machine.graphvizDOT() == Self.dot([#""Error" [shape=doublecircle];"#]))
        #expect(machine.graphvizDOT(markingCurrentState: true)
                    == Self.dot([#""Idle" [style=filled];"#, #""Error" [shape=doublecircle];"#]))
        machine.requestTransition(to: "Running job", completion: nil)
        #expect(machine.graphvizDOT(markingCurrentState: true)
                    == Self.dot([#""Running job" [style=filled];"#, #""Error" [shape=doublecircle];"#]))
        machine.requestTransition(to: "Error", completion: nil)
        #expect(machine.state == "Error")
        #expect(machine.graphvizDOT(markingCurrentState: true)
                    == Self.dot([#""Error" [shape=doublecircle, style=filled];"#]))
        #expect(machine.graphvizDOT() == Self.dot([#""Error" [shape=doublecircle];"#]))
    }

    /// A state that no transition leads to or from — typically the state a machine is suspended to
    /// (Machinus's background state) — is still one of the machine's states.
    @Test("every registered state appears in both exports, including one without edges")
    func exportsListEveryState() throws {
        let machine = try StateMachine<String>(name: "lonely") {
            StateDefinition("idle", allowedTransitions: "busy")
            StateDefinition("busy", allowedTransitions: "idle")
            StateDefinition("background")
            StateDefinition("in background")
        }
        #expect(machine.suspendOutcome(to: "background")?.successValue == StateTransition(
            from: "idle", to: "background", cause: .suspend))
        let mermaid = machine.mermaidDiagram()
        let dot = machine.graphvizDOT()
        // A label that needs sanitising is declared, so it appears...
        #expect(mermaid.contains("in_background"))
        #expect(dot.contains(#""in background""#))
        // ...and so must one that does not.
        #expect(mermaid.split(separator: "\n").contains { $0.split(separator: " ").contains("background") },
                "Mermaid diagram omits the state 'background':\n\(mermaid)")
        #expect(dot.contains(#""background""#), "DOT graph omits the state 'background':\n\(dot)")
        // The current state is marked even when it has no edge.
        #expect(machine.mermaidDiagram(markingCurrentState: true).contains("class background current"))
        #expect(machine.graphvizDOT(markingCurrentState: true).contains(#""background" [style=filled];"#))
    }

    @Test("DOT: a state described as __initial is not merged with the start point")
    func dotStartPointName() throws {
        let machine = try StateMachine<String>(name: "start") {
            StateDefinition("__initial", allowedTransitions: "next")
            StateDefinition("next")
        }
        let dot = machine.graphvizDOT()
        #expect(!dot.contains(#""__initial" -> "__initial";"#), "the start point and the state share a node:\n\(dot)")
    }

    // MARK: Errors and descriptions

    @Test("an error's description has its code, the machine's name and the message")
    func errorDescription() throws {
        let machine = try StateMachine<Phase>(name: "describer") {
            StateDefinition(.a, allowedTransitions: .b)
            StateDefinition(.b)
            StateDefinition(.c)
        }
        let error = try #require(machine.outcome(to: .c)?.failureValue)
        #expect(error.description == "StateMachineError.illegalTransition [describer]: a cannot go to c (allowed: b)")
        #expect("\(error.code)" == "illegalTransition")
        let codes: [StateMachineErrorCode] = [.alreadyInState, .transitionDenied, .illegalTransition,
                                              .dynamicTransitionNotDefined, .finalState, .unknownState, .suspended,
                                              .duplicateState, .finalStateWithExits, .finalStateWithLeavingActions,
                                              .tooFewStates]
        #expect(codes.map(\.description) == ["alreadyInState", "transitionDenied", "illegalTransition",
                                             "dynamicTransitionNotDefined", "finalState", "unknownState", "suspended",
                                             "duplicateState", "finalStateWithExits", "finalStateWithLeavingActions",
                                             "tooFewStates"])
        #expect(Set(codes).count == codes.count)
    }

    @Test("errors are equal when code, machine, state and target are; the message does not count")
    func errorEquality() {
        typealias E = StateMachineError<Phase>
        let base = E(.illegalTransition, machine: "m", state: .a, target: .b, "one message")
        let sameButMessage = E(.illegalTransition, machine: "m", state: .a, target: .b, "another message")
        #expect(base == sameButMessage)
        #expect(base.hashValue == sameButMessage.hashValue)
        #expect(Set([base, sameButMessage]).count == 1)
        #expect(base != E(.transitionDenied, machine: "m", state: .a, target: .b, "one message"))
        #expect(base != E(.illegalTransition, machine: "n", state: .a, target: .b, "one message"))
        #expect(base != E(.illegalTransition, machine: "m", state: .c, target: .b, "one message"))
        #expect(base != E(.illegalTransition, machine: "m", state: .a, target: .c, "one message"))
        #expect(base != E(.illegalTransition, machine: "m", state: .a, target: nil, "one message"))
        #expect(base != E(.illegalTransition, machine: "m", state: nil, target: .b, "one message"))
        #expect(base.message == "one message" && base.code == .illegalTransition && base.machineName == "m")
    }

    @Test("StateTransition describes itself as from -> to, with the cause unless a plain transition")
    func transitionDescription() {
        #expect("\(StateTransition<Phase>(from: .a, to: .b))" == "a -> b")
        #expect(StateTransition<Phase>(from: .a, to: .b).cause == .transition)
        #expect("\(StateTransition<Phase>(from: .c, to: .a, cause: .reset))" == "c -> a (reset)")
        #expect("\(StateTransition<Phase>(from: .a, to: .d, cause: .suspend))" == "a -> d (suspend)")
        #expect("\(StateTransition<Phase>(from: .d, to: .a, cause: .resume))" == "d -> a (resume)")
        #expect(StateTransition<Phase>(from: .a, to: .b) != StateTransition(from: .a, to: .b, cause: .reset))
    }
}
