// Tests of the test kit's direct condition checks: answer(of:for:within:) and expectAnswer.
import OperationKit
import OperationKitTestSupport
import Testing

/// Answers twice, to check that only the first answer counts.
private struct AnswersTwice: OperationCondition {
    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(.ignored)
        completion(.satisfied)
    }
}

@Suite("TestSupport: condition expectations", .offThePool)
struct ConditionExpectationTests {
    @Test("each answer is matched: satisfied, ignored, failed with the error expected")
    func answers() async {
        let procedure = TestProcedure(name: "asked about")
        #expect(await expectAnswer(of: ClosureCondition { _ in .satisfied }, for: procedure, is: .satisfied))
        #expect(await expectAnswer(of: ClosureCondition { _ in .ignored }, for: procedure, is: .ignored))
        let failing = TestCondition(result: .failed(TestError(3)))
        #expect(await expectAnswer(of: failing, for: procedure, is: .failed()))
        #expect(await expectAnswer(of: failing, for: procedure, is: .failed(.equal(to: [TestError(3)]))))
        #expect(failing.evaluationCount == 2)
        #expect(failing.producedDependencies.isEmpty)        // asked directly: nothing produced
        #expect(!procedure.isFinished && procedure.executeCount == 0)
    }

    @Test("an answer given later, from another thread, is waited for; only the first answer counts")
    func laterAndTwice() async {
        let procedure = TestProcedure()
        let byTest = TestCondition(answering: .byTest)
        let waiting = Task { await answer(of: byTest, for: procedure) }
        #expect(await byTest.evaluating.opened(within: .seconds(30)))
        byTest.answer(.ignored)
        let given = await waiting.value
        #expect(given.map { if case .ignored = $0 { true } else { false } } == true)
        #expect(await expectAnswer(of: AnswersTwice(), for: procedure, is: .ignored))
    }

    @Test("no answer in time, or another answer: an issue naming the condition")
    func failures() async {
        let procedure = TestProcedure()
        let silent = TestCondition(name: "silent", answering: .byTest)
        #expect(await answer(of: silent, for: procedure, within: .milliseconds(20)) == nil)
        await withKnownIssue {
            #expect(await expectAnswer(of: silent, for: procedure, is: .satisfied, within: .milliseconds(20)) == false)
        }
        await withKnownIssue {
            #expect(await expectAnswer(of: TestCondition(name: "yes"), for: procedure, is: .failed()) == false)
        }
        #expect(ExpectedAnswer.failed(.count(1)).description == "failed with \(ExpectedErrors.count(1))")
    }
}
