import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// An operation that measures concurrency and finishes in one of three ways.
final class MeteredOperation: ConcurrentOperation, @unchecked Sendable {
    // No lock of its own: every stored property is an immutable `let`; `meter`, `tally`, `clock`
    // and `returned` synchronise themselves.
    enum Finish: CaseIterable {
        /// `finish()` before `execute()` returns, on the worker.
        case synchronously
        /// `finish()` from a global-queue block, racing the return of `execute()`.
        case racingReturn
        /// `finish()` from a global-queue block that waits until `execute()` is about to return.
        case afterReturn
    }

    let finishing: Finish
    let meter: ConcurrencyMeter
    let tally: Tally
    let clock: LogicalClock
    private let returned = DispatchSemaphore(value: 0)

    init(name: String, finishing: Finish, meter: ConcurrencyMeter, tally: Tally, clock: LogicalClock) {
        self.finishing = finishing
        self.meter = meter
        self.tally = tally
        self.clock = clock
        super.init(name: name)
    }

    override func execute() {
        meter.enter()
        tally.recordStart(clock)
        switch finishing {
        case .synchronously:
            meter.leave()
            tally.recordFinish(finish())
        case .racingReturn:
            DispatchQueue.global().async {
                self.meter.leave()
                self.tally.recordFinish(self.finish())
            }
        case .afterReturn:
            DispatchQueue.global().async {
                // Signalled on the next line of execute(), which cannot block: not a sleep.
                self.returned.wait()
                self.meter.leave()
                self.tally.recordFinish(self.finish())
            }
            returned.signal()
        }
    }
}

extension StressTests {
    @Suite("Concurrency under load")
    struct Concurrency {
        @Test("maxConcurrentOperationCount is never exceeded", arguments: [1, 2, 4])
        func maxConcurrencyHolds(limit: Int) throws {
            let count = Stress.count(10_000)
            var random = SplitMix64(seed: 0xC0FFEE + UInt64(limit))
            let clock = LogicalClock()
            let meter = ConcurrencyMeter()
            let queue = try ConcurrentOperationQueue(name: "limit\(limit)", maxConcurrentOperationCount: limit)
            let operations = (0..<count).map { index in
                let operation = MeteredOperation(
                    name: "metered\(index)", finishing: MeteredOperation.Finish.allCases[random.below(3)],
                    meter: meter, tally: Tally(), clock: clock)
                operation.queuePriority = ConcurrentOperation.QueuePriority.allCases[random.below(5)]
                // Some run at another quality of service than the queue's: after a hop to another
                // global queue, still in the worker's slot.
                if random.chance(10) { operation.qualityOfService = .utility }
                return operation
            }
            // Two threads add at once, in batches and one by one, while operations run.
            let added = onThreads(2, label: "limit\(limit)") { half in
                let mine = operations.indices.filter { $0 % 2 == half }
                var position = 0
                while position < mine.count {
                    let end = min(mine.count, position + 1 + position % 32)
                    let batch = mine[position..<end].map { operations[$0] }
                    if batch.count == 1 {
                        try? queue.addOperation(batch[0])
                    } else {
                        try? queue.addOperations(batch, waitUntilFinished: false)
                    }
                    position = end
                }
            }
            #expect(added)
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(meter.peak <= limit, "\(meter.peak) operations in flight with a limit of \(limit)")
            #expect(meter.peak >= 1)
            #expect(meter.entered == count)
            #expect(meter.inFlight == 0)
            let wrong = offenders(count) { operations[$0].tally.executionCount != 1 || !operations[$0].isFinished }
            #expect(wrong.count == 0, "did not run exactly once: \(wrong)")
        }

