import OperationKit
import OperationKitTestSupport
import Testing

@Suite struct StateMachineSmokeTests {
    enum Connection: Hashable, Sendable { case disconnected, connecting, connected, backingOff, failed }

    @Test func actionOrderAndExport() async throws {
        let recorder = Recorder<String>()
        let machine = try StateMachine<Connection>(
            name: "connection",
            beforeTransition: { from, to in recorder.record("machine before \(from)->\(to)") },
            afterTransition: { from, to in recorder.record("machine after \(from)->\(to)") }
        ) {
            StateDefinition(.disconnected, allowedTransitions: .connecting)
                .beforeLeaving { recorder.record("disconnected beforeLeaving \($0)") }
                .afterLeaving { recorder.record("disconnected afterLeaving \($0)") }
            StateDefinition(.connecting, allowedTransitions: .connected, .backingOff)
                .beforeEntering { recorder.record("connecting beforeEntering \($0)") }
                .afterEntering { recorder.record("connecting afterEntering \($0)") }
            StateDefinition(.connected, allowedTransitions: .disconnected)
            StateDefinition(.backingOff, allowedTransitions: .connecting)
            StateDefinition(.failed).makeGlobal().makeFinal()
        }
        let observation = machine.observe { recorder.record("observer \($0)") }
        let change = try await machine.transition(to: .connecting)
        #expect(change == StateTransition(from: .disconnected, to: .connecting))
        #expect(recorder.values == [
            "machine before disconnected->connecting",
            "disconnected beforeLeaving connecting",
            "connecting beforeEntering disconnected",
            "disconnected afterLeaving connecting",
            "connecting afterEntering disconnected",
            "machine after disconnected->connecting",
            "observer disconnected -> connecting",
        ])
        observation.cancel()
        await #expect(throws: StateMachineError<Connection>.self) { try await machine.transition(to: .disconnected) }
        try await machine.transition(to: .failed)
        #expect(machine.state == .failed)
        #expect(try await machine.transition(to: .connecting) == nil)
        print(machine.mermaidDiagram())
        print(machine.graphvizDOT(markingCurrentState: true))
    }
}
