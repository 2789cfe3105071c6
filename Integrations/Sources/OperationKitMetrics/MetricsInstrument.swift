// MetricsInstrument: an OperationInstrument that feeds swift-metrics — counters of operations
// added, started, finished, failed, cancelled and retried, wait and run timers, pending meters.

import CoreMetrics
import IntegrationSupport
import Metrics
import OperationKit

/// An ``OperationKit/OperationInstrument`` that records swift-metrics metrics of operations and
/// workflow tasks.
///
/// Install it on a queue (or a workflow, or as ``OperationKit/OperationInstrumentation/default``);
/// it uses the factory it is given, or `MetricsSystem.factory` (read when a metric is first
/// needed, so bootstrapping after creating the instrument works):
///
/// ```swift
/// queue.instrument = MetricsInstrument()
/// ```
///
/// The metrics, named as Prometheus expects (with the default prefix `operationkit`), each with
/// the dimension `queue`:
///
/// | label | kind | what |
/// |---|---|---|
/// | `operationkit_operations_added_total` | counter | operations added |
/// | `operationkit_operations_started_total` | counter | operations whose `execute()` ran |
/// | `operationkit_operations_finished_total` | counter | operations finished, whatever the outcome |
/// | `operationkit_operations_failed_total` | counter | of those, finished with errors, not cancelled |
/// | `operationkit_operations_cancelled_total` | counter | of those, finished cancelled |
/// | `operationkit_operations_retried_total` | counter | attempts a retry started after the first |
/// | `operationkit_operation_wait_duration_seconds` | timer | from added to started |
/// | `operationkit_operation_execution_duration_seconds` | timer | from started to finished |
/// | `operationkit_operations_pending` | meter | added and not yet started (or finished unstarted) |
/// | `operationkit_operations_executing` | meter | started and not yet finished |
///
/// and for workflow tasks, with the dimension `workflow`:
/// `operationkit_workflow_tasks_started_total`, `…_finished_total`, `…_failed_total`,
/// `…_cancelled_total` (counters) and `operationkit_workflow_task_run_duration_seconds` (a timer
/// of runs that finished or failed).
///
/// The `queue` dimension is the queue's name; a queue without a name is counted as `unnamed`
/// (its `displayName` is unique per queue, which would make a time series per queue) and an
/// operation started by hand as `none`. Name queues whose metrics you want apart. The timers
/// use the events' monotonic times; the times of each operation (and each running workflow
/// task) are kept in a table keyed by object identity until it finishes.
public final class MetricsInstrument: OperationInstrument {
    /// The prefix of every label.
    public let labelPrefix: String
    /// The factory given at creation, or `nil` for `MetricsSystem.factory`.
    private let factory: (any MetricsFactory)?
    private let state = Locked(State())

    struct State {
        /// The metrics of each queue name (and of `none`), made on first use.
        var queues: [String: QueueMetrics] = [:]
        /// The metrics of each workflow name.
        var workflows: [String: WorkflowMetrics] = [:]
        /// Each operation seen added or started and not yet finished.
        var operations: [ObjectIdentifier: OperationEntry] = [:]
        /// When each running workflow task started its run.
        var tasks: [ObjectIdentifier: ContinuousClock.Instant] = [:]
    }

    struct OperationEntry {
        let metrics: QueueMetrics
        var added: ContinuousClock.Instant?
        var started: ContinuousClock.Instant?
    }

    /// Creates an instrument.
    ///
    /// - Parameters:
    ///   - factory: The metrics backend; by default (`nil`) `MetricsSystem.factory`, read when a
    ///     metric is first made. Pass one to keep tests or several backends apart.
    ///   - labelPrefix: The start of every label; `operationkit` by default.
    public init(factory: (any MetricsFactory)? = nil, labelPrefix: String = "operationkit") {
        self.factory = factory
        self.labelPrefix = labelPrefix
    }

    /// The number of operations and workflow tasks whose times are kept (for tests).
    var trackedCount: Int { state.withLock { $0.operations.count + $0.tasks.count } }

    // MARK: Operations

    /// Counts an operation's event and records its wait or run when it starts or finishes.
    ///
    /// - Parameter event: The event.
    public func record(_ event: OperationEvent) {
        let id = ObjectIdentifier(event.operation)
        switch event.kind {
        case .added:
            let dimension = Self.queueDimension(event.queue)
            let metrics = state.withLock { state in
                let metrics = queueMetrics(dimension, in: &state)
                state.operations[id] = OperationEntry(metrics: metrics, added: event.time)
                return metrics
            }
            metrics.added.increment()
            metrics.pending.increment()
        case .started:
            let entry: OperationEntry
            if let added = state.withLock({ state in
                state.operations[id]?.started = event.time
                return state.operations[id]
            }) {
                entry = added
            } else {  // not seen added: started by hand, or the instrument came later
                entry = OperationEntry(metrics: queueMetrics(for: event.queue), started: event.time)
                state.withLock { $0.operations[id] = entry }
            }
            entry.metrics.started.increment()
            if let added = entry.added {
                entry.metrics.waitDuration.record(duration: event.time - added)
                entry.metrics.pending.decrement()
            }
            entry.metrics.executing.increment()
        case .finished(let outcome):
            let entry = state.withLock { $0.operations.removeValue(forKey: id) }
            let metrics = entry?.metrics ?? queueMetrics(for: event.queue)
            metrics.finished.increment()
            switch outcome {
            case .succeeded: break
            case .failed: metrics.failed.increment()
            case .cancelled: metrics.cancelled.increment()
            }
            if let started = entry?.started {
                metrics.executionDuration.record(duration: event.time - started)
                metrics.executing.decrement()
            } else if entry?.added != nil {
                metrics.pending.decrement()
            }
        case .retrying:
            let metrics = state.withLock { $0.operations[id]?.metrics } ?? queueMetrics(for: event.queue)
            metrics.retried.increment()
        case .ready, .cancelled, .conditionsEvaluated, .exclusivityWaiting, .exclusivityGranted, .produced:
            break
        }
    }

