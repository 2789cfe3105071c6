// LoggingInstrument: an OperationInstrument that writes a swift-log line for each event of
// operations, workflow tasks and state machines, with lower snake case metadata.

import IntegrationSupport
import Logging
import OperationKit

/// An ``OperationKit/OperationInstrument`` that writes a swift-log line for each event.
///
/// Install it on a queue (or a workflow, or as ``OperationKit/OperationInstrumentation/default``):
///
/// ```swift
/// queue.instrument = LoggingInstrument(logger: Logger(label: "jobs"))
/// ```
///
/// Each line has a short constant message (`operation started`, `operation finished`,
/// `workflow task failed`, …) and its data in metadata with lower snake case keys:
///
/// | key | value |
/// |---|---|
/// | `operation` | the operation's `displayName` |
/// | `queue` | the queue's `displayName` (absent for an operation started by hand) |
/// | `state` | the state entered: `pending`, `ready`, `executing`, `finished` |
/// | `outcome` | `succeeded`, `failed` or `cancelled` (on finish) |
/// | `wait_ms` | milliseconds from added to started (on start) |
/// | `duration_ms` | milliseconds from started to finished (on finish, if it started) |
/// | `error`, `errors` | the first error's description; all of them, when more than one |
/// | `conditions` | each condition's name and result (`satisfied`, `failed`, `ignored`) |
/// | `categories` | mutually exclusive categories waited for or granted |
/// | `attempt`, `delay_ms` | a retry's attempt number and the delay before it |
/// | `produced` | the produced operation's `displayName` |
/// | `workflow`, `task`, `from`, `to` | a workflow task's transition |
/// | `machine`, `from`, `to` | a state machine's transition |
///
/// The first error is also passed as the log event's `error`. The level of each kind of event is
/// set by ``Levels``; the defaults keep a logger at `.info` quiet while work succeeds. An event
/// below the logger's level costs a comparison: its metadata is built only for lines that are
/// written. Durations need the start times of operations and workflow tasks, kept in a table
/// (keyed by object identity, removed on finish) only when a line that shows them is enabled.
public final class LoggingInstrument: OperationInstrument {
    /// The logger the lines are written to.
    public let logger: Logger
    /// The level of each kind of event.
    public let levels: Levels

    /// Whether started or finished lines are written (they show the wait and the duration).
    private let timesOperations: Bool
    /// Whether workflow task lines that end a run are written (they show its duration).
    private let timesTasks: Bool
    /// When each operation being timed was added and started; removed when it finishes.
    private let operations = Locked<[ObjectIdentifier: OperationTimes]>([:])
    /// When each workflow task being timed started its run; removed when the run ends.
    private let tasks = Locked<[ObjectIdentifier: ContinuousClock.Instant]>([:])

    struct OperationTimes {
        var added: ContinuousClock.Instant?
        var started: ContinuousClock.Instant?
    }

    /// Creates an instrument that writes to `logger`.
    ///
    /// - Parameters:
    ///   - logger: The logger; its level (and its handler's) decides which lines are written.
    ///   - levels: The level of each kind of event; by default the ones ``Levels`` lists.
    public init(logger: Logger, levels: Levels = Levels()) {
        self.logger = logger
        self.levels = levels
        let threshold = logger.logLevel
        func enabled(_ level: Logger.Level?) -> Bool { level.map { threshold <= $0 } ?? false }
        timesOperations =
            enabled(levels.started) || enabled(levels.succeeded) || enabled(levels.failed)
            || enabled(levels.finishedCancelled)
        timesTasks =
            enabled(levels.workflowTaskFinished) || enabled(levels.workflowTaskFailed)
            || enabled(levels.workflowTaskCancelled) || enabled(levels.workflowTaskWaiting)
    }

    /// The number of operations and workflow tasks whose times are kept (for tests).
    var trackedCount: Int { operations.withLock { $0.count } + tasks.withLock { $0.count } }

    // MARK: Operations

