// Stress: cancels racing with starts and finishes on an instrumented queue — each operation's
// events must still be told once each, in lifecycle order, finished last.

import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Keeps the kinds told per operation.
private final class OrderInstrument: OperationInstrument {
    let kinds = FuzzLocked<[ObjectIdentifier: [String]]>([:])

    func record(_ event: OperationEvent) {
        let kind: String
        switch event.kind {
        case .added: kind = "added"
        case .ready: kind = "ready"
        case .started: kind = "started"
        case .cancelled: kind = "cancelled"
        case .finished: kind = "finished"
        default: kind = "other"
        }
        kinds.withLock { $0[ObjectIdentifier(event.operation), default: []].append(kind) }
    }
}

extension StressTests {
    @Suite("Observability: instrument event order under racing cancels")
    struct InstrumentOrderStressTests {
        /// Whether `kinds` is a lifecycle in order: added, ready, then started and cancelled in
        /// that order if both, each at most once, finished last and once.
        static func isOrdered(_ kinds: [String], cancelled: Bool) -> Bool {
            guard kinds.first == "added", kinds.last == "finished", kinds.filter({ $0 == "finished" }).count == 1 else { return false }
            for kind in ["added", "ready", "started", "cancelled"] where kinds.filter({ $0 == kind }).count > 1 { return false }
            if cancelled != kinds.contains("cancelled") { return false }
            if let started = kinds.firstIndex(of: "started") {
                guard let ready = kinds.firstIndex(of: "ready"), ready < started else { return false }
                if let cancel = kinds.firstIndex(of: "cancelled"), cancel < started { return false }
            }
            return true
        }

        @Test("closure, async and procedure operations cancelled while they start, run and finish")
        func racingCancels() throws {
            let rounds = Stress.count(20, minimum: 2)
            let perRound = Stress.count(300, minimum: 20)
            var generator = SplitMix64(seed: 0x15)
            for round in 0..<rounds {
                let queue = try ConcurrentOperationQueue(name: "order-\(round)", maxConcurrentOperationCount: 4)
                let instrument = OrderInstrument()
                queue.instrument = instrument
                var operations: [ConcurrentOperation] = []
                for index in 0..<perRound {
                    switch generator.below(3) {
                    case 0: operations.append(ClosureOperation(name: "c\(index)") {})
                    case 1: operations.append(AsyncOperation(name: "a\(index)") { await Task.yield() })
                    default: operations.append(ClosureProcedure(name: "p\(index)") {})
                    }
                    if index > 0 && generator.below(4) == 0 { try operations[index].addDependency(operations[index - 1]) }
                }
                try queue.addOperations(operations, waitUntilFinished: false)
                let victims = operations.filter { _ in generator.below(3) == 0 }
                let cancelling = DispatchGroup()
                for chunk in stride(from: 0, to: victims.count, by: max(1, victims.count / 2)) {
                    let slice = Array(victims[chunk..<min(victims.count, chunk + max(1, victims.count / 2))])
                    DispatchQueue.global().async(group: cancelling) { for operation in slice { operation.cancel() } }
                }
                #expect(cancelling.wait(timeout: .now() + .seconds(60)) == .success)
                #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
                let told = instrument.kinds.withLock { $0 }
                for operation in operations {
                    let kinds = told[ObjectIdentifier(operation)] ?? []
                    #expect(Self.isOrdered(kinds, cancelled: operation.isCancelled), "\(operation.displayName): \(kinds)")
                }
            }
        }
    }
}
