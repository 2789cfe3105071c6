// WaitForCycle: a cycle of operations each waiting for the next — through dependencies, mutual
// exclusivity categories, concurrency slots, group membership — found in a snapshot.

/// Operations each waiting for the next, the last for the first: none of them can go on.
///
/// Found in a ``QueueSnapshot`` by following every "waits for" edge its blockers name: a
/// dependency, a produced dependency, a workflow prerequisite, a category held (or wanted first)
/// by another procedure, a group's (or retry's) unfinished children, and a concurrency slot. A
/// slot is one of several: an operation waiting for one is stuck only if *every* operation
/// holding a slot of that queue waits for it in turn, so a cycle through a slot is reported only
/// then. Cycles no registered edge shows (the queue refuses those at once) are the ones this finds:
/// a group's child waiting for an operation that waits, through a barrier, for the group; two
/// groups holding categories their children want the other way round.
public struct WaitForCycle: Sendable, Hashable, CustomStringConvertible {
    /// Why one operation of the cycle waits for the next.
    public enum Reason: Sendable, Hashable, CustomStringConvertible {
        /// The next one is its dependency.
        case dependency
        /// The next one was produced by one of its conditions.
        case producedDependency
        /// The next one is a workflow prerequisite of it.
        case prerequisite
        /// It wants the category the next one holds (or wants first).
        case exclusiveCategory(String)
        /// It waits for a concurrency slot the next one holds.
        case concurrencySlot
        /// It is a group (or retry) and the next one is its unfinished child (or attempt).
        case child

        /// `dependency`, `category X`, …
        public var description: String {
            switch self {
            case .dependency: "dependency"
            case .producedDependency: "produced dependency"
            case .prerequisite: "prerequisite"
            case .exclusiveCategory(let category): "category \(category)"
            case .concurrencySlot: "concurrency slot"
            case .child: "child"
            }
        }
    }

    /// One operation of the cycle and why it waits for the next one.
    public struct Step: Sendable, Hashable {
        /// The waiting operation.
        public let operation: OperationReference
        /// Why it waits for the next step's operation (the first one's, for the last step).
        public let reason: Reason
    }

    /// The operations of the cycle in order, starting with the first in the snapshot's order.
    public let steps: [Step]

    /// `a —dependency→ b —category X→ c —child→ a`.
    public var description: String {
        guard let first = steps.first else { return "" }
        return steps.map { "\($0.operation.name) —\($0.reason)→ " }.joined() + first.operation.name
    }

    /// The elementary cycles of the wait-for graph of `operations` (nested children included),
    /// one per strongly connected component: the shortest cycle through its first operation.
    static func find(in operations: [OperationSnapshot]) -> [WaitForCycle] {
        let all = operations.flatMap { [$0] + ($0.children?.allOperations ?? []) }
        var index: [ObjectIdentifier: Int] = [:]
        for (position, operation) in all.enumerated() where index[operation.id] == nil {
            index[operation.id] = position
        }
        // Edges between operations of the snapshot; slot edges are kept apart (one-of-several).
        var edges = [[(to: Int, reason: Reason)]](repeating: [], count: all.count)
        var slotEdges = [[Int]](repeating: [], count: all.count)
        for (from, operation) in all.enumerated() where index[operation.id] == from {
            for blocker in operation.blockers {
                for (target, reason) in blocker.waitsFor {
                    guard let to = index[target.id] else { continue }
                    if reason == .concurrencySlot {
                        slotEdges[from].append(to)
                    } else {
                        edges[from].append((to, reason))
                    }
                }
            }
        }
        // A slot edge counts only while every holder it names is in the waiter's component:
        // drop the others and recompute until nothing changes.
        var component = stronglyConnectedComponents(count: all.count, edges: edges, slotEdges: slotEdges)
        while true {
            var changed = false
            for from in slotEdges.indices where !slotEdges[from].isEmpty {
                if !slotEdges[from].allSatisfy({ component[$0] == component[from] }) {
                    slotEdges[from] = []
                    changed = true
                }
            }
            if !changed { break }
            component = stronglyConnectedComponents(count: all.count, edges: edges, slotEdges: slotEdges)
        }
        var successors = edges
        for from in slotEdges.indices {
            successors[from] += slotEdges[from].map { (to: $0, reason: Reason.concurrencySlot) }
        }
        var cycles: [WaitForCycle] = []
        var reported = Set<Int>()
        for start in all.indices where !reported.contains(component[start]) {
            guard let path = shortestCycle(from: start, successors: successors, component: component) else { continue }
            reported.insert(component[start])
            cycles.append(WaitForCycle(steps: path.map { Step(operation: all[$0.node].reference, reason: $0.reason) }))
        }
        return cycles
    }

    /// Breadth first from `start` within its component, back to `start`.
    private static func shortestCycle(
        from start: Int, successors: [[(to: Int, reason: Reason)]], component: [Int]
    ) -> [(node: Int, reason: Reason)]? {
        var previous: [Int: (node: Int, reason: Reason)] = [:]
        var frontier = [start]
        var closing: (node: Int, reason: Reason)?
        search: while !frontier.isEmpty {
            var next: [Int] = []
            for node in frontier {
                for (to, reason) in successors[node] where component[to] == component[start] {
                    if to == start {
                        closing = (node, reason)
                        break search
                    }
                    if previous[to] == nil {
                        previous[to] = (node, reason)
                        next.append(to)
                    }
                }
            }
            frontier = next
        }
        guard let closing else { return nil }
        // Walk back from the node that closes the cycle to the start.
        var path: [(node: Int, reason: Reason)] = [(closing.node, closing.reason)]
        var node = closing.node
        while node != start, let step = previous[node] {
            path.append((step.node, step.reason))
            node = step.node
        }
        return path.reversed()
    }

    /// Tarjan's algorithm, iterative; returns each node's component number.
    private static func stronglyConnectedComponents(
        count: Int, edges: [[(to: Int, reason: Reason)]], slotEdges: [[Int]]
    ) -> [Int] {
        let successors = (0..<count).map { edges[$0].map(\.to) + slotEdges[$0] }
        var order = [Int](repeating: -1, count: count)
        var low = [Int](repeating: 0, count: count)
        var onStack = [Bool](repeating: false, count: count)
        var component = [Int](repeating: -1, count: count)
        var stack: [Int] = []
        var counter = 0
        var components = 0
        for root in 0..<count where order[root] == -1 {
            var work: [(node: Int, next: Int)] = [(root, 0)]
            order[root] = counter
            low[root] = counter
            counter += 1
            stack.append(root)
            onStack[root] = true
            while let top = work.last {
                let (node, next) = (top.node, top.next)
                if next < successors[node].count {
                    work[work.count - 1].next += 1
                    let to = successors[node][next]
                    if order[to] == -1 {
                        order[to] = counter
                        low[to] = counter
                        counter += 1
                        stack.append(to)
                        onStack[to] = true
                        work.append((to, 0))
                    } else if onStack[to] {
                        low[node] = min(low[node], order[to])
                    }
                } else {
                    work.removeLast()
                    if let parent = work.last { low[parent.node] = min(low[parent.node], low[node]) }
                    if low[node] == order[node] {
                        while let member = stack.popLast() {
                            onStack[member] = false
                            component[member] = components
                            if member == node { break }
                        }
                        components += 1
                    }
                }
            }
        }
        return component
    }
}
