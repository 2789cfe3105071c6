import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Results written by several threads, each into a slot of its own (a separate object, so that
/// no two threads access one variable), and read once they have all finished (`onThreads` orders
/// the writes before the reads).
private final class PerThread<Element>: @unchecked Sendable {  // each slot has one writer, then readers
    final class Slot: @unchecked Sendable {  // see PerThread
        var items: [Element] = []
    }

    let slot: [Slot]
    init(count: Int) { slot = (0..<count).map { _ in Slot() } }

    var all: [Element] { slot.flatMap(\.items) }
}

/// One attempt to add an edge: "`dependent` waits for `dependency`", and its outcome.
private struct EdgeAttempt: Sendable {
    let dependent: Int
    let dependency: Int
    let error: OperationError?
}

/// Operations numbered `0..<count`, spread over several queues, with a tally each.
private struct CrossQueueOperations {
    let operations: [ClosureOperation]
    let tallies: [Tally]
    let queues: [ConcurrentOperationQueue]
    let indexByName: [String: Int]
    let clock = LogicalClock()

    init(label: String, queues queueCount: Int, perQueue: Int, suspended: Bool) {
        let clock = self.clock
        let count = queueCount * perQueue
        let tallies = (0..<count).map { _ in Tally() }
        self.tallies = tallies
        operations = (0..<count).map { index in
            let tally = tallies[index]
            let operation = ClosureOperation(name: "\(label)#\(index)") { tally.recordStart(clock) }
            operation.completionBlock = { tally.recordCompletion(clock) }
            return operation
        }
        indexByName = Dictionary(uniqueKeysWithValues: operations.enumerated().map { ($1.name!, $0) })
        queues = (0..<queueCount).map { index in
            let queue = ConcurrentOperationQueue(name: "\(label).q\(index)")
            queue.isSuspended = suspended
            return queue
        }
    }

    var count: Int { operations.count }

    /// Index `index`'s queue: operations are dealt round-robin.
    func queue(of index: Int) -> ConcurrentOperationQueue { queues[index % queues.count] }

    /// Waits for every queue to drain; records an issue if one does not.
    func waitForAll(_ label: String) -> Bool {
        for queue in queues where !queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout) {
            Issue.record("\(label): \(queue.name ?? "a queue") did not drain; \(queue.operationCount) left")
            return false
        }
        return true
    }

    /// Checks that every operation ran once, and started only after each of `edges`' dependencies
    /// of it had finished.
    func checkRanInOrder(_ label: String, edges: [(dependent: Int, dependency: Int)]) {
        let notOnce = offenders(count) { tallies[$0].executionCount != 1 || tallies[$0].completionCount != 1 }
        #expect(notOnce.count == 0, "\(label): did not run exactly once: \(notOnce)")
        let early = edges.filter { tallies[$0.dependent].started <= tallies[$0.dependency].finished }
        #expect(early.isEmpty, "\(label): \(early.count) operations started before a dependency finished")
    }
}

/// Whether `start` waits, directly or not, for `target` through `edges` (dependent → dependencies).
private func waits(_ start: Int, for target: Int, in edges: [[Int]]) -> Bool {
    var seen: Set<Int> = [start]
    var stack = [start]
    while let node = stack.popLast() {
        for next in edges[node] {
            if next == target { return true }
            if seen.insert(next).inserted { stack.append(next) }
        }
    }
    return false
}

extension StressTests {
    /// The dependency graph has one lock per connected component (`GraphComponent`): edges added
    /// at once from many threads between operations of several queues, and components merged
    /// while their operations finish. (That two operations with no edge between them share no
    /// graph lock is not an observable event; Architecture.md, "The dependency graph's locks",
    /// documents it, and the S6 benchmark measures it.)
    @Suite("Dependency graph components")
    struct GraphComponents {
        @Test("concurrent cross-queue edges: refused exactly when they close a cycle", arguments: 1...12)
        func concurrentCrossQueueEdges(seed: UInt64) {
            let label = "cross\(seed)"
            let threads = 4
            let set = CrossQueueOperations(label: label, queues: 4, perQueue: 30, suspended: true)
            let count = set.count
            for index in 0..<count {
                #expect(throws: Never.self) { try set.queue(of: index).addOperation(set.operations[index]) }
            }
            // Each thread adds random edges between random operations (mostly of two queues);
            // every few edges it also enqueues a new operation with dependencies of its own.
            let attempts = PerThread<EdgeAttempt>(count: threads)
            let edgesPerThread = Stress.count(120, minimum: 40)
            let operations = set.operations
            let finished = onThreads(threads, label: label) { thread in
                var random = SplitMix64(seed: seed &* 7919 &+ UInt64(thread))
                var log: [EdgeAttempt] = []
                for _ in 0..<edgesPerThread {
                    let dependent = random.below(count)
                    var dependency = random.below(count - 1)
                    if dependency >= dependent { dependency += 1 }
                    var error: OperationError?
                    do throws(OperationError) {
                        try operations[dependent].addDependency(operations[dependency])
                    } catch let caught {
                        error = caught
                    }
                    log.append(EdgeAttempt(dependent: dependent, dependency: dependency, error: error))
                }
                attempts.slot[thread].items = log
            }
            guard finished else {
                Issue.record("\(label): the threads adding edges did not finish")
                return
            }

            // The oracle: the accepted edges, in a plain graph model.
            let all = attempts.all
            var accepted = Array(repeating: [Int](), count: count)
            for attempt in all where attempt.error == nil { accepted[attempt.dependent].append(attempt.dependency) }
            let cyclic = (0..<count).filter { index in accepted[index].contains { waits($0, for: index, in: accepted) } }
            #expect(cyclic.isEmpty, "\(label): the accepted edges have a cycle through \(cyclic.prefix(5))")
            var refusals = 0
            for attempt in all {
                guard let error = attempt.error else { continue }
                refusals += 1
                let edge = "\(label): \(attempt.dependent) waits for \(attempt.dependency)"
                #expect(error.code == .dependencyCycle, "\(edge): \(error)")
                // Edges are only added: a path that closed the cycle then is still there.
                #expect(waits(attempt.dependency, for: attempt.dependent, in: accepted),
                        "\(edge): refused, but it closes no cycle")
                // The error names the cycle: the dependency first, the dependent last, each
                // waiting for the next through an accepted edge.
                let names = error.operationNames.map { set.indexByName[$0] ?? -1 }
                let linked = zip(names, names.dropFirst()).allSatisfy { accepted[$0].contains($1) }
                #expect(names.count >= 2 && names.first == attempt.dependency && names.last == attempt.dependent
                        && linked, "\(edge): \(names) is not the cycle")
            }
            #expect(refusals > 0, "\(label): no edge closed a cycle")
            #expect(all.count - refusals > count / 2, "\(label): too few edges accepted")

