// Stress: cancels racing with starts and finishes on an instrumented queue — each operation's
// events must still be told once each, in lifecycle order, finished last.

import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    @Suite("Observability: instrument event order under racing cancels", .exclusiveInstrumentation)
    struct InstrumentOrderStressTests {
        @Test("closure, async and procedure operations cancelled while they start, run and finish")
        func racingCancels() throws {
            let rounds = Stress.count(20, minimum: 2)
            let perRound = Stress.count(300, minimum: 20)
            var generator = SplitMix64(seed: 0x15)
            for round in 0..<rounds {
                let queue = try ConcurrentOperationQueue(name: "order-\(round)", maxConcurrentOperationCount: 4)
                let instrument = RecordingInstrument()
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
                // Each one's events: added first, then in lifecycle order, once each, finished last.
                for operation in operations {
                    #expect(instrument.kinds(of: operation).first == "added", "\(operation.displayName)")
                }
                instrument.expectValidLifecycles(of: operations)
                queue.instrument = nil
            }
        }
    }
}
