import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    /// Cycle detection against a reference model (``GraphModel``), on random and adversarial graphs.
    @Suite("Dependency graph")
    struct DependencyGraphs {
        @Test("random graphs: refused exactly when the reference model finds a cycle", arguments: 1...48)
        func randomGraphs(seed: UInt64) {
            var random = SplitMix64(seed: seed)
            let count = 60 + random.below(140)
            let graph = GraphHarness(label: "random\(seed)", count: count)
            let rank = Array(0..<count).shuffled(using: &random)
            let enqueueOrder = Array(0..<count).shuffled(using: &random)

            // An edge for `dependent`: 85% follow the hidden rank, the rest go anywhere.
            func dependency(for dependent: Int) -> Int {
                if random.chance(2) { return dependent }  // a self-dependency, refused on its own
                var candidate = random.below(count - 1)
                if candidate >= dependent { candidate += 1 }
                if random.chance(85) && rank[candidate] > rank[dependent] {
                    // Follow the hidden rank: pick something ranked lower, if anything is.
                    let lower = (0..<count).filter { rank[$0] < rank[dependent] }
                    if let pick = lower.randomElement(using: &random) { candidate = pick }
                }
                return candidate
            }

            // Before enqueueing: never refused (except self-dependencies); checked on enqueue.
            for dependent in 0..<count {
                for _ in 0..<random.below(3) { graph.addDependency(dependent, dependency(for: dependent)) }
            }
            // Enqueue in random order, singly and in batches, interleaved with new edges, some to
            // enqueued operations (checked at once) and some to waiting ones.
            var next = 0
            while next < count {
                let roll = random.below(100)
                if roll < 40 {
                    graph.enqueue([enqueueOrder[next]])
                    next += 1
                } else if roll < 50 {
                    let end = min(count, next + 2 + random.below(6))
                    graph.enqueue(Array(enqueueOrder[next..<end]))
                    next = end
                } else if roll < 90 {
                    let enqueued = enqueueOrder[0..<next].filter { graph.model.isEnqueued[$0] }
                    guard let dependent = enqueued.randomElement(using: &random) else { continue }
                    graph.addDependency(dependent, dependency(for: dependent))
                } else {
                    let dependent = enqueueOrder[next + random.below(count - next)]
                    graph.addDependency(dependent, dependency(for: dependent))
                }
                graph.checkOrderInvariant()
            }
            // More edges among enqueued operations, then the refused operations get a second
            // chance and, failing that, lose their dependencies.
            for _ in 0..<(2 * count) {
                let dependent = random.below(count)
                graph.addDependency(dependent, dependency(for: dependent))
                graph.checkOrderInvariant()
            }
            graph.enqueueRefusedWithoutDependencies()
            graph.checkOrderInvariant()
            #expect(graph.refusedEdges + graph.refusedOperations > 0, "seed \(seed) closed no cycle")
            #expect(graph.acceptedEdges > count)
            graph.runAndCheck()
        }

        @Test("edges against the order between operations with predecessors and successors", arguments: 1...8)
        func slowPathEdges(seed: UInt64) {
            var random = SplitMix64(seed: 0x5_1077 &+ seed)
            let chains = 12
            let length = 15
            let count = chains * length
            let graph = GraphHarness(label: "slow\(seed)", count: count)
            // Operation c * length + i is the i-th of chain c; enqueue the chains interleaved, in
            // random order, so the orders they get are scrambled.
            for chain in 0..<chains {
                for position in 1..<length {
                    graph.addDependency(chain * length + position, chain * length + position - 1)
                }
                // Every chain's head waits for the first chain's head, so that the chains form one
                // component of the graph (the order of operations of two components is not
                // compared: an edge between them merges them instead).
                if chain > 0 { graph.addDependency(chain * length, 0) }
            }
            for index in Array(0..<count).shuffled(using: &random) { graph.enqueue([index]) }
            graph.checkOrderInvariant()

            // Aim edges at the slow path: the dependency is ordered after the dependent, has a
            // predecessor, and the dependent has a successor.
            var aimed = 0
            for _ in 0..<600 {
                var found: (Int, Int)?
                for _ in 0..<200 {
                    let dependent = random.below(count)
                    let dependency = random.below(count)
                    if dependent != dependency && graph.isSlowPath(dependent: dependent, dependency: dependency) {
                        found = (dependent, dependency)
                        break
                    }
                }
                guard let (dependent, dependency) = found else { continue }
                aimed += 1
                graph.addDependency(dependent, dependency)
                graph.checkOrderInvariant()
            }
            #expect(aimed >= 100, "only \(aimed) edges took the slow path")
            #expect(graph.slowPathCycles > 0, "no slow-path edge closed a cycle")
            #expect(graph.slowPathEdges - graph.slowPathCycles > 0, "no slow-path edge was accepted")
            graph.runAndCheck()
        }

        @Test("a cycle of 1,000 operations is found, named in order, from either end")
        func longCycle() throws {
            var random = SplitMix64(seed: 1_000)
            let length = 1_000
            // Closed by addDependency on an enqueued operation.
            let graph = GraphHarness(label: "long", count: length)
            for index in 1..<length { graph.addDependency(index, index - 1) }
            for index in Array(0..<length).shuffled(using: &random) { graph.enqueue([index]) }
            let error = expectOperationError {
                try graph.operations[0].addDependency(graph.operations[length - 1])
            }
            #expect(error?.code == .dependencyCycle)
            #expect(error?.operationNames == (0..<length).reversed().map { "long#\($0)" })
            graph.addDependency(0, length - 1)  // the model agrees
            graph.runAndCheck()

            // Closed by enqueueing the operation that the rest of the chain waits for.
            let second = GraphHarness(label: "longEnqueue", count: length)
            for index in 1..<length { second.addDependency(index, index - 1) }
            second.addDependency(0, length - 1)
            for index in (1..<length).reversed() { second.enqueue([index]) }
            let refusal = expectOperationError { try second.queue.addOperation(second.operations[0]) }
            #expect(refusal?.code == .dependencyCycle)
            #expect(refusal?.operationNames == (0..<length).reversed().map { "longEnqueue#\($0)" })
            second.enqueue([0])  // the model agrees
            second.enqueueRefusedWithoutDependencies()
            second.runAndCheck()
        }

        enum Direction: String, CaseIterable, Sendable {
            /// The operation created first runs first: `ops[i + 1]` waits for `ops[i]`.
            case forward
            /// The operation created last runs first: `ops[i]` waits for `ops[i + 1]`.
            case reverse
        }

        @Test(
            "a 10,000-operation chain, created one way and enqueued the other, refuses the edge closing it",
            arguments: [(Direction.forward, Direction.reverse), (Direction.reverse, Direction.forward)])
        func longChainCycle(created: Direction, enqueued: Direction) throws {
            let count = 10_000
            let operations = (0..<count).map { ClosureOperation(name: "chain\($0)") {} }
            let runOrder = created == .forward ? Array(0..<count) : Array((0..<count).reversed())
            for (dependency, dependent) in zip(runOrder, runOrder.dropFirst()) {
                try operations[dependent].addDependency(operations[dependency])
            }
            let queue = ConcurrentOperationQueue(name: "chain-cycle")
            queue.isSuspended = true
            for index in enqueued == .forward ? Array(0..<count) : Array((0..<count).reversed()) {
                try queue.addOperation(operations[index])
            }
            let first = operations[runOrder[0]]
            let last = operations[runOrder[count - 1]]
            let error = expectOperationError { try first.addDependency(last) }
            #expect(error?.code == .dependencyCycle)
            #expect(error?.operationNames.count == count)
            #expect(error?.operationNames.first == last.name && error?.operationNames.last == first.name)
            queue.isSuspended = false
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            #expect(operations.allSatisfy { $0.isFinished })
        }
    }
}
