// Instruments around execute() — a task-local bound by run(_:_:) is seen by a closure operation's
// body and by an async operation's task — and workflow-task and state-machine transitions.

import OperationKit
import OperationKitTestSupport
import Testing

enum InstrumentContext {
    @TaskLocal static var value: String?
}

@Suite("Observability: run(_:_:) around execute(), workflow tasks and state machines", .offThePool, .exclusiveInstrumentation)
struct InstrumentRunAndTransitionTests {
    /// An instrument whose `run` binds the operation's name to `InstrumentContext.value`.
    static func bindingInstrument() -> RecordingInstrument {
        RecordingInstrument { operation, body in
            InstrumentContext.$value.withValue("context of \(operation.name ?? "?")") { body() }
        }
    }

    @Test("a task-local bound in run(_:_:) is visible in a closure operation's body and inside an async operation's body")
    func taskLocalAcrossTheHop() async throws {
        let queue = ConcurrentOperationQueue(name: "run-context")
        queue.instrument = Self.bindingInstrument()
        let seen = Recorder<String>()
        let closure = ClosureOperation(name: "closure") { seen.record("closure: \(InstrumentContext.value ?? "none")") }
        let first = AsyncOperation(name: "async1") { seen.record("async1: \(InstrumentContext.value ?? "none")") }
        // A chain of async operations: each must run in its own context (no runner chaining).
        let second = AsyncOperation(name: "async2") { seen.record("async2: \(InstrumentContext.value ?? "none")") }
        try second.addDependency(first)
        try queue.addOperations([closure, first, second], waitUntilFinished: false)
        #expect(await queue.waitUntilAllOperationsAreFinishedWithin())
        #expect(Set(seen.values) == [
            "closure: context of closure", "async1: context of async1", "async2: context of async2",
        ])
        #expect(InstrumentContext.value == nil)
    }

    @Test("without an instrument nothing is bound")
    func noInstrumentNoContext() async throws {
        let queue = ConcurrentOperationQueue(name: "run-no-context")
        queue.instrument = nil
        let seen = Recorder<String>()
        try queue.addOperation(ClosureOperation(name: "plain") { seen.record(InstrumentContext.value ?? "none") })
        #expect(await queue.waitUntilAllOperationsAreFinishedWithin())
        #expect(seen.values == ["none"])
    }

    @Test("workflow tasks: every transition told, with the workflow's name, in order")
    func workflowTransitions() throws {
        let workflow = Workflow(name: "instrumented")
        // The outcome may come before the last transition was told (it is told by the thread
        // that made it, after the workflow's lock): wait for the transitions themselves.
        let firstRound = Latch(count: 6)
        let secondRound = Latch(count: 10)
        let instrument = RecordingInstrument(onTaskEvent: { _ in
            firstRound.countDown()
            secondRound.countDown()
        })
        workflow.instrument = instrument
        #expect(workflow.instrument === instrument)
        let first = ClosureTask(name: "first") { run in run.finish(with: 1) }
        let second = ClosureTask(name: "second") { run in run.fail(with: InstrumentTestError(2)) }
        try workflow.add(first)
        try workflow.add(second, prerequisites: [first])
        workflow.start()
        #expect(firstRound.wait(timeout: operationTestTimeout))
        #expect(instrument.transitions(of: first) == ["ready>executing", "executing>finished"])
        #expect(instrument.transitions(of: second) == ["ready>pending", "pending>ready", "ready>executing", "executing>failed"])
        #expect(instrument.workflowTaskEvents.allSatisfy { $0.workflowName == "instrumented" })
        let failed = instrument.workflowTaskEvents.first { $0.to == .failed }
        #expect((failed?.error as? InstrumentTestError) == InstrumentTestError(2))

        second.retry()
        #expect(secondRound.wait(timeout: operationTestTimeout))
        #expect(instrument.transitions(of: second).dropFirst(4) == ["failed>pending", "pending>ready", "ready>executing", "executing>failed"])
    }

    @Test("state machine: every transition told after the state changed, with the states as text")
    func stateMachineTransitions() async throws {
        enum Light: Hashable, Sendable { case off, on }
        let instrument = RecordingInstrument()
        let machine = try StateMachine<Light>(name: "light") {
            StateDefinition(.off, allowedTransitions: .on)
            StateDefinition(.on, allowedTransitions: .off)
        }
        machine.instrument = instrument
        #expect(machine.instrument === instrument)
        _ = try await machine.transition(to: .on)
        _ = try await machine.transition(to: .off)
        #expect(instrument.stateMachineEvents.map { "\($0.machineName): \($0.from)>\($0.to)" } == [
            "light: off>on", "light: on>off",
        ])
    }
}
