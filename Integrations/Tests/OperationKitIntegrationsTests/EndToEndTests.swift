// The three adapters installed on real queues (the library tells the events): spans across the
// queue hop, metrics and log lines of real operations.

import InMemoryLogging
import InMemoryTracing
import Logging
import MetricsTestKit
import OperationKit
import OperationKitLogging
import OperationKitMetrics
import OperationKitTestSupport
import OperationKitTracing
import Synchronization
import Testing
import Tracing

/// Placed after an adapter in a `MultiplexInstrument`, it tells the test when the adapter has
/// recorded `count` finishes (of operations, or of workflow task runs: finished, failed or
/// cancelled). Awaited, not blocked on: a test that blocks a thread of the
/// cooperative pool could hold back an asynchronous operation's body.
final class FinishSignal: OperationInstrument {
    private let remaining: Atomic<Int>
    private let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    init(count: Int) {
        remaining = Atomic(count)
        (stream, continuation) = AsyncStream.makeStream(of: Void.self)
    }

    func record(_ event: OperationEvent) {
        guard case .finished = event.kind else { return }
        countDown()
    }

    func record(_ event: WorkflowTaskEvent) {
        switch event.to {
        case .finished, .failed, .cancelled: countDown()
        case .pending, .ready, .executing: break
        }
    }

    private func countDown() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { continuation.finish() }
    }

    /// Whether every finish was recorded within `timeout`.
    func wait(timeout: Duration = .seconds(30)) async -> Bool {
        let stream = stream
        return await outcome(within: timeout) {
            for await _ in stream {}
            return true
        } != nil
    }
}

@Suite("Adapters on a real queue")
struct EndToEndTests {
    @Test("tracing: the span's parent is the adder's context, execute() and an async body run in the span's context")
    func tracing() async throws {
        let tracer = InMemoryTracer()
        let finished = FinishSignal(count: 2)
        let queue = ConcurrentOperationQueue(name: "e2e-tracing")
        queue.instrument = MultiplexInstrument([TracingInstrument(tracer: tracer), finished])
        let seenInClosure = OperationKitTestSupport.Recorder<String?>()
        let closure = ClosureOperation(name: "closure") { seenInClosure.record(ServiceContext.current?.inMemorySpanContext?.spanID) }
        let async = AsyncOperation<String?>(name: "async") { ServiceContext.current?.inMemorySpanContext?.spanID }
        let request = tracer.startSpan("request")
        try ServiceContext.withValue(request.context) {
            try queue.addOperation(closure)
            try queue.addOperation(async)
        }
        #expect(await finished.wait())
        request.end()

        let spans = tracer.finishedSpans
        let closureSpan = try #require(spans.first { $0.operationName == "closure" })
        let asyncSpan = try #require(spans.first { $0.operationName == "async" })
        #expect(closureSpan.parentSpanID == request.spanID)
        #expect(asyncSpan.parentSpanID == request.spanID)
        #expect(seenInClosure.values == [closureSpan.spanID])
        #expect(async.output == asyncSpan.spanID)
        #expect(closureSpan.events.map(\.name).contains("started"))
    }

    @Test("workflow tasks: a span per run under the context that started the workflow, and the task counters")
    func workflowTasks() async throws {
        let tracer = InMemoryTracer()
        let metrics = TestMetrics()
        let finished = FinishSignal(count: 2)
        let workflow = Workflow(name: "e2e-workflow")
        workflow.instrument = MultiplexInstrument([
            TracingInstrument(tracer: tracer), MetricsInstrument(factory: metrics), finished,
        ])
        let compile = ClosureTask(name: "compile") { run in run.finish(with: nil) }
        let test = ClosureTask(name: "test") { run in run.fail(with: TestFailure("1 test failed")) }
        let request = tracer.startSpan("request")
        try ServiceContext.withValue(request.context) {
            try workflow.add(compile)
            try workflow.add(test, prerequisites: [compile])
            workflow.start()
        }
        #expect(await finished.wait())
        request.end()

        let compileSpan = try #require(tracer.finishedSpans.first { $0.operationName == "compile" })
        let testSpan = try #require(tracer.finishedSpans.first { $0.operationName == "test" })
        #expect(compileSpan.parentSpanID == request.spanID)
        #expect(testSpan.parentSpanID == request.spanID)
        #expect(compileSpan.status == nil)
        #expect(testSpan.status == SpanStatus(code: .error, message: "1 test failed"))
        #expect(testSpan.attributes.get("operationkit.workflow") == .string("e2e-workflow"))
        let dimensions = [("workflow", "e2e-workflow")]
        #expect(try metrics.expectCounter("operationkit_workflow_tasks_started_total", dimensions).totalValue == 2)
        #expect(try metrics.expectCounter("operationkit_workflow_tasks_finished_total", dimensions).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_workflow_tasks_failed_total", dimensions).totalValue == 1)
        #expect(try metrics.expectTimer("operationkit_workflow_task_run_duration_seconds", dimensions).values.count == 2)
    }

    @Test("metrics: counters, timers and meters of a named queue")
    func metrics() async throws {
        let metrics = TestMetrics()
        let finished = FinishSignal(count: 4)
        let queue = ConcurrentOperationQueue(name: "e2e-metrics")
        queue.instrument = MultiplexInstrument([MetricsInstrument(factory: metrics), finished])
        queue.isSuspended = true
        let operations = (0..<4).map { index in ClosureOperation(name: "op\(index)") {} }
        try queue.addOperations(operations, waitUntilFinished: false)
        operations[3].cancel()
        queue.isSuspended = false
        #expect(await finished.wait())

        let dimensions = [("queue", "e2e-metrics")]
        #expect(try metrics.expectCounter("operationkit_operations_added_total", dimensions).totalValue == 4)
        #expect(try metrics.expectCounter("operationkit_operations_started_total", dimensions).totalValue == 3)
        #expect(try metrics.expectCounter("operationkit_operations_finished_total", dimensions).totalValue == 4)
        #expect(try metrics.expectCounter("operationkit_operations_cancelled_total", dimensions).totalValue == 1)
        #expect(try metrics.expectTimer("operationkit_operation_execution_duration_seconds", dimensions).values.count == 3)
        #expect(try metrics.expectMeter("operationkit_operations_pending", dimensions).lastValue == 0)
        #expect(try metrics.expectMeter("operationkit_operations_executing", dimensions).lastValue == 0)
    }

    @Test("logging: a line per event of a real operation")
    func logging() async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "e2e") { _ in handler }
        logger.logLevel = .trace
        let finished = FinishSignal(count: 1)
        let queue = ConcurrentOperationQueue(name: "e2e-logging")
        queue.instrument = MultiplexInstrument([LoggingInstrument(logger: logger), finished])
        try queue.addOperation(ClosureOperation(name: "job") {})
        #expect(await finished.wait())

        let messages = handler.entries.map(\.message.description)
        #expect(messages.first == "operation added")
        #expect(messages.contains("operation started"))
        #expect(messages.last == "operation finished")
        #expect(handler.entries.allSatisfy { $0.metadata["queue"] == "e2e-logging" && $0.metadata["operation"] == "job" })
        #expect(handler.entries.last?.metadata["duration_ms"] != nil)
    }
}