            for queue in set.queues { queue.isSuspended = false }
            guard set.waitForAll(label) else { return }
            let edges = (0..<count).flatMap { dependent in accepted[dependent].map { (dependent, $0) } }
            set.checkRanInOrder(label, edges: edges)
        }

        @Test("components merged by cross-queue edges while both finish operations", arguments: 1...10)
        func mergeWhileFinishing(seed: UInt64) {
            let label = "merge\(seed)"
            let length = Stress.count(150, minimum: 40)
            // Two running queues, each a chain (one component each); the heads wait at a gate.
            let set = CrossQueueOperations(label: label, queues: 2, perQueue: length, suspended: false)
            let gate = Gate()
            let chainA = (0..<length).map { 2 * $0 }  // queue 0
            let chainB = (0..<length).map { 2 * $0 + 1 }  // queue 1
            var edges: [(dependent: Int, dependency: Int)] = []
            let heads = [chainA[0], chainB[0]].map { index in
                ClosureOperation(name: "\(label).head\(index)") { _ = gate.wait(timeout: Stress.timeout) }
            }
            for (chain, head) in zip([chainA, chainB], heads) {
                #expect(throws: Never.self) { try set.operations[chain[0]].addDependency(head) }
                for (dependency, dependent) in zip(chain, chain.dropFirst()) {
                    #expect(throws: Never.self) { try set.operations[dependent].addDependency(set.operations[dependency]) }
                    edges.append((dependent, dependency))
                }
            }
            for index in 0..<set.count {
                #expect(throws: Never.self) { try set.queue(of: index).addOperation(set.operations[index]) }
            }
            for (queue, head) in zip(set.queues, heads) {
                #expect(throws: Never.self) { try queue.addOperation(head) }
            }

            // While both chains run, threads join them: an operation of chain B waits for one of
            // chain A (never the other way, so no cycle), and new operations, enqueued on a third
            // queue, wait for one of each.
            let joiners = ConcurrentOperationQueue(name: "\(label).joiners")
            let clock = set.clock
            let joinerCount = 40
            let joinerTallies = (0..<joinerCount).map { _ in Tally() }
            let attempts = PerThread<EdgeAttempt>(count: 2)
            let joinerEdges = PerThread<(joiner: Int, a: Int, b: Int)>(count: 2)
            let operations = set.operations
            let finished = onThreads(2, label: label) { thread in
                var random = SplitMix64(seed: seed &* 104_729 &+ UInt64(thread))
                if thread == 0 { gate.open() }
                for round in 0..<joinerCount / 2 {
                    let a = chainA[random.below(length)]
                    let b = chainB[random.below(length)]
                    var error: OperationError?
                    do throws(OperationError) {
                        try operations[b].addDependency(operations[a])
                    } catch let caught {
                        error = caught
                    }
                    attempts.slot[thread].items.append(EdgeAttempt(dependent: b, dependency: a, error: error))
                    let joiner = thread * (joinerCount / 2) + round
                    let tally = joinerTallies[joiner]
                    let operation = ClosureOperation(name: "\(label).joiner\(joiner)") { tally.recordStart(clock) }
                    operation.completionBlock = { tally.recordCompletion(clock) }
                    do {
                        try operation.addDependencies([operations[a], operations[b]])
                        try joiners.addOperation(operation)
                        joinerEdges.slot[thread].items.append((joiner, a, b))
                    } catch {
                        Issue.record("\(label): a new operation waiting for both chains was refused: \(error)")
                    }
                }
            }
            guard finished else {
                gate.open()
                Issue.record("\(label): the joining threads did not finish")
                return
            }
            guard set.waitForAll(label),
                  joiners.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout) else {
                Issue.record("\(label): the joiners did not drain")
                return
            }
            let tooLate: Set<OperationError.Code> = [.dependentAlreadyExecuting, .dependentAlreadyFinished]
            for attempt in attempts.all {
                if let error = attempt.error {
                    #expect(tooLate.contains(error.code), "\(label): \(attempt.dependent) → \(attempt.dependency): \(error)")
                } else {
                    edges.append((attempt.dependent, attempt.dependency))
                }
            }
            set.checkRanInOrder(label, edges: edges)
            for (joiner, a, b) in joinerEdges.all {
                let tally = joinerTallies[joiner]
                #expect(tally.executionCount == 1 && tally.completionCount == 1, "\(label): joiner \(joiner) ran \(tally.executionCount) times")
                #expect(tally.started > set.tallies[a].finished && tally.started > set.tallies[b].finished,
                        "\(label): joiner \(joiner) started before a dependency finished")
            }
        }
    }
}
