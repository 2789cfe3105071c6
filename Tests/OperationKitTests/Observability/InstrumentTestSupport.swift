// Test support for instruments: an instrument that captures every event it is told, with the
// events of one operation (or task, or machine) as short names to compare.

import Foundation
import OperationKit
import Testing

/// A value behind an `NSLock` (the thread sanitizer does not understand `Synchronization.Mutex`).
final class Locked<Value>: @unchecked Sendable {  // `value` is protected by `lock`
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

/// Captures every event, in the order told.
final class CapturingInstrument: OperationInstrument {
    private let operationEvents = Locked<[OperationEvent]>([])
    private let taskEvents = Locked<[WorkflowTaskEvent]>([])
    private let machineEvents = Locked<[StateMachineEvent]>([])
    /// Runs around `execute()` when set (see `OperationInstrument.run`).
    let wrap: (@Sendable (ConcurrentOperation, () -> Void) -> Void)?
    /// Called after each workflow task event was captured.
    let onTaskEvent: (@Sendable (WorkflowTaskEvent) -> Void)?

    init(
        wrap: (@Sendable (ConcurrentOperation, () -> Void) -> Void)? = nil,
        onTaskEvent: (@Sendable (WorkflowTaskEvent) -> Void)? = nil
    ) {
        self.wrap = wrap
        self.onTaskEvent = onTaskEvent
    }

    func record(_ event: OperationEvent) { operationEvents.withLock { $0.append(event) } }
    func record(_ event: WorkflowTaskEvent) {
        taskEvents.withLock { $0.append(event) }
        onTaskEvent?(event)
    }
    func record(_ event: StateMachineEvent) { machineEvents.withLock { $0.append(event) } }

    func run(_ operation: ConcurrentOperation, _ body: () -> Void) {
        if let wrap { wrap(operation, body) } else { body() }
    }

    var events: [OperationEvent] { operationEvents.withLock { $0 } }
    var workflowTaskEvents: [WorkflowTaskEvent] { taskEvents.withLock { $0 } }
    var stateMachineEvents: [StateMachineEvent] { machineEvents.withLock { $0 } }

    /// The events of `operation`, in the order told.
    func events(of operation: ConcurrentOperation) -> [OperationEvent] {
        events.filter { $0.operation === operation }
    }

    /// The kinds of the events of `operation` as short names (`finished(cancelled)`…).
    func kinds(of operation: ConcurrentOperation) -> [String] {
        events(of: operation).map(\.kind.shortName)
    }

    /// The transitions of `task`, as `from>to`.
    func transitions(of task: WorkflowTask) -> [String] {
        workflowTaskEvents.filter { $0.task === task }.map { "\($0.from)>\($0.to)" }
    }
}

extension OperationEvent.Kind {
    /// `added`, `ready`, `started`, `cancelled`, `finished(outcome)`, `conditionsEvaluated`,
    /// `exclusivityWaiting`, `exclusivityGranted`, `retrying(n)`, `produced`.
    var shortName: String {
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
}

struct InstrumentTestError: Error, Equatable, CustomStringConvertible {
    let code: Int
    init(_ code: Int) { self.code = code }
    var description: String { "InstrumentTestError(\(code))" }
}
