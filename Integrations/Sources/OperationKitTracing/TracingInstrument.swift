// TracingInstrument: an OperationInstrument that makes a swift-distributed-tracing span per
// operation, parented by the ServiceContext of the code that added it, bound while it executes.

import IntegrationSupport
import OperationKit
import Tracing

/// An ``OperationKit/OperationInstrument`` that traces operations and workflow tasks with
/// swift-distributed-tracing.
///
/// Install it on a queue (or a workflow, or as ``OperationKit/OperationInstrumentation/default``);
/// it uses the tracer it is given, or `InstrumentationSystem.tracer` (read for each span):
///
/// ```swift
/// queue.instrument = TracingInstrument()
/// ```
///
/// **A span per operation.** It starts when the operation is added — its parent is the
/// `ServiceContext` current on the thread or task that added it (the `added` event is told
/// there) — and ends when the operation finishes, so it covers the wait and the run; span events
/// mark `ready`, `started`, `cancelled`, the conditions' results, exclusivity waited and granted,
/// retries and produced operations. An operation started by hand (never added) gets its span
/// when it starts, from the context current there. The span is named by the operation's `name`,
/// or its type when it has none (span names stay few; the `operationkit.operation` attribute
/// holds the `displayName`), and has the attribute `operationkit.queue` and, when it ends,
/// `operationkit.outcome` (`succeeded`, `failed`, `cancelled`). Errors are recorded on the span;
/// a failed operation's status is `error`, with its first error as the message; a cancelled
/// one's status is left unset.
///
/// **The context crosses the queue hop.** ``run(_:_:)`` binds the span's context
/// (`ServiceContext.withValue`) around `execute()`, so spans started there — and in an
/// asynchronous operation's body, whose `Task` is created inside `execute()` and inherits the
/// binding — are children of the operation's span; so are the spans of operations added from
/// there.
///
/// **A span per workflow task run.** It starts when the task starts executing and ends when the
/// run finishes (status unset), fails (the error recorded, status `error`), is cancelled or is
/// reset (`operationkit.outcome` says which). Its parent is the context current where the task
/// was first seen — added with unfinished prerequisites, or started — or, after the task
/// finished, failed or was cancelled, where it was next retried or reset. Attributes:
/// `operationkit.workflow`, `operationkit.task`.
///
/// **State machine transitions** become events of the span of the current context, when the
/// tracer can find it (`Tracer.activeSpan(identifiedBy:)`).
///
/// Span times come from the events' monotonic times: the start of a span is placed on the
/// tracer's wall clock once, and later times of the span are that instant plus the monotonic
/// time since, so durations are exact.
public final class TracingInstrument: OperationInstrument {
    /// The tracer given at creation, or `nil` for `InstrumentationSystem.tracer`.
    private let givenTracer: (any Tracer)?
    /// The span of each operation added or started and not yet finished.
    private let operations = Locked<[ObjectIdentifier: SpanEntry]>([:])
    /// Each workflow task seen and not yet finished, failed or cancelled.
    let tasks = Locked<[ObjectIdentifier: TaskEntry]>([:])

    /// Creates an instrument.
    ///
    /// - Parameter tracer: The tracer; by default (`nil`) `InstrumentationSystem.tracer`, read
    ///   each time a span starts. Pass one to keep tests or several backends apart.
    public init(tracer: (any Tracer)? = nil) {
        givenTracer = tracer
    }

    /// The tracer to start a span with.
    var tracer: any Tracer { givenTracer ?? InstrumentationSystem.tracer }

    /// The number of operations and workflow tasks tracked (for tests).
    var trackedCount: Int { operations.withLock { $0.count } + tasks.withLock { $0.count } }

    // MARK: Operations

