// TracingInstrument's workflow tasks: a span per run of a task, parented by the context where
// the task was first seen (added or started), ended with the run's outcome.

import OperationKit
import Tracing

/// What the instrument keeps of a workflow task: the parent of its runs' spans and the span of
/// the run in progress.
struct TaskEntry: Sendable {
    let parent: ServiceContext
    var run: SpanEntry?
}

extension TracingInstrument {
    /// Starts the span of a task's run when it starts executing, and ends it when the run ends.
    ///
    /// - Parameter event: The transition.
    public func record(_ event: WorkflowTaskEvent) {
        let id = ObjectIdentifier(event.task)
        // The parent is captured on the task's first event, on the thread that caused it.
        let current = ServiceContext.current ?? .topLevel
        let (parent, ended) = tasks.withLock { table in
            var entry = table[id] ?? TaskEntry(parent: current)
            let ended = event.from == .executing ? entry.run : nil
            if event.from == .executing { entry.run = nil }
            switch event.to {
            case .finished, .failed, .cancelled: table[id] = nil
            case .pending, .ready, .executing: table[id] = entry
            }
            return (entry.parent, ended)
        }
        if let ended {
            let span = ended.span
            let outcome =
                switch event.to {
                case .finished: "succeeded"
                case .failed: "failed"
                case .cancelled: "cancelled"
                case .pending, .ready, .executing: "reset"
                }
            span.attributes["operationkit.outcome"] = outcome
            if let error = event.error {
                span.recordError(error, attributes: [:], at: ended.instant(event.time))
                span.setStatus(SpanStatus(code: .error, message: String(describing: error)))
            }
            span.end(at: ended.instant(event.time))
        }
        if event.to == .executing {
            let run = SpanEntry.start(event.task.name, with: tracer, context: parent, at: event.time)
            run.span.updateAttributes { attributes in
                attributes["operationkit.workflow"] = event.workflowName
                attributes["operationkit.task"] = event.task.name
            }
            tasks.withLock { table in
                // Unless the task moved on meanwhile (its next event removed or replaced it).
                if table[id] != nil, table[id]?.run == nil { table[id]?.run = run } else { run.span.end() }
            }
        }
    }
}
