import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    /// `finish()`, `cancel()` and `cancelAllOperations()` racing with starting, finishing and
    /// adding: every effect must happen exactly once per operation, and the queue must drain.
    @Suite("Exactly once under races")
    struct ExactlyOnce {
        /// Checks the per-operation outcome that every race test expects:
        /// - the work ran at most once, and not at all only if the operation was cancelled;
        /// - `finish()` returned `true` at most once, and exactly once if the work ran (then only
        ///   our calls can finish it; an operation cancelled before it started is finished by the
        ///   queue, unless one of our stray `finish()` calls wins that race);
        /// - the completion block ran exactly once and the operation is finished.
        static func checkOutcomes(
            _ operations: [ConcurrentOperation], _ tallies: [Tally],
            sourceLocation: SourceLocation = #_sourceLocation
        ) {
            let count = operations.count
            let ranTwice = offenders(count) { tallies[$0].executionCount > 1 }
            let skippedUncancelled = offenders(count) {
                tallies[$0].executionCount == 0 && !operations[$0].isCancelled
            }
            let finishWins = offenders(count) {
                let wins = tallies[$0].finishWinCount
                return wins > 1 || (tallies[$0].executionCount == 1 && wins != 1)
            }
            let completions = offenders(count) { tallies[$0].completionCount != 1 }
            let unfinished = offenders(count) { !operations[$0].isFinished }
            #expect(ranTwice.count == 0, "work ran more than once: \(ranTwice)", sourceLocation: sourceLocation)
            #expect(
                skippedUncancelled.count == 0, "work skipped though not cancelled: \(skippedUncancelled)",
                sourceLocation: sourceLocation)
            #expect(finishWins.count == 0, "finish() won the wrong number of times: \(finishWins)",
                    sourceLocation: sourceLocation)
            #expect(completions.count == 0, "completion block not run exactly once: \(completions)",
                    sourceLocation: sourceLocation)
            #expect(unfinished.count == 0, "not finished: \(unfinished)", sourceLocation: sourceLocation)
        }

        @Test(
            "finish() and cancel() race from many threads: each effect happens once per operation",
            arguments: [1, 3, ConcurrentOperationQueue.defaultMaxConcurrentOperationCount])
        func finishAndCancelRace(maxConcurrentOperationCount: Int) throws {
            let count = Stress.count(10_000)
            let clock = LogicalClock()
            let racers = DispatchGroup()
            let tallies = (0..<count).map { _ in Tally() }
            let queue = try ConcurrentOperationQueue(
                name: "finish-cancel-race", maxConcurrentOperationCount: maxConcurrentOperationCount)
            let operations = (0..<count).map { index -> ClosureOperation in
                let tally = tallies[index]
                let operation = ClosureOperation(name: "race\(index)", asynchronous: { operation in
                    tally.recordStart(clock)
                    if index % 2 == 0 {
                        // Finish before execute() returns, from several threads at once. (The
                        // group covers the recording: the queue may drain before the winning
                        // racer has recorded its win.)
                        racers.enter()
                        DispatchQueue.concurrentPerform(iterations: 4) { racer in
                            if racer % 2 == 1 { operation.cancel() }
                            tally.recordFinish(operation.finish())
                        }
                        racers.leave()
                    } else {
                        // Finish later, from global-queue blocks racing each other and the worker.
                        for racer in 0..<3 {
                            racers.enter()
                            DispatchQueue.global().async {
                                if racer != 0 { operation.cancel() }
                                tally.recordFinish(operation.finish())
                                racers.leave()
                            }
                        }
                    }
                })
                operation.completionBlock = { tally.recordCompletion(clock) }
                // Another quality of service than the queue's: executes after a hop to another
                // global queue, holding the worker's slot.
                if index % 7 == 0 { operation.qualityOfService = .utility }
                return operation
            }

            // One thread adds, one cancels every third operation, one calls finish() on every
            // fifth (too early, mostly, which must change nothing), all at the same time.
            let threadsFinished = onThreads(3, label: "finish-cancel-race") { role in
                switch role {
                case 0:
                    var index = 0
                    while index < count {
                        let end = min(count, index + 1 + index % 64)
                        try? queue.addOperations(Array(operations[index..<end]), waitUntilFinished: false)
                        index = end
                    }
                case 1:
                    for index in stride(from: 0, to: count, by: 3) { operations[index].cancel() }
                default:
                    for index in stride(from: 0, to: count, by: 5) {
                        tallies[index].recordFinish(operations[index].finish())
                    }
                }
            }
            #expect(threadsFinished)
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(racers.wait(timeout: .now() + .seconds(60)) == .success)
            #expect(queue.operationCount == 0)
            Self.checkOutcomes(operations, tallies)
        }

        /// `finish()` is legal from any thread once the operation has started, so it can come
        /// between the queue starting the operation and `execute()` reading the closure. The
        /// closure must still run once ("Runs once, unless the operation is cancelled before it
        /// starts"), and the two threads must not race on it. Runs in a child process (an exit
        /// test), so that a crash fails this test instead of ending the whole run.
        @Test("finish() from another thread as the queue starts an operation: the closure runs once")
        func finishRacesWithStart() async {
            let count = Stress.count(4_000)
            // A signal is a crash; exit code 66 is a thread-sanitizer report.
            await #expect(
                processExitsWith: .success,
                "the child crashed (a signal) or the thread sanitizer reported (exit code 66)"
            ) { [count = count as Int] in
                try ExactlyOnce.raceFinishWithStart(count: count)
            }
        }

        static func raceFinishWithStart(count: Int) throws {
            let clock = LogicalClock()
            let tallies = (0..<count).map { _ in Tally() }
            let queue = try ConcurrentOperationQueue(name: "finish-start-race", maxConcurrentOperationCount: 1)
            let operations = tallies.enumerated().map { index, tally in
                let operation = ClosureOperation(name: "early\(index)") { tally.recordStart(clock) }
                operation.completionBlock = { tally.recordCompletion(clock) }
                return operation
            }
            // One thread calls finish() on each operation, in the order the serial queue starts
            // them, until it is finished: it often wins somewhere inside the queue's start.
            let stop = Gate()
            let earlyWins = Recorder<Int>()
            let racing = onThreads(2, label: "finish-start-race") { role in
                if role == 0 {
                    try? queue.addOperations(operations, waitUntilFinished: false)
                    return
                }
                for (index, operation) in operations.enumerated() {
                    while !operation.isFinished && !stop.isOpen {
                        if operation.finish() { earlyWins.record(index) }
                    }
                }
            }
            let drained = queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout)
            stop.open()
            #expect(racing)
            try #require(drained)
            let wrong = offenders(count) { tallies[$0].executionCount != 1 || tallies[$0].completionCount != 1 }
            let early = earlyWins.values.count
            #expect(wrong.count == 0, "closure not run exactly once (\(early) early finishes): \(wrong)")
        }

        @Test("cancelAllOperations races with adds and with finishing", arguments: [2, 64])
        func cancelAllRacesWithAddsAndFinishing(maxConcurrentOperationCount: Int) throws {
            let count = Stress.count(10_000)
            let clock = LogicalClock()
            let racers = DispatchGroup()
            let tallies = (0..<count).map { _ in Tally() }
            let queue = try ConcurrentOperationQueue(
                name: "cancel-all-race", maxConcurrentOperationCount: maxConcurrentOperationCount)
            let operations = (0..<count).map { index -> ClosureOperation in
                let tally = tallies[index]
                let operation = ClosureOperation(name: "cancelAll\(index)", asynchronous: { operation in
                    tally.recordStart(clock)
                    for _ in 0..<2 {
                        racers.enter()
                        DispatchQueue.global().async {
                            tally.recordFinish(operation.finish())
                            racers.leave()
                        }
                    }
                })
                operation.completionBlock = { tally.recordCompletion(clock) }
                return operation
            }
            // Every fourth operation waits for the one before it.
            let dependencyOf: [Int?] = (0..<count).map { $0 % 4 == 3 ? $0 - 1 : nil }
            for (index, dependency) in dependencyOf.enumerated() {
                if let dependency { try operations[index].addDependency(operations[dependency]) }
            }

            let addsDone = Gate()
            let threadsFinished = onThreads(2, label: "cancel-all-race") { role in
                if role == 0 {
                    for (index, operation) in operations.enumerated() {
                        if index % 100 == 99 {
                            try? queue.addOperations([operation], waitUntilFinished: false)
                        } else {
                            try? queue.addOperation(operation)
                        }
                    }
                    addsDone.open()
                } else {
                    while !addsDone.isOpen {
                        queue.cancelAllOperations()
                    }
                    queue.cancelAllOperations()
                }
            }
            #expect(threadsFinished)
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(racers.wait(timeout: .now() + .seconds(60)) == .success)
            Self.checkOutcomes(operations, tallies)

            // An operation that executed did so after its dependency had finished (cancelled or not).
            let early = offenders(count) { index in
                guard let dependency = dependencyOf[index], tallies[index].executionCount == 1 else { return false }
                return tallies[index].started <= tallies[dependency].finished
            }
            #expect(early.count == 0, "started before its dependency finished: \(early)")
        }

        @Test("cancel() races with the queue reaching operations whose dependencies are pending")
        func cancelRacesWithPendingDependencies() throws {
            // Fan-in: each of `count` dependents waits for one of 8 gate operations, which the
            // test finishes only after every cancel was issued. Half the dependents are cancelled
            // while they wait: they must finish at once, without executing. The rest must run
            // after their gate.
            let count = Stress.count(10_000)
            let clock = LogicalClock()
            let gatesStarted = Latch(count: 8)
            let tallies = (0..<count).map { _ in Tally() }
            let gateTallies = (0..<8).map { _ in Tally() }
            let queue = ConcurrentOperationQueue(name: "cancel-pending-race")
            let gates = (0..<8).map { index -> ClosureOperation in
                let tally = gateTallies[index]
                let gate = ClosureOperation(name: "gate\(index)", asynchronous: { _ in
                    tally.recordStart(clock)
                    gatesStarted.countDown()
                })
                gate.completionBlock = { tally.recordCompletion(clock) }
                return gate
            }
            let dependents = (0..<count).map { index -> ClosureOperation in
                let tally = tallies[index]
                let operation = ClosureOperation(name: "pending\(index)") { tally.recordStart(clock) }
                operation.completionBlock = { tally.recordCompletion(clock) }
                return operation
            }
            for (index, dependent) in dependents.enumerated() { try dependent.addDependency(gates[index % 8]) }
            try queue.addOperations(gates, waitUntilFinished: false)

            let threadsFinished = onThreads(2, label: "cancel-pending-race") { role in
                if role == 0 {
                    for dependent in dependents { try? queue.addOperation(dependent) }
                } else {
                    for index in stride(from: 1, to: count, by: 2) { dependents[index].cancel() }
                }
            }
            #expect(threadsFinished)
            // Every cancelled dependent finishes while the gates still hold the others back.
            let cancelled = stride(from: 1, to: count, by: 2).map { dependents[$0] }
            let cancelledFinished = cancelled.allSatisfy { $0.waitUntilFinishedBlocking(timeout: Stress.timeout) }
            #expect(cancelledFinished)
            let ranEarly = offenders(count) { tallies[$0].executionCount != 0 }
            #expect(ranEarly.count == 0, "ran before its dependency finished: \(ranEarly)")
            try #require(gatesStarted.wait(timeout: Stress.timeout))
            for (gate, tally) in zip(gates, gateTallies) { tally.recordFinish(gate.finish()) }
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))

            Self.checkOutcomes(gates, gateTallies)
            let wrong = offenders(count) { index in
                let tally = tallies[index]
                if tally.completionCount != 1 || !dependents[index].isFinished { return true }
                if index % 2 == 1 { return tally.executionCount != 0 }
                return tally.executionCount != 1 || tally.started <= gateTallies[index % 8].finished
            }
            #expect(wrong.count == 0, "wrong outcome for dependents: \(wrong)")
        }
    }
}
