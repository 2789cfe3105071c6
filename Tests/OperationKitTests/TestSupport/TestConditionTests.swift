// Tests of the test kit's TestCondition: answers at once or by the test, counts evaluations,
// produces a dependency per procedure, waits for its own dependencies, and keeps its identity.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("TestSupport: TestCondition", .offThePool)
struct TestConditionTests {
    @Test("answers at once: satisfied runs the procedure, failed cancels it with the error; one evaluation each")
    func answersAtOnce() async throws {
        let queue = try ConcurrentOperationQueue(name: "kit-condition-at-once", maxConcurrentOperationCount: 2)
        let yes = TestCondition(name: "yes")
        let no = TestCondition(name: "no", result: .failed(TestError(7)))
        let runs = TestProcedure(name: "runs")
        let refused = TestProcedure(name: "refused")
        try runs.addCondition(yes)
        try refused.addCondition(no)
        try queue.addOperations([runs, refused], waitUntilFinished: false)
        await expectFinished(runs)
        await expectCancelled(refused, errors: .equal(to: [TestError(7)]))
        #expect(yes.evaluationCount == 1 && no.evaluationCount == 1)
        #expect(runs.executeCount == 1 && refused.executeCount == 0)
        #expect(yes.waitingCount == 0 && yes.name == "yes")
    }

    @Test("answered by the test: the procedure waits in its evaluation; an answer given early is kept")
    func answeredByTheTest() async throws {
        let queue = try ConcurrentOperationQueue(name: "kit-condition-by-test", maxConcurrentOperationCount: 1)
        let condition = TestCondition(answering: .byTest)
        let procedure = TestProcedure(name: "held")
        try procedure.addCondition(condition)
        try queue.addOperation(procedure)
        #expect(await condition.evaluating.opened(within: .seconds(30)))
        #expect(condition.waitingCount == 1 && procedure.executeCount == 0)
        condition.answer()
        await expectFinished(procedure)
        #expect(condition.waitingCount == 0)

        let early = TestCondition(answering: .byTest)
        early.answer(.ignored)                            // before anyone asks
        let skipped = TestProcedure(name: "skipped")
        try skipped.addCondition(early)
        try queue.addOperation(skipped)
        await expectCancelled(skipped, errors: .empty)
        #expect(early.evaluationCount == 1 && skipped.executeCount == 0)
    }

    @Test("cancelled while its condition is being evaluated: the late answer does not run it")
    func cancelledWhileEvaluating() async throws {
        let queue = try ConcurrentOperationQueue(name: "kit-condition-cancel", maxConcurrentOperationCount: 1)
        let condition = TestCondition(answering: .byTest)
        let procedure = TestProcedure(name: "cancelled")
        try procedure.addCondition(condition)
        try queue.addOperation(procedure)
        #expect(await condition.evaluating.opened(within: .seconds(30)))
        procedure.cancel()
        condition.answer()
        await expectCancelled(procedure)
        #expect(procedure.executeCount == 0 && condition.evaluationCount == 1)
    }

    @Test("produces a new dependency for each procedure, and is evaluated after it")
    func producesADependency() async throws {
        let queue = try ConcurrentOperationQueue(name: "kit-condition-produces", maxConcurrentOperationCount: 2)
        let order = Recorder<String>()
        let condition = TestCondition(name: "signed in", produces: { ClosureOperation(name: "sign in") { order.record("sign in") } })
        let first = TestProcedure(name: "first")
        let second = TestProcedure(name: "second")
        try first.addCondition(condition)
        try second.addCondition(condition)
        try queue.addOperations([first, second], waitUntilFinished: false)
        await expectFinished(first)
        await expectFinished(second)
        #expect(condition.producedDependencies.count == 2)
        #expect(condition.producedDependencies.allSatisfy { $0.isFinished })
        #expect(order.values == ["sign in", "sign in"])
        #expect(condition.evaluationCount == 2)
    }

    @Test("waits for its own dependencies; the same object given twice is evaluated once")
    func dependenciesAndIdentity() async throws {
        let queue = try ConcurrentOperationQueue(name: "kit-condition-identity", maxConcurrentOperationCount: 2)
        let gate = Gate()
        let token = TestProcedure(name: "token", finishing: .whenOpened(gate))
        let condition = TestCondition(name: "fresh", dependencies: [token])
        let call = TestProcedure(name: "call")
        try call.addCondition(condition)
        try call.addCondition(condition)                          // the same object: kept once
        try call.addCondition(AllConditions([condition, condition]))
        #expect(call.conditionCount == 2)
        try queue.addOperations([call, token], waitUntilFinished: false)
        #expect(await token.executing.opened(within: .seconds(30)))
        #expect(condition.evaluationCount == 0)                   // waits for the token
        gate.open()
        await expectFinished(call)
        #expect(condition.evaluationCount == 2)                   // once alone, once in the compound
        #expect(condition.dependencies.count == 1)
    }
}
