// Tests of the test kit's RecordingInstrument: the events it records from a queue, and the
// lifecycle check passing for real runs and failing for events out of order.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("TestSupport: RecordingInstrument", .offThePool, .exclusiveInstrumentation)
struct RecordingInstrumentTests {
    @Test("records a queue's events; its lifecycle check passes for real runs")
    func records() async throws {
        let queue = try ConcurrentOperationQueue(name: "kit-instrument", maxConcurrentOperationCount: 2)
        let instrument = RecordingInstrument()
        queue.instrument = instrument
        let plain = ClosureOperation(name: "plain") {}
        let cancelled = TestProcedure(name: "cancelled")
        cancelled.cancel()
        let failing = TestProcedure(name: "failing", error: TestError(1))
        try queue.addOperations([plain, cancelled, failing], waitUntilFinished: false)
        for operation in [plain, cancelled, failing] { try await operation.finished(within: .seconds(30)) }
        #expect(instrument.kinds(of: plain) == ["added", "ready", "started", "finished(succeeded)"])
        #expect(instrument.kinds(of: cancelled).last == "finished(cancelled)")
        #expect(instrument.kinds(of: failing).last == "finished(failed)")
        #expect(instrument.events(of: plain).allSatisfy { $0.queue === queue })
        #expect(instrument.lifecycleViolations(of: [plain, cancelled, failing]).isEmpty)
        #expect(instrument.expectValidLifecycles(of: [plain, cancelled, failing]))
        instrument.removeAll()
        #expect(instrument.events.isEmpty)
        queue.instrument = nil
    }

    @Test("the lifecycle check names the operation and what is wrong")
    func violations() {
        let instrument = RecordingInstrument()
        let operation = ClosureOperation(name: "odd") {}
        instrument.record(OperationEvent(.added, operation: operation, queue: nil))
        instrument.record(OperationEvent(.finished(.succeeded), operation: operation, queue: nil))
        instrument.record(OperationEvent(.started, operation: operation, queue: nil))
        let problems = instrument.lifecycleViolations(of: [operation])
        #expect(problems.count == 1)
        #expect(problems.first?.hasPrefix("#0 odd") == true)
        #expect(problems.first?.contains("finished is not last") == true)
        #expect(problems.first?.contains("started without ready") == true)
        withKnownIssue { #expect(instrument.expectValidLifecycles(of: [operation]) == false) }
    }

    @Test("wrap runs around execute()")
    func wraps() async throws {
        let wrapped = Recorder<String>()
        let instrument = RecordingInstrument(wrap: { operation, body in
            wrapped.record("before \(operation.displayName)")
            body()
            wrapped.record("after \(operation.displayName)")
        })
        let queue = try ConcurrentOperationQueue(name: "kit-instrument-wrap", maxConcurrentOperationCount: 1)
        queue.instrument = instrument
        let operation = ClosureOperation(name: "w") { wrapped.record("body") }
        try queue.addOperation(operation)
        await expectFinished(operation)
        #expect(wrapped.values == ["before w", "body", "after w"])
        queue.instrument = nil
    }
}
