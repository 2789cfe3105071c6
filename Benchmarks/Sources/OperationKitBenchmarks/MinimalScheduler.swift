import Dispatch
import Foundation
import Synchronization

// A minimal scheduler, written for this benchmark as a floor: what running a dependency graph costs on
// this machine with nothing but the scheduling itself. Each node is a closure, an atomic count of
// unfinished dependencies and a list of dependents; ready nodes wait in one FIFO under one lock; at most
// one drain loop per core (each started with `DispatchQueue.global().async`) takes nodes from the FIFO
// and runs them. No cancellation, suspension, priorities, states, observers or errors.

/// One unit of work of the minimal scheduler: the same node as the Dispatch baseline's (a body, an
/// atomic count of unfinished dependencies, its dependents).
typealias MinimalNode = DispatchNode

/// The ready FIFO, the number of drain loops and of unfinished nodes; all under one lock.
private struct MinimalState {
    /// Ready nodes; those before `head` were already taken.
    var ready: [MinimalNode] = []
    var head = 0
    /// Drain loops started and not yet stopped.
    var loops = 0
    /// Nodes handed over and not yet finished (their dependents count too: they were handed over with them).
    var unfinished = 0
    /// Whether a thread waits in `waitForAll()` for `unfinished` to reach zero.
    var waiting = false

    var readyCount: Int { ready.count - head }

    mutating func take() -> MinimalNode? {
        guard head < ready.count else {
            return nil
        }
        let node = ready[head]
        head += 1
        if head == ready.count {
            ready.removeAll(keepingCapacity: true)
            head = 0
        }
        return node
    }

    /// How many more drain loops to start for the ready nodes (at most one per core), counted as started.
    mutating func loopsToStart(maximum: Int) -> Int {
        let count = min(maximum - loops, readyCount)
        guard count > 0 else {
            return 0
        }
        loops += count
        return count
    }
}

/// The scheduler: one lock, one FIFO, at most `activeProcessorCount` drain loops.
final class MinimalScheduler: Sendable {
    private let state = Mutex(MinimalState())
    private let finished = DispatchSemaphore(value: 0)
    private let maximumLoops = max(1, ProcessInfo.processInfo.activeProcessorCount)

    /// Hands over `nodes`, all of them wired already; those with no unfinished dependency are ready.
    ///
    /// Every node of a graph must be handed over before any of its dependencies can finish (one batch, or
    /// a one-by-one order in which each node comes before the nodes it depends on have run).
    func add(_ nodes: [MinimalNode]) {
        let start = state.withLock { state -> Int in
            state.unfinished += nodes.count
            for node in nodes where node.unfinishedDependencies.load(ordering: .relaxed) == 0 {
                state.ready.append(node)
            }
            return state.loopsToStart(maximum: maximumLoops)
        }
        startLoops(start)
    }

    /// Hands over one node with no dependencies.
    func add(_ node: MinimalNode) {
        let start = state.withLock { state -> Int in
            state.unfinished += 1
            state.ready.append(node)
            return state.loopsToStart(maximum: maximumLoops)
        }
        startLoops(start)
    }

    /// Returns once every node handed over has finished. One waiting thread at a time.
    func waitForAll() {
        let mustWait = state.withLock { state -> Bool in
            guard state.unfinished > 0 else {
                return false
            }
            state.waiting = true
            return true
        }
        if mustWait {
            finished.wait()
        }
    }

    private func startLoops(_ count: Int) {
        for _ in 0..<count {
            DispatchQueue.global().async { self.drain() }
        }
    }

    /// Runs ready nodes until the FIFO is empty. Finishing one node and taking the next is one critical section.
    private func drain() {
        var released: [MinimalNode] = []
        var next = state.withLock { state -> MinimalNode? in
            let node = state.take()
            if node == nil {
                state.loops -= 1
            }
            return node
        }
        while let node = next {
            node.body()
            for dependent in node.dependents
            where dependent.unfinishedDependencies.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                released.append(dependent)
            }
            var signal = false
            var start = 0
            next = state.withLock { state -> MinimalNode? in
                state.unfinished -= 1
                if state.unfinished == 0 && state.waiting {
                    state.waiting = false
                    signal = true
                }
                if !released.isEmpty {
                    state.ready.append(contentsOf: released)
                    // This loop takes one of them itself; the others may need more loops.
                    start = min(maximumLoops - state.loops, state.readyCount - 1)
                    start = max(0, start)
                    state.loops += start
                }
                let taken = state.take()
                if taken == nil {
                    state.loops -= 1
                }
                return taken
            }
            released.removeAll(keepingCapacity: true)
            if signal {
                finished.signal()
            }
            startLoops(start)
        }
    }
}

/// The minimal scheduler as a contender: S1–S4, batched or (S1) one by one; no S5 (no cancellation).
struct MinimalContender: Contender {
    static let name = "minimal"
    static let supportsCancellation = false

    private let scheduler = MinimalScheduler()

    func makeNode(_ body: @escaping @Sendable () -> Void) -> MinimalNode {
        MinimalNode(body: body)
    }

    func addDependency(_ node: MinimalNode, on dependency: MinimalNode) {
        node.unfinishedDependencies.wrappingAdd(1, ordering: .relaxed)
        dependency.dependents.append(node)
    }

    func run(_ nodes: [MinimalNode]) {
        scheduler.add(nodes)
        scheduler.waitForAll()
    }

    func runIndependent(count: Int, body: @escaping @Sendable () -> Void) {
        var nodes: [MinimalNode] = []
        nodes.reserveCapacity(count)
        for _ in 0..<count {
            nodes.append(MinimalNode(body: body))
        }
        run(nodes)
    }

    func runIndependentOneByOne(count: Int, body: @escaping @Sendable () -> Void) {
        for _ in 0..<count {
            scheduler.add(MinimalNode(body: body))
        }
        scheduler.waitForAll()
    }

    func runSuspended(
        count: Int,
        cancelling: Bool,
        oneByOne: Bool,
        body: @escaping @Sendable () -> Void,
        beforeCreating: () -> Void,
        afterAdding: () -> Void
    ) {
        fail("the minimal scheduler has no suspension or cancellation (S5 is not run on it)")
    }
}
