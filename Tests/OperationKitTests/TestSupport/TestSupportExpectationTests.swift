// Tests of the test kit's Swift Testing helpers: finished(within:), expectFinished,
// expectCancelled and expectValue pass for good cases and record an issue for bad ones.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("TestSupport: Swift Testing helpers", .offThePool)
struct TestSupportExpectationTests {
    static func queue(_ name: String) throws -> ConcurrentOperationQueue {
        try ConcurrentOperationQueue(name: "kit-\(name)", maxConcurrentOperationCount: 2)
    }

    @Test("finished(within:) returns once the operation finished")
    func finishedWithinReturns() async throws {
        let queue = try Self.queue("finished")
        let procedure = TestProcedure(name: "quick", output: 1)
        try queue.addOperation(procedure)
        try await procedure.finished(within: .seconds(30))
        #expect(procedure.isFinished)
        try await procedure.finished(within: .seconds(30))  // again, after the fact
    }

    @Test("finished(within:) throws timedOut naming the operation, and leaves it untouched")
    func finishedWithinTimesOut() async throws {
        let queue = try Self.queue("timeout")
        let gate = Gate()
        let procedure = TestProcedure(name: "held", output: 1, finishing: .whenOpened(gate))
        try queue.addOperation(procedure)
        #expect(await procedure.executing.opened(within: .seconds(30)))
        let error = await #expect(throws: OperationError.self) {
            try await procedure.finished(within: .milliseconds(20))
        }
        #expect(error?.code == .timedOut)
        #expect(error?.operationNames == ["held"])
        #expect(!procedure.isCancelled && !procedure.isFinished)
        gate.open()
        await expectValue(procedure, equals: 1)
    }

    @Test("finished(within:) with a zero or negative timeout throws invalidTimeout")
    func finishedWithinInvalid() async throws {
        let procedure = TestProcedure(name: "never-added", output: 1)
        for timeout in [Duration.zero, .seconds(-1)] {
            let error = await #expect(throws: OperationError.self) { try await procedure.finished(within: timeout) }
            #expect(error?.code == .invalidTimeout)
        }
    }

    @Test("expectFinished passes for a success, and for the errors expected")
    func expectFinishedPasses() async throws {
        let queue = try Self.queue("expect-finished")
        let plain = ClosureOperation(name: "plain") {}
        let succeeds = TestProcedure(name: "succeeds")
        let fails = TestProcedure(name: "fails", error: TestError(1))
        let timesOut = TestProcedure(name: "times-out", error: OperationError(.timedOut, "late"))
        try queue.addOperations([plain, succeeds, fails, timesOut], waitUntilFinished: false)
        #expect(await expectFinished(plain))
        #expect(await expectFinished(succeeds))
        #expect(await expectFinished(fails, errors: .equal(to: [TestError(1)])))
        #expect(await expectFinished(fails, errors: .nonEmpty))
        #expect(await expectFinished(fails, errors: .count(1)))
        #expect(await expectFinished(timesOut, errors: .codes([.timedOut])))
        #expect(await expectFinished(timesOut, errors: .ignored))
    }

    @Test("expectFinished records an issue for errors, a cancel and a timeout")
    func expectFinishedFails() async throws {
        let queue = try Self.queue("expect-finished-bad")
        let fails = TestProcedure(name: "fails", error: TestError(2))
        let cancelled = TestProcedure(name: "cancelled")
        cancelled.cancel()
        let gate = Gate()
        let held = TestProcedure(name: "held", finishing: .whenOpened(gate))
        try queue.addOperations([fails, cancelled, held], waitUntilFinished: false)
        await withKnownIssue { #expect(await expectFinished(fails) == false) }
        await withKnownIssue { #expect(await expectFinished(cancelled) == false) }
        await withKnownIssue { #expect(await expectFinished(held, within: .milliseconds(20)) == false) }
        gate.open()
        #expect(await expectFinished(held))
    }

    @Test("expectCancelled passes for a cancelled operation and records an issue otherwise")
    func expectCancelledCases() async throws {
        let queue = try Self.queue("expect-cancelled")
        let before = TestProcedure(name: "before")
        before.cancel(with: TestError(4))
        let during = TestProcedure(name: "during", finishing: .byTest)
        during.finishesWhenCancelled = true
        let notCancelled = TestProcedure(name: "not-cancelled")
        try queue.addOperations([before, during, notCancelled], waitUntilFinished: false)
        #expect(await during.executing.opened(within: .seconds(30)))
        during.cancel()
        #expect(await expectCancelled(before))
        #expect(await expectCancelled(before, errors: .equal(to: [TestError(4)])))
        #expect(await expectCancelled(during, errors: .empty))
        #expect(during.executeCount == 1 && during.cancelCount == 1)
        await withKnownIssue { #expect(await expectCancelled(notCancelled) == false) }
    }

    @Test("expectValue passes for the value and records an issue for another value or none")
    func expectValueCases() async throws {
        let queue = try Self.queue("expect-value")
        let four = ClosureProcedure<Int>(name: "four") { 2 + 2 }
        let fails = TestProcedure(name: "fails", output: 4, error: TestError(5))
        let cancelled = TestProcedure(name: "cancelled", output: 4)
        cancelled.cancel()
        try queue.addOperations([four, fails, cancelled], waitUntilFinished: false)
        #expect(await expectValue(four, equals: 4))
        await expectFinished(fails, errors: .equal(to: [TestError(5)]))
        await withKnownIssue { #expect(await expectValue(four, equals: 5) == false) }
        await withKnownIssue { #expect(await expectValue(cancelled, equals: 4) == false) }
    }

    @Test("ExpectedErrors describes itself and matches as documented")
    func expectedErrors() {
        let errors: [any Error] = [TestError(1), OperationError(.timedOut, "x")]
        #expect(!ExpectedErrors.empty.matches(errors) && ExpectedErrors.empty.matches([]))
        #expect(ExpectedErrors.nonEmpty.matches(errors) && !ExpectedErrors.nonEmpty.matches([]))
        #expect(ExpectedErrors.count(2).matches(errors) && !ExpectedErrors.count(1).matches(errors))
        #expect(!ExpectedErrors.codes([.timedOut]).matches(errors))
        #expect(ExpectedErrors.codes([.timedOut]).matches(Array(errors.dropFirst())))
        #expect(!ExpectedErrors.equal(to: [TestError(1)]).matches(errors))
        #expect(ExpectedErrors.equal(to: [TestError(1)]).matches([TestError(1)]))
        #expect(ExpectedErrors("two") { $0.count == 2 }.matches(errors))
        #expect(ExpectedErrors.count(1).description == "1 error")
    }
}
