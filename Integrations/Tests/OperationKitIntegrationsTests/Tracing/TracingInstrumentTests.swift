// TracingInstrument against swift-distributed-tracing's InMemoryTracer, injected: span parents,
// the context bound around execute() (and inherited by a Task), times, outcomes, workflow tasks.

import InMemoryTracing
import OperationKit
@testable import OperationKitTracing
import OperationKitTestSupport
import Testing
import Tracing

@Suite("TracingInstrument")
struct TracingInstrumentTests {
    @Test("the span's parent is the context of the adder; execute() runs in the span's context")
    func parentAndBoundContext() throws {
        let tracer = InMemoryTracer()
        let instrument = TracingInstrument(tracer: tracer)
        let queue = ConcurrentOperationQueue(name: "jobs")
        let operation = ClosureOperation(name: "fetch") {}
        let timeline = Timeline()

        let request = tracer.startSpan("request")
        ServiceContext.withValue(request.context) {
            instrument.record(OperationEvent(.added, operation: operation, queue: queue, time: timeline.at(0)))
        }
        // The rest happens on a worker, where no context is bound.
        #expect(ServiceContext.current == nil)
        instrument.record(OperationEvent(.ready, operation: operation, queue: queue, time: timeline.at(1)))
        instrument.record(OperationEvent(.started, operation: operation, queue: queue, time: timeline.at(2)))
        var contextInExecute: InMemorySpanContext?
        instrument.run(operation) {
            contextInExecute = ServiceContext.current?.inMemorySpanContext
            tracer.startSpan("query").end()
        }
        #expect(ServiceContext.current == nil)
        instrument.record(OperationEvent(.finished(.succeeded), operation: operation, queue: queue, time: timeline.at(5)))
        request.end()

        let spans = tracer.finishedSpans
        let span = try #require(spans.first { $0.operationName == "fetch" })
        let query = try #require(spans.first { $0.operationName == "query" })
        #expect(span.traceID == request.traceID)
        #expect(span.parentSpanID == request.spanID)
        #expect(contextInExecute?.spanID == span.spanID)
        #expect(query.parentSpanID == span.spanID)
        #expect(span.endInstant.nanosecondsSinceEpoch - span.startInstant.nanosecondsSinceEpoch == 5_000_000)
        #expect(span.events.map(\.name) == ["ready", "started"])
        #expect(span.events.last.map { $0.nanosecondsSinceEpoch - span.startInstant.nanosecondsSinceEpoch } == 2_000_000)
        #expect(span.attributes.get("operationkit.operation") == .string("fetch"))
        #expect(span.attributes.get("operationkit.queue") == .string("jobs"))
        #expect(span.attributes.get("operationkit.outcome") == .string("succeeded"))
        #expect(span.status == nil)
        #expect(instrument.trackedCount == 0)
    }

    @Test("a Task created inside execute() inherits the span's context (an asynchronous operation's body)")
    func taskInheritsContext() async throws {
        let tracer = InMemoryTracer()
        let instrument = TracingInstrument(tracer: tracer)
        let operation = ClosureOperation(name: "async") {}
        instrument.record(OperationEvent(.added, operation: operation, queue: nil))
        instrument.record(OperationEvent(.started, operation: operation, queue: nil))
        var body: Task<String?, Never>?
        instrument.run(operation) {
            body = Task { ServiceContext.current?.inMemorySpanContext?.spanID }
        }
        let task = try #require(body)
        let seen = try #require(await outcome(within: .seconds(30)) { await task.value }).get()
        instrument.record(OperationEvent(.finished(.succeeded), operation: operation, queue: nil))
        let span = try #require(tracer.finishedSpans.first)
        #expect(seen == span.spanID)
        #expect(span.parentSpanID == nil)
    }

    @Test("a failure: errors recorded, status error with the first error; a cancellation leaves the status unset")
    func outcomes() throws {
        let tracer = InMemoryTracer()
        let instrument = TracingInstrument(tracer: tracer)
        tellLifecycle(of: ClosureOperation(name: "failing") {}, on: nil, to: instrument, outcome: .failed([TestFailure("boom"), TestFailure("bang")]))
        tellLifecycle(of: ClosureOperation(name: "cancelled") {}, on: nil, to: instrument, outcome: .cancelled([TestFailure("timed out")]))

        let failing = try #require(tracer.finishedSpans.first { $0.operationName == "failing" })
        #expect(failing.status == SpanStatus(code: .error, message: "boom"))
        #expect(failing.errors.map { "\($0.error)" } == ["boom", "bang"])
        #expect(failing.attributes.get("operationkit.outcome") == .string("failed"))
        let cancelled = try #require(tracer.finishedSpans.first { $0.operationName == "cancelled" })
        #expect(cancelled.status == nil)
        #expect(cancelled.errors.map { "\($0.error)" } == ["timed out"])
        #expect(cancelled.attributes.get("operationkit.outcome") == .string("cancelled"))
    }

