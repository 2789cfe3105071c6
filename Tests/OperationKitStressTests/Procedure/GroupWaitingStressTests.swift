import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    /// Issue 13 items 3 and 4 at random: trees of groups on queues with small limits, where random
    /// nodes (groups and leaves) share one MutuallyExclusive category, leaves depend at random on
    /// operations queued behind their group, and exclusive procedures compete from other queues.
    /// Everything must finish: no wait goes through a slot, and a hold covers its subtree.
    @Suite("Groups and exclusivity never wait forever")
    struct GroupWaitingStorm {
        @Test("random group trees with a shared category on serial queues all finish")
        func randomTreesFinish() async throws {
            let rounds = Stress.count(200, minimum: 20)
            for round in 0..<rounds {
                let seed = UInt64(0x1513_0000 + round)
                var random = SplitMix64(seed: seed)
                let category = "issue13-storm-\(round % 3)"
                let queues = try (0..<2).map { index in
                    try ConcurrentOperationQueue(
                        name: "storm\(index)", maxConcurrentOperationCount: 1 + random.below(2))
                }
                var all: [ConcurrentOperation] = []
                func leaf(_ name: String) throws -> ClosureProcedure<Void> {
                    let leaf = ClosureProcedure<Void>(name: name) {}
                    if random.chance(50) { try leaf.addCondition(MutuallyExclusive(category: category)) }
                    return leaf
                }
                func tree(_ name: String, depth: Int, behind: inout [ConcurrentOperation]) throws -> ConcurrentOperation {
                    if depth == 0 || random.chance(30) { return try leaf(name) }
                    var children: [ConcurrentOperation] = []
                    for index in 0..<(1 + random.below(3)) {
                        let child = try tree("\(name).\(index)", depth: depth - 1, behind: &behind)
                        if random.chance(25) {
                            // Depends on an operation queued behind the top-level group.
                            let later = ClosureOperation(name: "\(name).behind\(index)") {}
                            try child.addDependency(later)
                            behind.append(later)
                        }
                        children.append(child)
                    }
                    let group = try GroupOperation(name: name, operations: children)
                    try group.setMaxConcurrentOperationCount(1 + random.below(2))
                    if random.chance(50) { try group.addCondition(MutuallyExclusive(category: category)) }
                    return group
                }
                for index in 0..<(2 + random.below(3)) {
                    var behind: [ConcurrentOperation] = []
                    let top = try tree("r\(round)g\(index)", depth: 3, behind: &behind)
                    let queue = queues[random.below(queues.count)]
                    let competitor = try leaf("r\(round)c\(index)")
                    try queue.addOperations([competitor, top] + behind, waitUntilFinished: false)
                    all += [competitor, top] + behind
                    if let group = top as? GroupOperation {
                        // Item 7 at random: a late child and a cancel racing it, and a suspension
                        // that a resume ends while the cancel may be running.
                        let late = try leaf("r\(round)g\(index).late")
                        all.append(late)
                        let cancels = random.chance(40)
                        let suspends = random.chance(30)
                        if suspends { group.isSuspended = true }
                        DispatchQueue.global().async {
                            do { try group.addChild(late) } catch { late.cancel(); try? queues[0].addOperation(late) }
                        }
                        DispatchQueue.global().async {
                            if cancels { group.cancel() }
                            if suspends { group.isSuspended = false }
                        }
                    }
                }
                // Blocking, bounded waits, off the cooperative pool.
                let operations = all
                let stuck = await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
                    DispatchQueue(label: "storm.wait").async {
                        let stuck = operations.first { !$0.waitUntilFinishedBlocking(timeout: Stress.timeout) }
                        continuation.resume(returning: stuck?.displayName)
                    }
                }
                #expect(stuck == nil, "seed \(seed): \(stuck ?? "") never finished")
                if stuck != nil { return }
            }
        }
    }
}