    /// Writes the line of an operation's event, if its level is set and enabled, and keeps or
    /// drops the operation's start times.
    ///
    /// - Parameter event: The event.
    public func record(_ event: OperationEvent) {
        switch event.kind {
        case .added:
            if timesOperations {
                operations.withLock { $0[ObjectIdentifier(event.operation), default: OperationTimes()].added = event.time }
            }
            write(levels.added, "operation added", event) { ["state": "pending"] }
        case .ready:
            write(levels.ready, "operation ready", event) { ["state": "ready"] }
        case .started:
            var waited: Duration?
            if timesOperations {
                waited = operations.withLock { table in
                    let id = ObjectIdentifier(event.operation)
                    table[id, default: OperationTimes()].started = event.time
                    return table[id]?.added.map { event.time - $0 }
                }
            }
            write(levels.started, "operation started", event) {
                var metadata: Logger.Metadata = ["state": "executing"]
                if let waited { metadata["wait_ms"] = Self.milliseconds(waited) }
                return metadata
            }
        case .cancelled:
            write(levels.cancelled, "operation cancelled", event) { [:] }
        case .finished(let outcome):
            let times = timesOperations ? operations.withLock { $0.removeValue(forKey: ObjectIdentifier(event.operation)) } : nil
            let level =
                switch outcome {
                case .succeeded: levels.succeeded
                case .failed: levels.failed
                case .cancelled: levels.finishedCancelled
                }
            write(level, "operation finished", event, error: outcome.errors.first) {
                var metadata: Logger.Metadata = ["state": "finished", "outcome": .string(outcome.description)]
                if let started = times?.started { metadata["duration_ms"] = Self.milliseconds(event.time - started) }
                Self.add(outcome.errors, to: &metadata)
                return metadata
            }
        case .conditionsEvaluated(let results):
            var firstError: (any Error)?
            for (_, result) in results {
                if case .failed(let error) = result {
                    firstError = error
                    break
                }
            }
            write(levels.conditionsEvaluated, "operation conditions evaluated", event, error: firstError) {
                var conditions: Logger.Metadata = [:]
                for (name, result) in results { conditions[name] = .string(Self.describe(result)) }
                var metadata: Logger.Metadata = ["conditions": .dictionary(conditions)]
                if let firstError { metadata["error"] = .string(String(describing: firstError)) }
                return metadata
            }
        case .exclusivityWaiting(let categories):
            write(levels.exclusivity, "operation waiting for exclusivity", event) {
                ["categories": .array(categories.sorted().map { .string($0) })]
            }
        case .exclusivityGranted(let categories):
            write(levels.exclusivity, "operation granted exclusivity", event) {
                ["categories": .array(categories.sorted().map { .string($0) })]
            }
        case .retrying(let attempt, let delay):
            write(levels.retrying, "operation retrying", event) {
                ["attempt": .stringConvertible(attempt), "delay_ms": Self.milliseconds(delay)]
            }
        case .produced(let produced):
            write(levels.produced, "operation produced an operation", event) {
                ["produced": .string(produced.displayName)]
            }
        }
    }

    /// Writes a line about an operation at `level`, if it is set and enabled, with the operation's
    /// and the queue's names and the metadata `extra` returns (called only then).
    private func write(
        _ level: Logger.Level?, _ message: @autoclosure () -> Logger.Message, _ event: OperationEvent,
        error: @autoclosure () -> (any Error)? = nil, _ extra: () -> Logger.Metadata
    ) {
        guard let level, logger.logLevel <= level else { return }
        var metadata = extra()
        metadata["operation"] = .string(event.operation.displayName)
        if let queue = event.queue { metadata["queue"] = .string(queue.displayName) }
        logger.log(level: level, message(), error: error(), metadata: metadata)
    }

    // MARK: Workflow tasks and state machines

    /// Writes the line of a workflow task's transition (`workflow task <state entered>`), with
    /// the run's duration when it ends one.
    ///
    /// - Parameter event: The transition.
    public func record(_ event: WorkflowTaskEvent) {
        var ran: Duration?
        if timesTasks {
            let id = ObjectIdentifier(event.task)
            ran = tasks.withLock { table in
                let started = event.from == .executing ? table.removeValue(forKey: id) : nil
                if event.to == .executing { table[id] = event.time }
                return started.map { event.time - $0 }
            }
        }
        let level =
            switch event.to {
            case .pending, .ready: levels.workflowTaskWaiting
            case .executing: levels.workflowTaskExecuting
            case .finished: levels.workflowTaskFinished
            case .failed: levels.workflowTaskFailed
            case .cancelled: levels.workflowTaskCancelled
            }
        guard let level, logger.logLevel <= level else { return }
        var metadata: Logger.Metadata = [
            "workflow": .string(event.workflowName), "task": .string(event.task.name),
            "from": .string(event.from.description), "to": .string(event.to.description),
        ]
        if let ran { metadata["duration_ms"] = Self.milliseconds(ran) }
        if let error = event.error { metadata["error"] = .string(String(describing: error)) }
        logger.log(level: level, "workflow task \(event.to.description)", error: event.error, metadata: metadata)
    }

    /// Writes `state machine transition` with the machine's name and the two states.
    ///
    /// - Parameter event: The transition.
    public func record(_ event: StateMachineEvent) {
        guard let level = levels.stateMachineTransition, logger.logLevel <= level else { return }
        logger.log(
            level: level, "state machine transition",
            metadata: ["machine": .string(event.machineName), "from": .string(event.from), "to": .string(event.to)])
    }

    // MARK: Values

    /// A duration in milliseconds, to the microsecond.
    static func milliseconds(_ duration: Duration) -> Logger.MetadataValue {
        let (seconds, attoseconds) = duration.components
        let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        return .stringConvertible(Double(microseconds) / 1000)
    }

    /// `satisfied`, `failed` or `ignored`.
    static func describe(_ result: ConditionResult) -> String {
        switch result {
        case .satisfied: "satisfied"
        case .failed: "failed"
        case .ignored: "ignored"
        }
    }

    /// `error` (the first error's description) and, for more than one, `errors` (all of them).
    static func add(_ errors: [any Error], to metadata: inout Logger.Metadata) {
        guard let first = errors.first else { return }
        metadata["error"] = .string(String(describing: first))
        if errors.count > 1 { metadata["errors"] = .array(errors.map { .string(String(describing: $0)) }) }
    }
}
