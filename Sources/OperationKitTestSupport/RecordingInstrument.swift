// An instrument that records every event it is told (operations, workflow tasks, state
// machines) and checks that each operation's events follow the lifecycle rules.
import OperationKit
import Testing

/// An `OperationInstrument` that records every event it is told, in the order
/// told, for tests of what a queue reports.
///
/// ```swift
/// let instrument = RecordingInstrument()
/// queue.instrument = instrument
/// try queue.addOperation(download)
/// try await download.finished(within: .seconds(5))
/// #expect(instrument.kinds(of: download) == ["added", "ready", "started", "finished(succeeded)"])
/// instrument.expectValidLifecycles(of: [download])
/// ```
///
/// The events hold their operation and queue, so an instrument installed on a queue keeps that
/// queue alive (a cycle) until ``removeAll()`` or until the queue's
/// `ConcurrentOperationQueue.instrument` is set to something else.
public final class RecordingInstrument: OperationInstrument {
    private let operationEvents = Locked<[OperationEvent]>([])
    private let taskEvents = Locked<[WorkflowTaskEvent]>([])
    private let machineEvents = Locked<[StateMachineEvent]>([])
    private let wrap: (@Sendable (ConcurrentOperation, () -> Void) -> Void)?
    private let onTaskEvent: (@Sendable (WorkflowTaskEvent) -> Void)?

    /// Creates an instrument with nothing recorded.
    ///
    /// - Parameters:
    ///   - wrap: Runs around each operation's `execute()` if given (see
    ///     `OperationInstrument.run(_:_:)`): it must call the body exactly once.
    ///   - onTaskEvent: Called with each workflow task event, after it was recorded.
    public init(
        wrap: (@Sendable (ConcurrentOperation, () -> Void) -> Void)? = nil,
        onTaskEvent: (@Sendable (WorkflowTaskEvent) -> Void)? = nil
    ) {
        self.wrap = wrap
        self.onTaskEvent = onTaskEvent
    }

    /// Records an operation's event.
    ///
    /// - Parameter event: The event.
    public func record(_ event: OperationEvent) { operationEvents.withLock { $0.append(event) } }

    /// Records a workflow task's transition, then calls `onTaskEvent`.
    ///
    /// - Parameter event: The event.
    public func record(_ event: WorkflowTaskEvent) {
        taskEvents.withLock { $0.append(event) }
        onTaskEvent?(event)
    }

    /// Records a state machine's transition.
    ///
    /// - Parameter event: The event.
    public func record(_ event: StateMachineEvent) { machineEvents.withLock { $0.append(event) } }

    /// Runs `body` inside `wrap`, if one was given.
    ///
    /// - Parameters:
    ///   - operation: The operation about to execute.
    ///   - body: Executes it.
    public func run(_ operation: ConcurrentOperation, _ body: () -> Void) {
        if let wrap { wrap(operation, body) } else { body() }
    }

    /// Every operation event, in the order told.
    public var events: [OperationEvent] { operationEvents.withLock { $0 } }
    /// Every workflow task event, in the order told.
    public var workflowTaskEvents: [WorkflowTaskEvent] { taskEvents.withLock { $0 } }
    /// Every state machine event, in the order told.
    public var stateMachineEvents: [StateMachineEvent] { machineEvents.withLock { $0 } }

    /// Forgets every event recorded (and so lets go of their operations and queues).
    public func removeAll() {
        operationEvents.withLock { $0.removeAll() }
        taskEvents.withLock { $0.removeAll() }
        machineEvents.withLock { $0.removeAll() }
    }

    /// The events of `operation`, in the order told.
    ///
    /// - Parameter operation: An operation of an instrumented queue.
    /// - Returns: Its events.
    public func events(of operation: ConcurrentOperation) -> [OperationEvent] {
        events.filter { $0.operation === operation }
    }

    /// The kinds of the events of `operation`, as `OperationEvent.Kind.shortName`s.
    ///
    /// - Parameter operation: An operation of an instrumented queue.
    /// - Returns: Its events' kinds, in order: `["added", "ready", "started", "finished(succeeded)"]`.
    public func kinds(of operation: ConcurrentOperation) -> [String] {
        events(of: operation).map(\.kind.shortName)
    }

