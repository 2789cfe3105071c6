import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// Counts the procedures of one mutual-exclusion category that are running, without locks.
final class CategoryMeter: Sendable {
    let name: String
    private let current = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)
    private let entries = Atomic<Int>(0)

    init(name: String) { self.name = name }

    func enter() {
        let now = current.add(1, ordering: .relaxed).newValue
        highest.max(now, ordering: .relaxed)
        entries.add(1, ordering: .relaxed)
    }

    func leave() { current.subtract(1, ordering: .relaxed) }

    var peak: Int { highest.load(ordering: .relaxed) }
    var entered: Int { entries.load(ordering: .relaxed) }
}

extension StressTests {
    /// `MutuallyExclusive` across two queues, with procedures added from several threads, random
    /// dependencies between them, conditions decided later, and cancellations.
    @Suite("Procedure mutual exclusivity")
    struct ProcedureExclusivity {
        @Test("at most one procedure per category runs at a time across two queues; all finish")
        func exclusivityAcrossQueues() throws {
            let count = Stress.count(2_000, minimum: 100)
            var random = SplitMix64(seed: 0x5EED_0002)
            let clock = RelaxedClock()
            let racers = DispatchGroup()
            let conditionQueue = DispatchQueue(label: "exclusive.conditions", attributes: .concurrent)
            // Unique names: the register of categories is process-wide, and other tests may run.
            let meters = (0..<3).map { CategoryMeter(name: "ProcedureExclusivityStress.category\($0)") }
            let queues = try (0..<2).map { index in
                try ConcurrentOperationQueue(name: "exclusive\(index)", maxConcurrentOperationCount: 3)
            }
            let allFinished = Latch(count: count)
            let finishedCount = Atomic<Int>(0)
            let tallies = (0..<count).map { _ in WorkTally() }

            // Each procedure is in one category, or (one in five) in two.
            let categories: [[Int]] = (0..<count).map { _ in
                let first = random.below(3)
                return random.chance(20) ? [first, (first + 1 + random.below(2)) % 3] : [first]
            }
            let procedures = try (0..<count).map { index -> ClosureProcedure<Void> in
                let mine = categories[index].map { meters[$0] }
                let tally = tallies[index]
                let finishLater = index % 3 != 0
                let procedure = ClosureProcedure<Void>(name: "exclusive\(index)", asynchronous: { procedure in
                    tally.recordStart(clock)
                    for meter in mine { meter.enter() }
                    // Hold the categories for a moment, and sometimes until after execute() returned:
                    // they are held until the procedure finishes.
                    for _ in 0..<(index % 4) { yieldThread() }
                    if finishLater {
                        racers.enter()
                        DispatchQueue.global().async {
                            for meter in mine { meter.leave() }
                            tally.recordFinish(procedure.finish())
                            racers.leave()
                        }
                    } else {
                        for meter in mine { meter.leave() }
                        tally.recordFinish(procedure.finish())
                    }
                })
                procedure.completionBlock = {
                    tally.recordCompletion(clock)
                    finishedCount.add(1, ordering: .relaxed)
                    allFinished.countDown()
                }
                for category in categories[index] {
                    try procedure.addCondition(MutuallyExclusive(category: meters[category].name))
                }
                // Some are also held back by a condition decided later on another thread.
                if index % 5 == 1 { try procedure.addCondition(DeferredCondition(failure: nil, on: conditionQueue)) }
                return procedure
            }
            // Random edges from earlier to later procedures, in the same category or not, and
            // often across the two queues.
            var dependencies: [[Int]] = Array(repeating: [], count: count)
            for index in 1..<count where random.chance(35) {
                for _ in 0..<(1 + random.below(2)) {
                    let dependency = max(0, index - 1 - random.below(40))
                    if !dependencies[index].contains(dependency) { dependencies[index].append(dependency) }
                }
            }
            for (index, list) in dependencies.enumerated() {
                for dependency in list { try procedures[index].addDependency(procedures[dependency]) }
            }
            // One in ten is cancelled, around the time the procedures near it finish: while
            // waiting for dependencies, for its condition or category, running, or finished.
            let cancelled = (0..<count).filter { _ in random.chance(10) }
                .map { (index: $0, at: min(count - 1, max(0, $0 + random.below(150) - 100))) }
                .sorted { $0.at < $1.at }

            // Three threads add (each its share, to both queues); one cancels at random times.
            let threadsFinished = onThreads(4, label: "exclusive") { role in
                if role == 3 {
                    let deadline = stressDeadline()
                    for target in cancelled {
                        guard spin(until: deadline, { finishedCount.load(ordering: .relaxed) >= target.at }) else { return }
                        procedures[target.index].cancel()
                    }
                    return
                }
                // One in four alone, the others in batches of 8; alternately to each queue.
                var batch: [ConcurrentOperation] = []
                var batches = role
                for index in stride(from: role, to: count, by: 3) {
                    if index % 4 == 0 {
                        try? queues[index % 2].addOperation(procedures[index])
                        continue
                    }
                    batch.append(procedures[index])
                    if batch.count == 8 {
                        try? queues[batches % 2].addOperations(batch, waitUntilFinished: false)
                        batches += 1
                        batch = []
                    }
                }
                try? queues[batches % 2].addOperations(batch, waitUntilFinished: false)
            }
            #expect(threadsFinished)
            try #require(
                allFinished.wait(timeout: Stress.timeout),
                "deadlock or lost procedure: \(allFinished.count) of \(count) did not finish")
            for queue in queues { try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout)) }
            try #require(racers.wait(timeout: .now() + .seconds(60)) == .success)

            for meter in meters {
                #expect(meter.peak <= 1, "\(meter.name): \(meter.peak) procedures ran at once")
            }
            let wrong = problems(count) { index in
                let procedure = procedures[index]
                let tally = tallies[index]
                if !procedure.isFinished || tally.completionCount != 1 {
                    return "finished \(procedure.isFinished), completion block ran \(tally.completionCount)×"
                }
                if tally.executionCount > 1 { return "ran \(tally.executionCount)×" }
                if tally.executionCount == 0 && !procedure.isCancelled { return "did not run, not cancelled" }
                if tally.executionCount == 1 && tally.finishWinCount != 1 { return "finish() won \(tally.finishWinCount)×" }
                if tally.executionCount == 1 {
                    for dependency in dependencies[index] where tally.started <= tallies[dependency].completed {
                        return "started before its dependency #\(dependency) finished"
                    }
                }
                return nil
            }
            #expect(wrong.count == 0, "wrong outcome: \(wrong)")

            // Every category was given back: one more procedure in each (and one in all three) runs.
            let after = Latch(count: 4)
            let probes = (0..<4).map { probe in
                let procedure = ClosureProcedure<Void> { after.countDown() }
                for category in (probe < 3 ? [probe] : [0, 1, 2]) {
                    try? procedure.addCondition(MutuallyExclusive(category: meters[category].name))
                }
                return procedure
            }
            try queues[0].addOperations(probes, waitUntilFinished: false)
            #expect(after.wait(timeout: Stress.timeout), "a category was never given back")
            #expect(queues[0].waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
        }
    }
}