    /// Starts the operation's span (when it is added, or started by hand), adds a span event, or
    /// ends the span with the outcome.
    ///
    /// - Parameter event: The event.
    public func record(_ event: OperationEvent) {
        let id = ObjectIdentifier(event.operation)
        switch event.kind {
        case .added:
            let entry = startSpan(for: event)
            operations.withLock { $0[id] = entry }
        case .started:
            if let entry = operations.withLock({ $0[id] }) {
                entry.addEvent("started", at: event.time)
            } else {  // started by hand: never added
                let entry = startSpan(for: event)
                entry.addEvent("started", at: event.time)
                operations.withLock { $0[id] = entry }
            }
        case .finished(let outcome):
            guard let entry = operations.withLock({ $0.removeValue(forKey: id) }) else { return }
            let span = entry.span
            span.attributes["operationkit.outcome"] = outcome.description
            for error in outcome.errors {
                span.recordError(error, attributes: [:], at: entry.instant(event.time))
            }
            if case .failed(let errors) = outcome {
                span.setStatus(SpanStatus(code: .error, message: errors.first.map { String(describing: $0) }))
            }
            span.end(at: entry.instant(event.time))
        case .ready:
            addEvent("ready", to: id, at: event.time)
        case .cancelled:
            addEvent("cancelled", to: id, at: event.time)
        case .conditionsEvaluated(let results):
            var attributes = SpanAttributes()
            for (name, result) in results {
                let value: String =
                    switch result {
                    case .satisfied: "satisfied"
                    case .failed: "failed"
                    case .ignored: "ignored"
                    }
                attributes["operationkit.condition.\(name)"] = value
            }
            addEvent("conditions evaluated", to: id, at: event.time, attributes: attributes)
        case .exclusivityWaiting(let categories):
            addEvent(
                "exclusivity waiting", to: id, at: event.time,
                attributes: ["operationkit.categories": .stringArray(categories.sorted())])
        case .exclusivityGranted(let categories):
            addEvent(
                "exclusivity granted", to: id, at: event.time,
                attributes: ["operationkit.categories": .stringArray(categories.sorted())])
        case .retrying(let attempt, let delay):
            addEvent(
                "retrying", to: id, at: event.time,
                attributes: [
                    "operationkit.attempt": .int64(Int64(attempt)),
                    "operationkit.delay_ms": .double(delay / .milliseconds(1)),
                ])
        case .produced(let produced):
            addEvent(
                "produced", to: id, at: event.time,
                attributes: ["operationkit.produced": .string(produced.displayName)])
        }
    }

    /// Runs `body` — the operation's `execute()` — with its span's context bound as
    /// `ServiceContext.current`; as it is when the operation has no span.
    ///
    /// - Parameters:
    ///   - operation: The operation about to execute.
    ///   - body: Executes it.
    public func run(_ operation: ConcurrentOperation, _ body: () -> Void) {
        guard let context = operations.withLock({ $0[ObjectIdentifier(operation)]?.span.context }) else {
            return body()
        }
        ServiceContext.withValue(context, operation: body)
    }

    /// Starts the span of the operation of `event`, a child of the current context.
    private func startSpan(for event: OperationEvent) -> SpanEntry {
        let operation = event.operation
        let name = operation.name ?? String(describing: type(of: operation))
        let entry = SpanEntry.start(name, with: tracer, context: ServiceContext.current ?? .topLevel, at: event.time)
        entry.span.updateAttributes { attributes in
            attributes["operationkit.operation"] = operation.displayName
            if let queue = event.queue { attributes["operationkit.queue"] = queue.displayName }
        }
        return entry
    }

    /// Adds an event to the span of the operation `id`, if it has one.
    private func addEvent(
        _ name: String, to id: ObjectIdentifier, at time: ContinuousClock.Instant, attributes: SpanAttributes = [:]
    ) {
        operations.withLock { $0[id] }?.addEvent(name, at: time, attributes: attributes)
    }

    // MARK: State machines

    /// Adds a `state machine transition` event to the span of the current context, when the tracer
    /// finds it.
    ///
    /// - Parameter event: The transition.
    public func record(_ event: StateMachineEvent) {
        guard let context = ServiceContext.current, let span = tracer.activeSpan(identifiedBy: context) else { return }
        span.addEvent(
            SpanEvent(
                name: "state machine transition", at: DefaultTracerClock.now,
                attributes: [
                    "operationkit.machine": .string(event.machineName),
                    "operationkit.from": .string(event.from), "operationkit.to": .string(event.to),
                ]))
    }
}

/// A span and where its start lies on both clocks: a later monotonic time becomes the wall-clock
/// start plus the monotonic time since the start.
struct SpanEntry: Sendable {
    let span: any Span
    let start: ContinuousClock.Instant
    let wallStart: UInt64

    /// Starts a span at the monotonic time `time`, placed on the wall clock now.
    static func start(
        _ name: String, with tracer: any Tracer, context: ServiceContext, at time: ContinuousClock.Instant
    ) -> SpanEntry {
        let wallNow = DefaultTracerClock.now.nanosecondsSinceEpoch
        let sinceTime = nanoseconds(ContinuousClock.now - time)
        let wallStart = sinceTime >= 0 ? wallNow &- UInt64(sinceTime) : wallNow &+ UInt64(-sinceTime)
        let span = tracer.startSpan(
            name, context: context, ofKind: .internal,
            at: DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: wallStart))
        return SpanEntry(span: span, start: time, wallStart: wallStart)
    }

    /// `time` on the tracer's clock.
    func instant(_ time: ContinuousClock.Instant) -> DefaultTracerClock.Timestamp {
        let since = Self.nanoseconds(time - start)
        return DefaultTracerClock.Timestamp(
            nanosecondsSinceEpoch: since >= 0 ? wallStart &+ UInt64(since) : wallStart &- UInt64(-since))
    }

    func addEvent(_ name: String, at time: ContinuousClock.Instant, attributes: SpanAttributes = [:]) {
        span.addEvent(SpanEvent(name: name, at: instant(time), attributes: attributes))
    }

    /// A duration in whole nanoseconds.
    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }
}
