import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// A queue's workers share their dispatch queue (by default Dispatch's global pool, where Swift's
/// tasks run too) with other work: a worker with a long backlog goes to the back of that queue
/// every so many operations, so the work queued behind it is not held up until the backlog is
/// done.
@Suite("N. Queue: a long backlog shares its dispatch queue", .offThePool)
struct QueueFairnessTests {
    static let operations = 1_000

    /// Runs a backlog of `operations` short operations on a queue over a serial dispatch queue
    /// with the given turn time; the first queues other work on that dispatch queue. Returns how
    /// many operations had run when the other work ran (one value), and how many ran in all.
    private func backlog(turnTime: Duration, label: String) throws -> (seenByOther: [Int], ran: Int) {
        let shared = DispatchQueue(label: label)
        let queue = ConcurrentOperationQueue(name: label, underlyingQueue: shared)
        queue.workerTurnTime = turnTime
        let ran = AtomicCounter()
        let seenByOther = Recorder<Int>()
        let operations = (0..<Self.operations).map { index in
            ClosureOperation(name: "b\(index)") {
                // The first operation queues other work on the same (serial) dispatch queue.
                if index == 0 { shared.async { seenByOther.record(ran.value) } }
                ran.increment()
            }
        }
        queue.isSuspended = true
        try queue.addOperations(operations, waitUntilFinished: false)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        return (shared.sync { seenByOther.values }, ran.value)
    }

    @Test("work queued on the underlying queue runs before a backlog of 1,000 operations is done")
    func otherWorkRunsDuringABacklog() throws {
        // A turn of no time: over after 64 operations, however fast they ran (see `WorkerTurn`).
        let (seenByOther, ran) = try backlog(turnTime: .zero, label: "fairness.shared")
        #expect(seenByOther.count == 1)
        let seen = try #require(seenByOther.first)
        #expect(seen < Self.operations, "the other work waited for the whole backlog (\(seen) operations ran before it)")
        #expect(ran == Self.operations)
    }

    @Test("with the default turn time, a backlog that lasts until other work runs makes way for it")
    func defaultTurnMakesWay() throws {
        let shared = DispatchQueue(label: "fairness.default-turn")
        let queue = ConcurrentOperationQueue(name: "fairness.default-turn", underlyingQueue: shared)
        #expect(queue.workerTurnTime == WorkerTurn.defaultTime)
        let otherRan = Gate()
        let ran = AtomicCounter()
        let seenByOther = Recorder<Int>()
        let cap = 1_000_000
        // Each operation adds the next until the other work has run (or `cap` ran): the backlog
        // lasts as long as the worker keeps the dispatch queue, whatever the machine's speed.
        @Sendable func step(_ index: Int) {
            if index == 0 { shared.async { seenByOther.record(ran.value); otherRan.open() } }
            ran.increment()
            if !otherRan.isOpen && index + 1 < cap {
                queue.addOperation { step(index + 1) }
            }
        }
        queue.addOperation { step(0) }
        #expect(otherRan.wait(timeout: operationTestTimeout), "the other work never ran")
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        let seen = try #require(shared.sync { seenByOther.values.first })
        #expect(seen < cap, "the other work waited for the whole backlog (\(seen) operations)")
    }

    @Test("a turn lasts the queue's turn time: with an hour, a backlog of 1,000 operations does not make way")
    func turnLastsItsTime() throws {
        let (seenByOther, _) = try backlog(turnTime: .seconds(3600), label: "fairness.turn-time")
        #expect(seenByOther == [Self.operations])
    }

    @Test("a worker that goes to the back of its dispatch queue keeps its slot: a limit of 1 still runs one at a time, in order")
    func yieldingKeepsTheSlot() throws {
        let queue = ConcurrentOperationQueue(name: "fairness.serial")
        try queue.setMaxConcurrentOperationCount(1)
        let meter = InFlightMeter()
        let order = Recorder<Int>()
        let operations = (0..<Self.operations).map { index in
            ClosureOperation(name: "s\(index)") {
                meter.enter()
                order.record(index)
                meter.leave()
            }
        }
        queue.isSuspended = true
        try queue.addOperations(operations, waitUntilFinished: false)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(meter.peak == 1)
        #expect(order.values == Array(0..<Self.operations))
    }
}