        @Test("changing the limit under load never exceeds the highest limit set")
        func changingLimitUnderLoad() throws {
            let count = Stress.count(10_000)
            var random = SplitMix64(seed: 0x11A1)
            let clock = LogicalClock()
            let meter = ConcurrencyMeter()
            let queue = try ConcurrentOperationQueue(name: "changing-limit", maxConcurrentOperationCount: 1)
            let operations = (0..<count).map { index in
                MeteredOperation(
                    name: "changing\(index)", finishing: MeteredOperation.Finish.allCases[random.below(3)],
                    meter: meter, tally: Tally(), clock: clock)
            }
            // Add in five slices, changing the limit after each while the previous ones run.
            let limits = [3, 1, 2, 3, 1]
            let slice = (count + limits.count - 1) / limits.count
            for (round, limit) in limits.enumerated() {
                let range = min(count, round * slice)..<min(count, (round + 1) * slice)
                try queue.addOperations(Array(operations[range]), waitUntilFinished: false)
                try queue.setMaxConcurrentOperationCount(limit)
            }
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(meter.peak <= 3)
            #expect(meter.entered == count)
            let wrong = offenders(count) { operations[$0].tally.executionCount != 1 }
            #expect(wrong.count == 0, "did not run exactly once: \(wrong)")
        }

        @Test("8 threads × 2,000 operations added at once, with dependencies across threads")
        func concurrentAddsAcrossThreads() throws {
            let threads = 8
            let perThread = Stress.count(2_000)
            let count = threads * perThread
            var random = SplitMix64(seed: 0xADD5)
            let clock = LogicalClock()
            let tallies = (0..<count).map { _ in Tally() }
            // Operation g belongs to thread g % 8, which adds it as its (g / 8)-th operation.
            let operations = (0..<count).map { index -> ClosureOperation in
                let tally = tallies[index]
                let operation = ClosureOperation(name: "added\(index)") { tally.recordStart(clock) }
                operation.completionBlock = { tally.recordCompletion(clock) }
                return operation
            }
            // Dependencies set before adding: up to two on lower-numbered operations, mostly of
            // other threads, so a dependent is often added before its dependency.
            var edges: [[Int]] = Array(repeating: [], count: count)
            for index in 1..<count {
                for _ in 0..<random.below(3) {
                    let dependency = random.below(index)
                    try operations[index].addDependency(operations[dependency])
                    edges[index].append(dependency)
                }
            }
            // Dependencies added later, by the adding thread to one of its operations added some
            // steps before, racing the queue starting it: accepted ones must be honoured, refused
            // ones must say it was too late. At step `index`, `lateEdges[index]` is added.
            let lateEdges: [(dependent: Int, dependency: Int)?] = (0..<count).map { index in
                let dependent = index - threads * (1 + random.below(random.chance(50) ? 4 : 200))
                guard dependent > 0, random.chance(15) else { return nil }
                return (dependent, random.below(dependent))
            }
            let lateAccepted = Recorder<Int>()
            let unexpectedErrors = Recorder<String>()
            let queue = ConcurrentOperationQueue(name: "concurrent-adds")
            let added = onThreads(threads, label: "concurrent-adds") { thread in
                for index in stride(from: thread, to: count, by: threads) {
                    do {
                        try queue.addOperation(operations[index])
                    } catch {
                        unexpectedErrors.record("add \(index): \(error)")
                    }
                    guard let (dependent, dependency) = lateEdges[index] else { continue }
                    do throws(OperationError) {
                        try operations[dependent].addDependency(operations[dependency])
                        lateAccepted.record(index)
                    } catch {
                        if error.code != .dependentAlreadyExecuting && error.code != .dependentAlreadyFinished {
                            unexpectedErrors.record("late dependency \(dependent) → \(dependency): \(error)")
                        }
                    }
                }
            }
            #expect(added)
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(unexpectedErrors.values.isEmpty, "\(unexpectedErrors.values.prefix(10))")
            for index in lateAccepted.values {
                if let (dependent, dependency) = lateEdges[index] { edges[dependent].append(dependency) }
            }
            let wrongCount = offenders(count) {
                tallies[$0].executionCount != 1 || tallies[$0].completionCount != 1
            }
            #expect(wrongCount.count == 0, "did not run exactly once: \(wrongCount)")
            let early = offenders(count) { index in
                edges[index].contains { tallies[index].started <= tallies[$0].finished }
            }
            #expect(early.count == 0, "started before a dependency finished: \(early)")
        }
    }
}
