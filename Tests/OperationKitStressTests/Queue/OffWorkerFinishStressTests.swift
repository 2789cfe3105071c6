import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// Operations that finish on another thread right after (or just before) `execute()` returns
    /// on their worker: the slot hand-off between the worker and `finish()` must neither lose the
    /// wake-up of a dependent that `finish()` made ready (a chain would stop with the queue still
    /// counting its operations, and nothing left to run them) nor leak or double a slot.
    ///
    /// Each round is one queue with one chain or one chain of diamonds, so that a ready operation
    /// nobody will look for is never rescued by unrelated work. A thread polls the queue meanwhile
    /// (each poll takes the queue's lock), so that the finish and the worker often wait for that
    /// lock together and take it in either order.
    ///
    /// Before the fix (the finish settled the slot with its worker before taking the queue's lock)
    /// `racingReturn` stopped a chain in 8 runs out of 10 of this suite; see "Slot hand-off" in
    /// Documentation/Architecture.md.
    @Suite("Off-worker finishes")
    struct OffWorkerFinishes {
        /// How `execute()` gets its operation finished.
        enum Finisher: String, CaseIterable, Sendable, CustomTestStringConvertible {
            /// Hands `finish()` to `DispatchQueue.global().async` and returns.
            case dispatch
            /// Hands `finish()` to an unstructured `Task` and returns.
            case task
            /// Hands `finish()` to another thread, then returns just as that finish is between its
            /// completion block and the queue's part (a spin of random length after the completion
            /// block ran), so that the worker's exchange and the finish race each other.
            case racingReturn

            var testDescription: String { rawValue }
        }

        enum Shape: String, CaseIterable, Sendable {
            /// `length` operations, each waiting for the one before.
            case chain
            /// root → `width` operations → join, the join being the next root, `length / (width + 1)` times.
            case diamonds
        }

        /// One round's operations, their tallies, and what must hold afterwards.
        struct Round {
            let operations: [ConcurrentOperation]
            let tallies: [Tally]
            /// `predecessors[i]`: the indices operation `i` waits for.
            let predecessors: [[Int]]
        }

        static let limits = [1, 2, 4, 64]

        /// Rounds per test: each round is a fresh queue, drained before the next one.
        static let rounds = Stress.count(12, minimum: 2)
        /// Operations per round.
        static let length = Stress.count(240, minimum: 24)
        static let width = 6

        /// The graph of `shape` over operations made by `make(index)`.
        static func build(_ shape: Shape, count: Int, make: (Int) -> ConcurrentOperation) throws -> ([ConcurrentOperation], [[Int]]) {
            var predecessors: [[Int]] = []
            switch shape {
            case .chain:
                predecessors = (0..<count).map { $0 == 0 ? [] : [$0 - 1] }
            case .diamonds:
                // 0 is a root; then `width` middles on the last root, then a join on all of them.
                var lastRoot = 0
                predecessors = [[]]
                while predecessors.count < count {
                    let middles = Array(predecessors.count..<(predecessors.count + width))
                    for _ in middles { predecessors.append([lastRoot]) }
                    lastRoot = predecessors.count
                    predecessors.append(middles)
                }
            }
            let operations = (0..<predecessors.count).map(make)
            for (index, dependencies) in predecessors.enumerated() {
                for dependency in dependencies { try operations[index].addDependency(operations[dependency]) }
            }
            return (operations, predecessors)
        }

        /// A round of `ClosureOperation(asynchronous:)`s that finish through `finisher`.
        static func closureRound(
            _ shape: Shape, finisher: Finisher, clock: LogicalClock, meter: ConcurrencyMeter,
            finishingThread: DispatchQueue, seed: UInt64
        ) throws -> Round {
            var random = SplitMix64(seed: seed)
            var tallies: [Tally] = []
            let (operations, predecessors) = try build(shape, count: length) { index in
                let tally = Tally()
                tallies.append(tally)
                // 0 to 1,023 spins, spread over powers of two: the finish's way from its
                // completion block to the queue's lock takes from a few to a few hundred.
                let jitter = random.below(1 << random.below(11))
                let completed = Atomic<Bool>(false)
                let operation = ClosureOperation(name: "\(finisher)\(index)", asynchronous: { operation in
                    meter.enter()
                    tally.recordStart(clock)
                    switch finisher {
                    case .dispatch:
                        DispatchQueue.global().async {
                            meter.leave()
                            tally.recordFinish(operation.finish())
                        }
                    case .task:
                        Task {
                            meter.leave()
                            tally.recordFinish(operation.finish())
                        }
                    case .racingReturn:
                        finishingThread.async {
                            meter.leave()
                            tally.recordFinish(operation.finish())
                        }
                        // Wait (spinning: a blocked thread wakes far too late to race) for the
                        // completion block, then a little more, then return to the worker.
                        var spins = 0
                        while !completed.load(ordering: .acquiring) {
                            spins += 1
                            if spins > 2_000_000 {
                                // The finishing thread is descheduled: stop burning the core.
                                while !completed.load(ordering: .acquiring) { yieldThread() }
                            }
                        }
                        for _ in 0..<jitter { _ = completed.load(ordering: .relaxed) }
                    }
                })
                operation.completionBlock = {
                    tally.recordCompletion(clock)
                    completed.store(true, ordering: .releasing)
                }
                return operation
            }
            return Round(operations: operations, tallies: tallies, predecessors: predecessors)
        }

        /// A round of `AsyncOperation`s (their task finishes them after `execute()` returned, or
        /// while it returns).
        static func asyncRound(_ shape: Shape, clock: LogicalClock, meter: ConcurrencyMeter) throws -> Round {
            var tallies: [Tally] = []
            let (operations, predecessors) = try build(shape, count: length) { index in
                let tally = Tally()
                tallies.append(tally)
                let operation = AsyncOperation(name: "async\(index)") { () async in
                    meter.enter()
                    tally.recordStart(clock)
                    meter.leave()
                }
                operation.completionBlock = { tally.recordCompletion(clock) }
                return operation
            }
            return Round(operations: operations, tallies: tallies, predecessors: predecessors)
        }

        /// Adds `round` to a fresh queue limited to `limit`, waits for it while a thread polls the
        /// queue, and checks that every operation ran once, after its predecessors, within the limit.
        static func run(
            _ round: Round, limit: Int, meter: ConcurrencyMeter, label: String,
            sourceLocation: SourceLocation = #_sourceLocation
        ) throws {
            let queue = try ConcurrentOperationQueue(name: label, maxConcurrentOperationCount: limit)
            let stop = Atomic<Bool>(false)
            let pollerDone = Latch()
            DispatchQueue(label: "\(label).poller").async {
                while !stop.load(ordering: .relaxed) { _ = queue.operationCount }
                pollerDone.countDown()
            }
            try queue.addOperations(round.operations, waitUntilFinished: false)
            let drained = drain(queue, limit: limit, label: label, sourceLocation: sourceLocation)
            stop.store(true, ordering: .relaxed)
            #expect(pollerDone.wait(timeout: Stress.timeout), sourceLocation: sourceLocation)
            guard drained else { return }
            let wrong = offenders(round.tallies.count) { index in
                let tally = round.tallies[index]
                if tally.executionCount != 1 || tally.completionCount != 1 || tally.finishWinCount > 1 { return true }
                return round.predecessors[index].contains { tally.started <= round.tallies[$0].finished }
            }
            #expect(wrong.count == 0, "\(label): not run exactly once, or before a predecessor: \(wrong)", sourceLocation: sourceLocation)
            #expect(meter.peak <= limit, "\(label): \(meter.peak) operations in flight", sourceLocation: sourceLocation)
            #expect(meter.inFlight == 0, sourceLocation: sourceLocation)
        }

        /// Waits until `queue` is empty. Fails — never hangs — when its operation count stops
        /// changing for `stall` (a lost wake-up: operations counted, none running) or the whole
        /// wait exceeds the stress timeout. On a stall it then asks the queue to reserve workers
        /// again (setting the same limit does), to tell a lost wake-up from a leaked slot, and
        /// waits for it so that the round's operations are released.
        static func drain(
            _ queue: ConcurrentOperationQueue, limit: Int, label: String,
            stall: Duration = .seconds(5), sourceLocation: SourceLocation
        ) -> Bool {
            let clock = ContinuousClock()
            let deadline = clock.now + Stress.timeout
            var lastCount = queue.operationCount
            var lastChange = clock.now
            while !queue.waitUntilAllOperationsAreFinishedBlocking(timeout: .milliseconds(100)) {
                let count = queue.operationCount
                if count != lastCount {
                    lastCount = count
                    lastChange = clock.now
                    if clock.now < deadline { continue }
                } else if clock.now - lastChange < stall && clock.now < deadline {
                    continue
                }
                try? queue.setMaxConcurrentOperationCount(limit)
                let rescued = queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout)
                Issue.record(
                    """
                    \(label): stuck with \(count) operations counted and none running; \
                    \(rescued ? "a new reservation of workers drained it: a lost wake-up" : "still stuck after reserving workers again")
                    """, sourceLocation: sourceLocation)
                return false
            }
            return true
        }

        @Test(
            "ClosureOperations finished from another thread, in chains and diamonds, at limits 1, 2, 4 and 64",
            arguments: Finisher.allCases, limits)
        func closureOperations(finisher: Finisher, limit: Int) throws {
            let finishingThread = DispatchQueue(label: "off-worker.finisher")
            for round in 0..<Self.rounds {
                for shape in Shape.allCases {
                    let clock = LogicalClock()
                    let meter = ConcurrencyMeter()
                    let label = "\(finisher)-\(shape)-limit\(limit)-round\(round)"
                    let work = try Self.closureRound(
                        shape, finisher: finisher, clock: clock, meter: meter, finishingThread: finishingThread,
                        seed: UInt64(round * 1_000 + limit))
                    try Self.run(work, limit: limit, meter: meter, label: label)
                }
            }
        }

        @Test("AsyncOperations in chains and diamonds, at limits 1, 2, 4 and 64", arguments: limits)
        func asyncOperations(limit: Int) throws {
            for round in 0..<Self.rounds {
                for shape in Shape.allCases {
                    let clock = LogicalClock()
                    let meter = ConcurrencyMeter()
                    let work = try Self.asyncRound(shape, clock: clock, meter: meter)
                    try Self.run(work, limit: limit, meter: meter, label: "async-\(shape)-limit\(limit)-round\(round)")
                }
            }
        }
    }
}