    /// The transitions of `task`, as `from>to`.
    ///
    /// - Parameter task: A task of an instrumented workflow.
    /// - Returns: Its transitions, in order.
    public func transitions(of task: WorkflowTask) -> [String] {
        workflowTaskEvents.filter { $0.task === task }.map { "\($0.from)>\($0.to)" }
    }

    /// What breaks the lifecycle rules in the events of `operations`, once they have all
    /// finished. Each operation's events must be: added (if told) first; added, ready, started,
    /// cancelled, finished and conditions evaluated at most once each; finished last; cancelled
    /// told exactly when the operation is cancelled, and never before started; ready, conditions
    /// evaluated, exclusivity waiting and granted, started in that order; an operation told
    /// added and started was told ready before it started. An operation with no events (not in
    /// an instrumented queue) is skipped.
    ///
    /// - Parameter operations: The operations to check; each is named by its index in problems.
    /// - Returns: One line per operation that breaks a rule: `#index name kinds: problems`.
    public func lifecycleViolations(of operations: [ConcurrentOperation]) -> [String] {
        var byOperation: [ObjectIdentifier: [String]] = [:]
        for event in events { byOperation[ObjectIdentifier(event.operation), default: []].append(event.kind.lifecycleStep) }
        var found: [String] = []
        for (index, operation) in operations.enumerated() {
            guard let steps = byOperation[ObjectIdentifier(operation)] else { continue }
            func position(_ step: String) -> Int? { steps.firstIndex(of: step) }
            var problems: [String] = []
            for step in ["added", "ready", "started", "cancelled", "finished", "conditions"]
            where steps.count(where: { $0 == step }) > 1 {
                problems.append("\(step) told more than once")
            }
            if steps.last != "finished" { problems.append("finished is not last") }
            if operation.isCancelled != (position("cancelled") != nil) {
                problems.append("cancelled told \(position("cancelled") != nil), isCancelled \(operation.isCancelled)")
            }
            if let added = position("added"), added != 0 { problems.append("added is not first") }
            let order = ["ready", "conditions", "waiting", "granted", "started"].compactMap(position)
            if order != order.sorted() { problems.append("out of lifecycle order") }
            if let started = position("started") {
                if let cancelled = position("cancelled"), cancelled < started { problems.append("cancelled before started") }
                if position("added") != nil && position("ready") == nil { problems.append("started without ready") }
            }
            if !problems.isEmpty {
                found.append("#\(index) \(operation.displayName) \(steps): \(problems.joined(separator: "; "))")
            }
        }
        return found
    }

    /// Records an issue for each operation whose events break the rules of
    /// ``lifecycleViolations(of:)``.
    ///
    /// - Parameters:
    ///   - operations: The operations to check, once they have all finished.
    ///   - sourceLocation: Where the issues are reported; the caller's line by default.
    /// - Returns: `true` if every operation's events follow the rules.
    @discardableResult
    public func expectValidLifecycles(
        of operations: [ConcurrentOperation], sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        let problems = lifecycleViolations(of: operations)
        for problem in problems { Issue.record(Comment(rawValue: problem), sourceLocation: sourceLocation) }
        return problems.isEmpty
    }
}

extension OperationEvent.Kind {
    /// A short name for the kind, with what matters of its payload: `added`, `ready`, `started`,
    /// `cancelled`, `finished(succeeded)` (or `failed`, `cancelled`), `conditionsEvaluated`,
    /// `exclusivityWaiting`, `exclusivityGranted`, `retrying(2)`, `produced`.
    public var shortName: String {
        switch self {
        case .added: "added"
        case .ready: "ready"
        case .started: "started"
        case .cancelled: "cancelled"
        case .finished(let outcome): "finished(\(outcome))"
        case .conditionsEvaluated: "conditionsEvaluated"
        case .exclusivityWaiting: "exclusivityWaiting"
        case .exclusivityGranted: "exclusivityGranted"
        case .retrying(let attempt, _): "retrying(\(attempt))"
        case .produced: "produced"
        }
    }

    /// The kind without its payload, as the lifecycle check names it.
    fileprivate var lifecycleStep: String {
        switch self {
        case .added: "added"
        case .ready: "ready"
        case .started: "started"
        case .cancelled: "cancelled"
        case .finished: "finished"
        case .conditionsEvaluated: "conditions"
        case .exclusivityWaiting: "waiting"
        case .exclusivityGranted: "granted"
        case .retrying: "retrying"
        case .produced: "produced"
        }
    }
}
