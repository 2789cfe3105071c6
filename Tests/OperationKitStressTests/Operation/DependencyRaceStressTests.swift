import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    /// Edges that change while their dependency finishes: the registration handshake between a
    /// dependent and a finishing dependency must neither lose a wake-up (the dependent would never
    /// run, and the queue never drain) nor count one twice (it would run too early).
    @Suite("Dependency races")
    struct DependencyRaces {
        /// `count` dependencies, half in `queue` and half in `other`, finishing at once or from
        /// another thread; and `count` dependents in `queue`, all held back by `hold` until the
        /// test finishes it.
        struct Fixture {
            let count: Int
            let clock = LogicalClock()
            let queue = ConcurrentOperationQueue(name: "race-dependents")
            let other = ConcurrentOperationQueue(name: "race-dependencies")
            let hold: ClosureOperation
            let holdTally = Tally()
            let holdStarted = Latch()
            let dependencies: [ClosureOperation]
            let dependencyTallies: [Tally]
            let dependents: [ClosureOperation]
            let dependentTallies: [Tally]

            init(count: Int) {
                self.count = count
                let clock = clock
                let holdTally = holdTally
                let holdStarted = holdStarted
                hold = ClosureOperation(name: "hold", asynchronous: { _ in
                    holdTally.recordStart(clock)
                    holdStarted.countDown()
                })
                hold.completionBlock = { holdTally.recordCompletion(clock) }
                dependencyTallies = (0..<count).map { _ in Tally() }
                dependentTallies = (0..<count).map { _ in Tally() }
                dependencies = dependencyTallies.enumerated().map { index, tally in
                    let operation = ClosureOperation(name: "dependency\(index)", asynchronous: { operation in
                        tally.recordStart(clock)
                        if index % 4 < 2 {
                            operation.finish()
                        } else {
                            DispatchQueue.global().async { operation.finish() }
                        }
                    })
                    operation.completionBlock = { tally.recordCompletion(clock) }
                    return operation
                }
                dependents = dependentTallies.enumerated().map { index, tally in
                    let operation = ClosureOperation(name: "dependent\(index)") { tally.recordStart(clock) }
                    operation.completionBlock = { tally.recordCompletion(clock) }
                    return operation
                }
            }

            /// On `threads` threads (each taking every `threads`-th index), adds each dependency to
            /// a queue (even ones to `queue`, odd ones to `other`) and soon after, 0 to 47 steps
            /// later, does `action(index)` for it: that races the dependency starting and finishing
            /// on the queues' workers.
            func race(_ label: String, threads: Int, _ action: @escaping @Sendable (Int) -> Void) -> Bool {
                let dependencies = dependencies
                let (queue, other, count) = (queue, other, count)
                return onThreads(threads, label: label) { thread in
                    let mine = Array(stride(from: thread, to: count, by: threads))
                    // Step p adds dependency mine[p], then acts on each mine[q] with q + 7q % 48 == p.
                    var due: [[Int]] = Array(repeating: [], count: mine.count + 48)
                    for position in mine.indices { due[position + position * 7 % 48].append(mine[position]) }
                    for step in due.indices {
                        if step < mine.count {
                            let index = mine[step]
                            try? (index % 2 == 0 ? queue : other).addOperation(dependencies[index])
                        }
                        for index in due[step] { action(index) }
                    }
                }
            }

            /// Finishes `hold`, waits for both queues, and checks that every operation ran once,
            /// each dependent after `hold` and, if `waitedFor(index)`, after its dependency.
            func finishAndCheck(
                waitedFor: (Int) -> Bool, sourceLocation: SourceLocation = #_sourceLocation
            ) throws {
                try #require(holdStarted.wait(timeout: Stress.timeout), sourceLocation: sourceLocation)
                #expect(hold.finish(), sourceLocation: sourceLocation)
                try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout),
                             "\(queue.operationCount) operations never ran", sourceLocation: sourceLocation)
                try #require(other.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout),
                             sourceLocation: sourceLocation)
                let wrong = offenders(count) { index in
                    let tally = dependentTallies[index]
                    if tally.executionCount != 1 || tally.completionCount != 1 { return true }
                    if tally.started <= holdTally.finished { return true }
                    return waitedFor(index) && tally.started <= dependencyTallies[index].finished
                }
                #expect(wrong.count == 0, "dependents run wrongly: \(wrong)", sourceLocation: sourceLocation)
                let dependencyRuns = offenders(count) { dependencyTallies[$0].executionCount != 1 }
                #expect(dependencyRuns.count == 0, "dependencies run wrongly: \(dependencyRuns)",
                        sourceLocation: sourceLocation)
            }
        }

        @Test("addDependency on an enqueued operation races with the dependency finishing", arguments: [1, 2])
        func addDependencyRacesWithFinish(threads: Int) throws {
            let fixture = Fixture(count: Stress.count(5_000))
            for dependent in fixture.dependents { try dependent.addDependency(fixture.hold) }
            try fixture.queue.addOperations([fixture.hold] + fixture.dependents, waitUntilFinished: false)
            let refusals = Recorder<String>()
            let (dependents, dependencies) = (fixture.dependents, fixture.dependencies)
            let raced = fixture.race("add-dependency-race", threads: threads) { index in
                do {
                    try dependents[index].addDependency(dependencies[index])
                } catch {
                    refusals.record("\(index): \(error)")
                }
            }
            #expect(raced)
            let refused = refusals.values
            #expect(refused.isEmpty, "refused though the dependent had not started: \(refused.prefix(5))")
            try fixture.finishAndCheck(waitedFor: { _ in true })
        }

        @Test("enqueueing a dependent races with its dependency finishing", arguments: [1, 2])
        func enqueueRacesWithFinish(threads: Int) throws {
            let fixture = Fixture(count: Stress.count(5_000))
            for (dependent, dependency) in zip(fixture.dependents, fixture.dependencies) {
                try dependent.addDependencies([fixture.hold, dependency])
            }
            try fixture.queue.addOperation(fixture.hold)
            let (dependents, queue) = (fixture.dependents, fixture.queue)
            let raced = fixture.race("enqueue-race", threads: threads) { index in
                try? queue.addOperation(dependents[index])
            }
            #expect(raced)
            try fixture.finishAndCheck(waitedFor: { _ in true })
        }

        @Test("removeDependency races with the dependency finishing", arguments: [1, 2])
        func removeDependencyRacesWithFinish(threads: Int) throws {
            let fixture = Fixture(count: Stress.count(5_000))
            for (dependent, dependency) in zip(fixture.dependents, fixture.dependencies) {
                try dependent.addDependencies([fixture.hold, dependency])
            }
            try fixture.queue.addOperations([fixture.hold] + fixture.dependents, waitUntilFinished: false)
            let (dependents, dependencies) = (fixture.dependents, fixture.dependencies)
            let raced = fixture.race("remove-dependency-race", threads: threads) { index in
                if index % 3 != 0 { dependents[index].removeDependency(dependencies[index]) }
            }
            #expect(raced)
            try fixture.finishAndCheck(waitedFor: { $0 % 3 == 0 })
        }

        /// An operation that was runnable when it was added sits in its queue's ready list; a
        /// dependency added then leaves that entry stale. When the dependency finishes, a worker
        /// can take that entry while the finishing thread is still handing the dependents it
        /// released to their queue (and reading which queue that is). A dependency with many
        /// dependents, whose stale entries are interleaved with other work, widens that window.
        @Test(
            "dependents whose ready-list entries went stale start once, after their dependency",
            arguments: [true, false])
        func staleReadyEntriesRaceWithFinish(sameQueue: Bool) throws {
            let rounds = 5
            let fanOut = Stress.count(1_000)
            let clock = LogicalClock()
            func operation(_ name: String, _ tally: Tally) -> ClosureOperation {
                let operation = ClosureOperation(name: name) { tally.recordStart(clock) }
                operation.completionBlock = { tally.recordCompletion(clock) }
                return operation
            }
            let queue = ConcurrentOperationQueue(name: "stale-dependents")
            let other = sameQueue ? queue : ConcurrentOperationQueue(name: "stale-dependencies")
            queue.isSuspended = true
            other.isSuspended = true
            var dependencyTallies: [Tally] = []
            var dependentTallies: [[Tally]] = []
            var fillerTallies: [Tally] = []
            for round in 0..<rounds {
                // Fillers (so that workers are busy taking entries when the dependency runs), the
                // dependency, then filler and dependent alternately, each dependent runnable when
                // added and then given the dependency.
                for index in 0..<fanOut / 4 {
                    let filler = Tally()
                    try queue.addOperation(operation("lead\(round).\(index)", filler))
                    fillerTallies.append(filler)
                }
                let dependencyTally = Tally()
                let dependency = operation("dependency\(round)", dependencyTally)
                try other.addOperation(dependency)
                let tallies = (0..<fanOut).map { _ in Tally() }
                for (index, tally) in tallies.enumerated() {
                    let filler = Tally()
                    try queue.addOperation(operation("filler\(round).\(index)", filler))
                    let dependent = operation("dependent\(round).\(index)", tally)
                    try queue.addOperation(dependent)
                    try dependent.addDependency(dependency)
                    fillerTallies.append(filler)
                }
                dependencyTallies.append(dependencyTally)
                dependentTallies.append(tallies)
            }
            let resumed = onThreads(2, label: "stale-entry-race") { role in
                (role == 0 ? queue : other).isSuspended = false
            }
            #expect(resumed)
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            try #require(other.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            for round in 0..<rounds {
                let wrong = offenders(fanOut) { index in
                    let tally = dependentTallies[round][index]
                    return tally.executionCount != 1 || tally.completionCount != 1
                        || tally.started <= dependencyTallies[round].finished
                }
                #expect(wrong.count == 0, "round \(round): dependents run wrongly: \(wrong)")
            }
            #expect(fillerTallies.allSatisfy { $0.executionCount == 1 })
        }

        /// The decrement that makes a dependent runnable is the last moment its dependency may
        /// touch it unretained: from then on a worker can take a stale ready-list entry of it, run
        /// it, and its queue let it go — here nothing else holds it — while the finishing
        /// dependency is still going through its list. (The dependency used to retain the
        /// dependents it released only after that decrement, and used freed memory when its
        /// thread was preempted in between.) Each round lays out the ready list so that workers
        /// reach the stale entries right behind the dependency's loop, and the workers run on an
        /// overcommitting dispatch queue, so more of them run than there are cores. The window is
        /// a few instructions wide, so this makes the race possible, not likely: a use after free
        /// crashes here, or is reported by the address sanitizer.
        @Test("a dependent run and released by its queue at once is not used by its dependency's finish")
        func dependentsReleasedWhileTheirDependencyFinishes() throws {
            let rounds = 20
            let fanOut = Stress.count(1_000)
            let clock = LogicalClock()
            // A custom concurrent dispatch queue overcommits: each worker loop gets a thread.
            let queue = ConcurrentOperationQueue(
                name: "released-dependents",
                underlyingQueue: DispatchQueue(label: "released-dependents", attributes: .concurrent))
            for round in 0..<rounds {
                queue.isSuspended = true
                let dependencyTally = Tally()
                var dependentTallies: [Tally] = []
                var fillerTallies: [Tally] = []
                func addFiller(_ name: String) throws {
                    let tally = Tally()
                    try queue.addOperation(ClosureOperation(name: name) { tally.recordStart(clock) })
                    fillerTallies.append(tally)
                }
                // Fillers, the dependency, then filler and dependent alternately: each dependent is
                // runnable when added (an entry in the ready list) and then given the dependency
                // (the entry goes stale). The test keeps only the tallies.
                for index in 0..<8 { try addFiller("lead\(round).\(index)") }
                do {
                    let dependency = ClosureOperation(name: "dependency\(round)") { dependencyTally.recordStart(clock) }
                    dependency.completionBlock = { dependencyTally.recordCompletion(clock) }
                    try queue.addOperation(dependency)
                    for index in 0..<fanOut {
                        try addFiller("filler\(round).\(index)")
                        let tally = Tally()
                        let dependent = ClosureOperation(name: "dependent\(round).\(index)") { tally.recordStart(clock) }
                        dependent.completionBlock = { tally.recordCompletion(clock) }
                        try queue.addOperation(dependent)
                        try dependent.addDependency(dependency)
                        dependentTallies.append(tally)
                    }
                }
                queue.isSuspended = false
                try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
                let wrong = offenders(fanOut) { index in
                    let tally = dependentTallies[index]
                    return tally.executionCount != 1 || tally.completionCount != 1
                        || tally.started <= dependencyTally.finished
                }
                #expect(wrong.count == 0, "round \(round): dependents run wrongly: \(wrong)")
                #expect(fillerTallies.allSatisfy { $0.executionCount == 1 })
            }
        }

        @Test("cancel() races with the last dependency finishing", arguments: [1, 2])
        func cancelRacesWithLastDependency(threads: Int) throws {
            let fixture = Fixture(count: Stress.count(5_000))
            for (dependent, dependency) in zip(fixture.dependents, fixture.dependencies) {
                try dependent.addDependency(dependency)
            }
            try fixture.queue.addOperations(fixture.dependents, waitUntilFinished: false)
            let dependents = fixture.dependents
            let raced = fixture.race("cancel-race", threads: threads) { index in dependents[index].cancel() }
            #expect(raced)
            try #require(fixture.queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            try #require(fixture.other.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            // Cancelled before it started: finished without running. Otherwise it ran, once,
            // after its dependency.
            let wrong = offenders(fixture.count) { index in
                let tally = fixture.dependentTallies[index]
                if tally.completionCount != 1 || !fixture.dependents[index].isFinished { return true }
                switch tally.executionCount {
                case 0: return !fixture.dependents[index].isCancelled
                case 1: return tally.started <= fixture.dependencyTallies[index].finished
                default: return true
                }
            }
            #expect(wrong.count == 0, "dependents finished wrongly: \(wrong)")
        }
    }
}
