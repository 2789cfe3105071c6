// The three adapters told the lifecycles of many operations from many threads at once, as a
// queue's workers tell them: nothing lost, every side table empty afterwards.

import Dispatch
import InMemoryLogging
import InMemoryTracing
import Logging
import MetricsTestKit
import OperationKit
@testable import OperationKitLogging
@testable import OperationKitMetrics
@testable import OperationKitTracing
import Testing

@Suite("Adapters told events from many threads")
struct ConcurrentEventsTests {
    @Test("1,000 lifecycles told concurrently: counts add up, meters return to 0, tables empty")
    func manyThreads() throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "concurrent") { _ in handler }
        logger.logLevel = .debug
        let logging = LoggingInstrument(logger: logger)
        let metrics = TestMetrics()
        let metering = MetricsInstrument(factory: metrics)
        let tracer = InMemoryTracer()
        let tracing = TracingInstrument(tracer: tracer)
        let instrument = MultiplexInstrument([logging, metering, tracing])
        let queues = (0..<4).map { ConcurrentOperationQueue(name: "q\($0)") }

        DispatchQueue.concurrentPerform(iterations: 1000) { index in
            let operation = ClosureOperation(name: "op\(index)") {}
            let outcome: OperationOutcome = index % 10 == 0 ? .failed([TestFailure("\(index)")]) : .succeeded
            tellLifecycle(of: operation, on: queues[index % 4], to: instrument, outcome: outcome) {
                tracer.startSpan("inside").end()
            }
        }

        #expect(handler.entries.count == 2000)  // started and finished at .debug
        #expect(metrics.counterTotal(label: "operationkit_operations_finished_total") == 1000)
        #expect(metrics.counterTotal(label: "operationkit_operations_failed_total") == 100)
        for queue in queues {
            let dimensions = [("queue", queue.name!)]
            #expect(try metrics.expectCounter("operationkit_operations_started_total", dimensions).totalValue == 250)
            #expect(try metrics.expectMeter("operationkit_operations_pending", dimensions).lastValue == 0)
            #expect(try metrics.expectMeter("operationkit_operations_executing", dimensions).lastValue == 0)
            #expect(try metrics.expectTimer("operationkit_operation_execution_duration_seconds", dimensions).values.count == 250)
        }
        let spans = tracer.finishedSpans
        #expect(spans.count == 2000)
        let operationSpans = Dictionary(uniqueKeysWithValues: spans.filter { $0.operationName != "inside" }.map { ($0.spanID, $0) })
        #expect(operationSpans.count == 1000)
        #expect(spans.filter { $0.operationName == "inside" }.allSatisfy { operationSpans[$0.parentSpanID ?? ""] != nil })
        #expect(logging.trackedCount == 0)
        #expect(metering.trackedCount == 0)
        #expect(tracing.trackedCount == 0)
    }
}