    @Test("an operation started by hand gets its span when it starts; an unnamed one is named by its type")
    func startedByHand() throws {
        let tracer = InMemoryTracer()
        let instrument = TracingInstrument(tracer: tracer)
        let operation = ClosureOperation {}
        let caller = tracer.startSpan("caller")
        ServiceContext.withValue(caller.context) {
            instrument.record(OperationEvent(.started, operation: operation, queue: nil))
            instrument.run(operation) {}
            instrument.record(OperationEvent(.finished(.succeeded), operation: operation, queue: nil))
        }
        let span = try #require(tracer.finishedSpans.first)
        #expect(span.operationName == "ClosureOperation")
        #expect(span.parentSpanID == caller.spanID)
        #expect(span.attributes.get("operationkit.operation") == .string(operation.displayName))
        #expect(span.attributes.get("operationkit.queue") == nil)
    }

    @Test("procedure events become span events with attributes")
    func procedureEvents() throws {
        let tracer = InMemoryTracer()
        let instrument = TracingInstrument(tracer: tracer)
        let operation = ClosureOperation(name: "p") {}
        let kinds: [OperationEvent.Kind] = [
            .added, .conditionsEvaluated([(name: "Reachable", result: .satisfied)]), .exclusivityWaiting(["db"]),
            .exclusivityGranted(["db"]), .retrying(attempt: 2, delay: .milliseconds(100)),
            .produced(ClosureOperation(name: "child") {}), .cancelled, .finished(.cancelled([])),
        ]
        for kind in kinds { instrument.record(OperationEvent(kind, operation: operation, queue: nil)) }
        let span = try #require(tracer.finishedSpans.first)
        #expect(span.events.map(\.name) == [
            "conditions evaluated", "exclusivity waiting", "exclusivity granted", "retrying", "produced", "cancelled",
        ])
        #expect(span.events[0].attributes.get("operationkit.condition.Reachable") == .string("satisfied"))
        #expect(span.events[1].attributes.get("operationkit.categories") == .stringArray(["db"]))
        #expect(span.events[3].attributes.get("operationkit.attempt") == .int64(2))
        #expect(span.events[3].attributes.get("operationkit.delay_ms") == .double(100))
        #expect(span.events[4].attributes.get("operationkit.produced") == .string("child"))
    }

    @Test("a span per workflow task run, parented where the task was first seen, ended with the outcome")
    func workflowTasks() throws {
        let tracer = InMemoryTracer()
        let instrument = TracingInstrument(tracer: tracer)
        let timeline = Timeline()
        let task = WorkflowTask(name: "compile")
        func tell(_ from: WorkflowTaskState, _ to: WorkflowTaskState, at milliseconds: Int, error: (any Error)? = nil) {
            instrument.record(WorkflowTaskEvent(task: task, workflowName: "ci", from: from, to: to, error: error, time: timeline.at(milliseconds)))
        }
        let build = tracer.startSpan("build")
        ServiceContext.withValue(build.context) { tell(.ready, .pending, at: 0) }  // added with a prerequisite
        tell(.pending, .ready, at: 1)
        tell(.ready, .executing, at: 1)
        tell(.executing, .failed, at: 4, error: TestFailure("syntax"))
        let retrier = tracer.startSpan("retrier")
        ServiceContext.withValue(retrier.context) {
            tell(.failed, .pending, at: 10)
            tell(.pending, .ready, at: 10)
            tell(.ready, .executing, at: 10)
        }
        tell(.executing, .finished, at: 12)

        let runs = tracer.finishedSpans.filter { $0.operationName == "compile" }
        try #require(runs.count == 2)
        #expect(runs[0].parentSpanID == build.spanID)
        #expect(runs[0].status == SpanStatus(code: .error, message: "syntax"))
        #expect(runs[0].attributes.get("operationkit.outcome") == .string("failed"))
        #expect(runs[0].attributes.get("operationkit.workflow") == .string("ci"))
        #expect(runs[0].endInstant.nanosecondsSinceEpoch - runs[0].startInstant.nanosecondsSinceEpoch == 3_000_000)
        #expect(runs[1].parentSpanID == retrier.spanID)
        #expect(runs[1].status == nil)
        #expect(runs[1].attributes.get("operationkit.outcome") == .string("succeeded"))
        #expect(instrument.trackedCount == 0)
    }

    @Test("a state machine transition is an event of the current span")
    func stateMachines() throws {
        let tracer = InMemoryTracer()
        let instrument = TracingInstrument(tracer: tracer)
        let span = tracer.startSpan("connection")
        ServiceContext.withValue(span.context) {
            instrument.record(StateMachineEvent(machineName: "connection", from: "idle", to: "connecting"))
        }
        instrument.record(StateMachineEvent(machineName: "connection", from: "connecting", to: "open"))  // no span: ignored
        span.end()
        let finished = try #require(tracer.finishedSpans.first)
        #expect(finished.events.map(\.name) == ["state machine transition"])
        #expect(finished.events.first?.attributes.get("operationkit.to") == .string("connecting"))
    }
}
