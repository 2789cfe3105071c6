import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// A worker that runs out of ready operations waits a moment as an idle worker before it gives its
/// slot back, and an operation added meanwhile goes to it instead of to a new worker. Every add
/// below lands in that moment or just after it; an add that counted on an idle worker that left
/// without seeing it would never run, and the bounded wait would fail.
@Suite("N. Queue: idle workers take what is added while they wait", .offThePool)
struct QueueIdleWorkerTests {
    static let rounds = 2_000

    @Test("an operation added right after the queue emptied runs", arguments: [1, 2, 64])
    func addAfterEmptying(limit: Int) throws {
        let queue = ConcurrentOperationQueue(name: "idle.\(limit)")
        try queue.setMaxConcurrentOperationCount(limit)
        let ran = AtomicCounter()
        for round in 0..<Self.rounds {
            try queue.addOperation(ClosureOperation(name: "r\(round)") { ran.increment() })
            let finished = queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout)
            #expect(finished, "round \(round) of limit \(limit) did not finish")
            if !finished { return }
        }
        #expect(ran.value == Self.rounds)
    }

    @Test("operations added one at a time to a serial queue run one at a time, in order")
    func serialOneByOne() throws {
        let queue = ConcurrentOperationQueue(name: "idle.serial")
        try queue.setMaxConcurrentOperationCount(1)
        let meter = InFlightMeter()
        let order = Recorder<Int>()
        for index in 0..<Self.rounds {
            try queue.addOperation(ClosureOperation(name: "s\(index)") {
                meter.enter()
                order.record(index)
                meter.leave()
            })
        }
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(meter.peak == 1)
        #expect(order.values == Array(0..<Self.rounds))
    }

    @Test("an operation added while the only slot's worker waits idle runs beside none other")
    func idleWorkerHoldsTheSlotItWaitsWith() throws {
        let queue = ConcurrentOperationQueue(name: "idle.slot")
        try queue.setMaxConcurrentOperationCount(1)
        let meter = InFlightMeter()
        let ran = AtomicCounter()
        for round in 0..<Self.rounds {
            // Two at once, right after the queue emptied: the idle worker takes one, and no new
            // worker may start the other beside it.
            let pair = (0..<2).map { index in
                ClosureOperation(name: "p\(round).\(index)") {
                    meter.enter()
                    ran.increment()
                    meter.leave()
                }
            }
            try queue.addOperations(pair, waitUntilFinished: false)
            let finished = queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout)
            #expect(finished, "round \(round) did not finish")
            if !finished { return }
        }
        #expect(meter.peak == 1)
        #expect(ran.value == 2 * Self.rounds)
    }
}
