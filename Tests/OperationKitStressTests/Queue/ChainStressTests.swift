import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    /// Long chains in every build order, and refused operations that must not cost other work.
    @Suite("Chains and refusals")
    struct Chains {
        enum Order: String, CaseIterable, Sendable {
            case forward
            case reverse

            func indices(_ count: Int) -> [Int] {
                self == .forward ? Array(0..<count) : Array((0..<count).reversed())
            }
        }

        /// Not a timing test: a quadratic graph would still pass, only slowly. What it checks is
        /// that each way of building a long chain runs every operation once, in order.
        @Test(
            "a 20,000-operation chain runs in order, whatever order it is linked and enqueued in",
            arguments: Order.allCases, Order.allCases)
        func longChain(linked: Order, enqueued: Order) throws {
            let count = 20_000
            let clock = LogicalClock()
            let tallies = (0..<count).map { _ in Tally() }
            // Operation i + 1 waits for operation i; the links are made in `linked` order, and
            // the operations added one by one, in `enqueued` order, to a queue that is running.
            let operations = (0..<count).map { index in
                let tally = tallies[index]
                let operation = ClosureOperation(name: "long\(index)") { tally.recordStart(clock) }
                operation.completionBlock = { tally.recordCompletion(clock) }
                return operation
            }
            for index in linked.indices(count) where index > 0 {
                try operations[index].addDependency(operations[index - 1])
            }
            let queue = ConcurrentOperationQueue(name: "long-\(linked)-\(enqueued)")
            for index in enqueued.indices(count) { try queue.addOperation(operations[index]) }
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            let wrong = offenders(count) { index in
                let tally = tallies[index]
                if tally.executionCount != 1 || tally.completionCount != 1 { return true }
                return index > 0 && tally.started <= tallies[index - 1].finished
            }
            #expect(wrong.count == 0, "ran out of order or not exactly once: \(wrong)")
        }

        /// A set of plain operations that record what happened to them.
        struct Recorded {
            let clock = LogicalClock()
            let operations: [ClosureOperation]
            let tallies: [Tally]

            init(_ prefix: String, count: Int) {
                let clock = self.clock
                tallies = (0..<count).map { _ in Tally() }
                operations = tallies.enumerated().map { index, tally in
                    let operation = ClosureOperation(name: "\(prefix)\(index)") { tally.recordStart(clock) }
                    operation.completionBlock = { tally.recordCompletion(clock) }
                    return operation
                }
            }

            /// Indices of operations that did not run exactly once.
            func notRunOnce(_ indices: some Sequence<Int>) -> [Int] {
                indices.filter { tallies[$0].executionCount != 1 || tallies[$0].completionCount != 1 }
            }
        }

        @Test("a cycle refused in the middle of addOperations refuses the whole batch, which can then be added")
        func refusedInTheMiddleOfABatch() throws {
            // 0 waits for 1 and is already enqueued; 1 would wait for 0, so adding it is refused,
            // and with it the batch around it (2..<1_002): all or nothing.
            let recorded = Recorded("batch", count: 1_002)
            let operations = recorded.operations
            let queue = ConcurrentOperationQueue(name: "refused-in-batch")
            try operations[0].addDependency(operations[1])
            try queue.addOperation(operations[0])
            try operations[1].addDependency(operations[0])
            let batch = Array(operations[2..<502]) + [operations[1]] + Array(operations[502...])
            let error = expectOperationError { try queue.addOperations(batch, waitUntilFinished: false) }
            #expect(error?.code == .dependencyCycle)
            #expect(error?.operationNames == ["batch0", "batch1"])
            #expect(queue.operations.map(\.displayName) == ["batch0"])

            // The refused operation can be fixed and the batch added again; then everything drains.
            operations[1].removeDependency(operations[0])
            try queue.addOperations(batch, waitUntilFinished: false)
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(recorded.notRunOnce(0..<operations.count).isEmpty)
            #expect(recorded.tallies[0].started > recorded.tallies[1].finished)
        }

        @Test("several cycles in one batch, closed inside the batch itself: nothing added, the first named")
        func severalRefusalsInOneBatch() throws {
            // For each pair (a, b) = (4k, 4k + 1): b waits for a, a waits for b; both are in the
            // batch. 4k + 2 and 4k + 3 are plain.
            let pairs = 50
            let recorded = Recorded("pairs", count: 4 * pairs)
            let operations = recorded.operations
            for pair in 0..<pairs {
                try operations[4 * pair + 1].addDependency(operations[4 * pair])
                try operations[4 * pair].addDependency(operations[4 * pair + 1])
            }
            let queue = ConcurrentOperationQueue(name: "refusals-in-batch")
            let error = expectOperationError { try queue.addOperations(operations, waitUntilFinished: false) }
            #expect(error?.code == .dependencyCycle)
            #expect(error?.operationNames == ["pairs0", "pairs1"])
            #expect(queue.operationCount == 0)

            // Drop each b's edge: the same batch is accepted, and each a runs after its b.
            for pair in 0..<pairs {
                #expect(recorded.tallies[4 * pair + 1].executionCount == 0)
                operations[4 * pair + 1].removeDependency(operations[4 * pair])
            }
            try queue.addOperations(operations, waitUntilFinished: false)
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(recorded.notRunOnce(0..<operations.count).isEmpty)
            let early = (0..<pairs).filter {
                recorded.tallies[4 * $0].started <= recorded.tallies[4 * $0 + 1].finished
            }
            #expect(early.isEmpty, "ran before its dependency: pairs \(early)")
        }

        @Test("addOperations(waitUntilFinished: true) with a refusal throws at once; the fixed batch is waited for")
        func waitingBatchWithARefusal() throws {
            let recorded = Recorded("waiting", count: 302)
            let operations = recorded.operations
            let queue = ConcurrentOperationQueue(name: "waiting-batch")
            // 0 is enqueued and waits for 1; 1 would wait for 0.
            try operations[0].addDependency(operations[1])
            try queue.addOperation(operations[0])
            try operations[1].addDependency(operations[0])
            // Some of the batch also wait for each other (not for 0 or 1).
            for index in stride(from: 3, to: operations.count, by: 3) {
                try operations[index].addDependency(operations[index - 1])
            }
            let batch = Array(operations[2..<150]) + [operations[1]] + Array(operations[150...])
            let error = expectOperationError { try queue.addOperations(batch, waitUntilFinished: true) }
            #expect(error?.code == .dependencyCycle)
            #expect(queue.operationCount == 1)
            #expect(operations[1...].allSatisfy { !$0.isFinished })
            operations[1].removeDependency(operations[0])
            try queue.addOperations(batch, waitUntilFinished: true)
            // Every operation of the batch had finished when the call returned.
            #expect(operations[1...].allSatisfy { $0.isFinished })
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(recorded.notRunOnce(0..<operations.count).isEmpty)
        }
    }
}
