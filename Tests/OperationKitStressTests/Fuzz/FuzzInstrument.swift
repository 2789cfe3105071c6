// The fuzz's instrument: installed on the queues of odd seeds, it keeps each operation's events
// and checks afterwards that they came once each, in lifecycle order, finished last.

import Foundation
import OperationKit

/// A value behind an `NSLock` (the thread sanitizer does not understand `Synchronization.Mutex`).
final class FuzzLocked<Value>: @unchecked Sendable {  // `value` is protected by `lock`
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

final class FuzzInstrument: OperationInstrument {
    private let kinds = FuzzLocked<[ObjectIdentifier: [String]]>([:])

    func record(_ event: OperationEvent) {
        let kind: String
        switch event.kind {
        case .added: kind = "added"
        case .ready: kind = "ready"
        case .started: kind = "started"
        case .cancelled: kind = "cancelled"
        case .finished: kind = "finished"
        case .conditionsEvaluated: kind = "conditions"
        case .exclusivityWaiting: kind = "waiting"
        case .exclusivityGranted: kind = "granted"
        case .retrying: kind = "retrying"
        case .produced: kind = "produced"
        }
        kinds.withLock { $0[ObjectIdentifier(event.operation), default: []].append(kind) }
    }

    /// What is wrong with the events told of `operations` (each named by its index), once they
    /// have all finished.
    func violations(_ operations: [ConcurrentOperation]) -> [String] {
        let told = kinds.withLock { $0 }
        var found: [String] = []
        for (index, operation) in operations.enumerated() {
            guard let events = told[ObjectIdentifier(operation)] else { continue }
            func position(_ kind: String) -> Int? { events.firstIndex(of: kind) }
            var problems: [String] = []
            for kind in ["added", "ready", "started", "cancelled", "finished", "conditions"]
            where events.filter({ $0 == kind }).count > 1 {
                problems.append("\(kind) told more than once")
            }
            if events.last != "finished" { problems.append("finished is not last") }
            if operation.isCancelled != (position("cancelled") != nil) { problems.append("cancelled told \(position("cancelled") != nil), isCancelled \(operation.isCancelled)") }
            if let added = position("added"), added != 0 { problems.append("added is not first") }
            let order = ["ready", "conditions", "waiting", "granted", "started"].compactMap(position)
            if order != order.sorted() { problems.append("out of lifecycle order") }
            if let started = position("started"), let cancelled = position("cancelled"), cancelled < started {
                problems.append("cancelled before started")
            }
            if !problems.isEmpty {
                found.append("instrument: #\(index) \(operation.displayName) \(events): \(problems.joined(separator: "; "))")
            }
        }
        return found
    }
}