    /// The `queue` dimension: the queue's name, `unnamed` or `none`.
    static func queueDimension(_ queue: ConcurrentOperationQueue?) -> String {
        guard let queue else { return "none" }
        return queue.name ?? "unnamed"
    }

    /// The metrics of `queue` (its name read outside the lock).
    private func queueMetrics(for queue: ConcurrentOperationQueue?) -> QueueMetrics {
        let dimension = Self.queueDimension(queue)
        return state.withLock { queueMetrics(dimension, in: &$0) }
    }

    /// The metrics of the queue called `name`, made on first use.
    private func queueMetrics(_ name: String, in state: inout State) -> QueueMetrics {
        if let metrics = state.queues[name] { return metrics }
        let metrics = QueueMetrics(prefix: labelPrefix, queue: name, factory: factory ?? MetricsSystem.factory)
        state.queues[name] = metrics
        return metrics
    }

    // MARK: Workflow tasks

    /// Counts a workflow task's run starting, finishing, failing or being cancelled, and records
    /// the run's duration when it finishes or fails.
    ///
    /// - Parameter event: The transition.
    public func record(_ event: WorkflowTaskEvent) {
        let id = ObjectIdentifier(event.task)
        let (metrics, ran) = state.withLock { state in
            let metrics: WorkflowMetrics
            if let existing = state.workflows[event.workflowName] {
                metrics = existing
            } else {
                metrics = WorkflowMetrics(
                    prefix: labelPrefix, workflow: event.workflowName, factory: factory ?? MetricsSystem.factory)
                state.workflows[event.workflowName] = metrics
            }
            let started = event.from == .executing ? state.tasks.removeValue(forKey: id) : nil
            if event.to == .executing { state.tasks[id] = event.time }
            return (metrics, started.map { event.time - $0 })
        }
        switch event.to {
        case .executing: metrics.started.increment()
        case .finished: metrics.finished.increment()
        case .failed: metrics.failed.increment()
        case .cancelled: metrics.cancelled.increment()
        case .pending, .ready: break
        }
        if let ran, event.to == .finished || event.to == .failed {
            metrics.runDuration.record(duration: ran)
        }
    }
}

/// The metrics of one queue name.
final class QueueMetrics: Sendable {
    let added: Counter
    let started: Counter
    let finished: Counter
    let failed: Counter
    let cancelled: Counter
    let retried: Counter
    let waitDuration: CoreMetrics.Timer
    let executionDuration: CoreMetrics.Timer
    let pending: Meter
    let executing: Meter

    init(prefix: String, queue: String, factory: any MetricsFactory) {
        let dimensions = [("queue", queue)]
        func counter(_ name: String) -> Counter {
            Counter(label: "\(prefix)_operations_\(name)_total", dimensions: dimensions, factory: factory)
        }
        added = counter("added")
        started = counter("started")
        finished = counter("finished")
        failed = counter("failed")
        cancelled = counter("cancelled")
        retried = counter("retried")
        waitDuration = CoreMetrics.Timer(
            label: "\(prefix)_operation_wait_duration_seconds", dimensions: dimensions, factory: factory)
        executionDuration = CoreMetrics.Timer(
            label: "\(prefix)_operation_execution_duration_seconds", dimensions: dimensions, factory: factory)
        pending = Meter(label: "\(prefix)_operations_pending", dimensions: dimensions, factory: factory)
        executing = Meter(label: "\(prefix)_operations_executing", dimensions: dimensions, factory: factory)
    }
}

/// The metrics of one workflow name.
final class WorkflowMetrics: Sendable {
    let started: Counter
    let finished: Counter
    let failed: Counter
    let cancelled: Counter
    let runDuration: CoreMetrics.Timer

    init(prefix: String, workflow: String, factory: any MetricsFactory) {
        let dimensions = [("workflow", workflow)]
        func counter(_ name: String) -> Counter {
            Counter(label: "\(prefix)_workflow_tasks_\(name)_total", dimensions: dimensions, factory: factory)
        }
        started = counter("started")
        finished = counter("finished")
        failed = counter("failed")
        cancelled = counter("cancelled")
        runDuration = CoreMetrics.Timer(
            label: "\(prefix)_workflow_task_run_duration_seconds", dimensions: dimensions, factory: factory)
    }
}
