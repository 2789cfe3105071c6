import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 13 item 10: no synchronous and asynchronous API share a base name and argument labels.
/// The top-level trap itself is checked by the Connection example (top-level code exists only in
/// a `main.swift`); here, each async form is awaited and must wait and throw, and each renamed
/// synchronous form must return at once.
@Suite("Issue 13 item 10: sync/async twins", .offThePool)
struct SyncAsyncTwinsTests {
    enum Light: Hashable, Sendable { case off, on, broken }

    static func light() throws -> StateMachine<Light> {
        try StateMachine<Light>(name: "item 10") {
            StateDefinition(.off, allowedTransitions: .on)
            StateDefinition(.on, allowedTransitions: .off)
            StateDefinition(.broken)
        }
    }

    @Test("issue 13 item 10: the async forms are the plain names; they wait and throw")
    func asyncFormsWaitAndThrow() async throws {
        let machine = try Self.light()
        // The awaited form throws the refusal (the fire-and-forget twin used to drop it).
        await #expect(throws: StateMachineError<Light>.self) { try await machine.transition(to: .broken) }
        do {
            try await machine.transition(to: .broken)
            Issue.record("an illegal transition did not throw")
        } catch {
            #expect(error.code == .illegalTransition)  // typed: only the async form throws this type
        }
        #expect(try await machine.transition(to: .on) == StateTransition(from: .off, to: .on))
        #expect(try await machine.suspend(to: .broken) != nil)
        #expect(await machine.resume() != nil)
        #expect(await machine.reset() != nil)

        // The queue's and an operation's async waits suspend until the work is done.
        let queue = ConcurrentOperationQueue(name: "item 10")
        let gate = Gate()
        let done = AtomicCounter()
        let operation = ClosureOperation(name: "item 10") {
            _ = gate.wait()
            done.increment()
        }
        try queue.addOperation(operation)
        gate.open()
        let waited = await outcome(within: .seconds(20)) {
            await operation.waitUntilFinished()
            await queue.waitUntilAllOperationsAreFinished()
            return done.value
        }
        #expect((try? waited?.get()) == 1)
    }

    @Test("issue 13 item 10: the renamed synchronous forms return at once or block, as their names say")
    func renamedSynchronousForms() async throws {
        let machine = try Self.light()
        let outcomes = Recorder<String>()
        machine.requestTransition(to: .broken) { outcome in
            if case .failure(let error) = outcome { outcomes.record("\(error.code)") }
        }
        machine.requestTransition(to: .on)
        #expect(machine.state == .on)
        machine.requestSuspend(to: .broken)
        machine.requestResume()
        machine.requestReset()
        #expect(machine.state == .off)
        #expect(outcomes.values == ["\(StateMachineErrorCode.illegalTransition)"])

        let queue = ConcurrentOperationQueue(name: "item 10 blocking")
        let operation = ClosureOperation(name: "item 10 blocking") {}
        try queue.addOperation(operation)
        let blocked = await waitingOffThePool {
            operation.waitUntilFinishedBlocking(timeout: .seconds(20))
                && queue.waitUntilAllOperationsAreFinishedBlocking(timeout: .seconds(20))
        }
        #expect(blocked)
    }
}
