// One connected component of the dependency graph: its lock and its topological order space.

import Synchronization

/// A connected component of the dependency graph (see `DependencyGraph`), union–find style.
///
/// Every operation that takes part in an edge belongs to one component (its `graphComponentBits`);
/// an operation that never takes part in an edge belongs to none, and so pays nothing. A
/// component that has been merged into another points to it (`parent`); the one at the end of
/// the chain, the root, holds the lock that protects, for all the members:
/// - their `graphOrder` and the root's order counters (`nextLow`, `nextHigh`);
/// - their `dependents` lists, and the handshake of `registerDependent` with a finish;
/// - the count of unfinished registered dependencies in their `readiness`;
/// - their `graphComponentBits` (set from 0 by a compare-and-exchange, repointed closer to the root
///   under the root's lock; read atomically, without a lock).
///
/// Components are never split (removing an edge leaves the component as it is), so an edge
/// always joins two members of one component, and every path of the graph stays inside one:
/// the cycle check of an edge between members of one component looks only at that component,
/// and is exact. An edge between two components cannot close a cycle (no path joins them): the
/// two are merged — the smaller into the larger, its orders shifted wholesale below (it holds
/// the dependency) or above (it holds the dependent) the larger one's — and the edge then
/// respects the order.
///
/// Lock order: a component's lock, then a queue's lock, then an operation's lock. Two component
/// locks are held together only by `merge`, which takes both roots in the order of their
/// addresses. No code takes a component lock while holding any other lock.
final class GraphComponent: @unchecked Sendable {  // every field is protected as marked
    let lock = Lock()

    /// The component this one was merged into, as the bits of an unretained pointer; 0 while it
    /// is a root. Stored once (releasing), under this component's lock and its new parent's.
    private let parentBits = Atomic<UInt>(0)
    /// Keeps the parent alive. Written once, before `parentBits`; never read.
    private var parentReference: GraphComponent?
    /// Added to the order of a member that still points here to give its order in the parent's
    /// order space. Written once, before `parentBits`, then only read.
    private var offsetInParent = 0

    // protected by `lock`; meaningful while this component is a root
    private var nextLow = -1
    private var nextHigh = 0
    /// Operations that joined this component and the ones merged into it (union by size keeps
    /// every chain of parents shorter than log2 of the size).
    private var memberCount = 0

    /// This component as the bits of an unretained pointer.
    var bits: UInt { UInt(bitPattern: Unmanaged.passUnretained(self).toOpaque()) }

    /// The component whose pointer bits are `bits` (non-zero). It must be alive: a member keeps
    /// the component it joined alive, and every component keeps its parent alive.
    @inline(__always)
    static func at(_ bits: UInt) -> Unmanaged<GraphComponent> {
        Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: bits).unsafelyUnwrapped)
    }

    /// The bits of the root now of the component at `bits` (lock-free, retaining nothing; it may
    /// be merged away at once unless its lock is held).
    static func rootBits(from bits: UInt) -> UInt {
        var current = bits
        while true {
            let parent = at(current)._withUnsafeGuaranteedRef { $0.parentBits.load(ordering: .acquiring) }
            if parent == 0 { return current }
            current = parent
        }
    }

    /// The root now of `component`.
    static func root(from component: GraphComponent) -> GraphComponent {
        at(rootBits(from: component.bits)).takeUnretainedValue()
    }

    /// Locks the root of the component at `bits` and returns it; it stays the root while locked.
    static func lockedRoot(fromBits bits: UInt) -> GraphComponent {
        lockedRootUnretained(fromBits: bits).takeUnretainedValue()
    }

    /// ``lockedRoot(fromBits:)`` without a retain: the root is alive while a member of the
    /// component at `bits` is, which the caller keeps alive.
    @inline(__always)
    static func lockedRootUnretained(fromBits bits: UInt) -> Unmanaged<GraphComponent> {
        var current = bits
        while true {
            let root = at(rootBits(from: current))
            let locked = root._withUnsafeGuaranteedRef { root -> Bool in
                root.lock.lock()
                if root.parentBits.load(ordering: .relaxed) == 0 { return true }
                root.lock.unlock()
                return false
            }
            if locked { return root }
            current = UInt(bitPattern: root.toOpaque())
        }
    }

    static func lockedRoot(from component: GraphComponent) -> GraphComponent { lockedRoot(fromBits: component.bits) }

    /// A new, empty component, locked.
    private static func lockedNew() -> GraphComponent {
        let component = GraphComponent()
        component.lock.lock()
        return component
    }

    /// Locks the root of the component of `operation`, which joins a new one if it has none.
    static func lock(componentOf operation: ConcurrentOperation) -> GraphComponent {
        while true {
            let bits = operation.graphComponentBits.load(ordering: .acquiring)
            if bits != 0 { return lockedRoot(fromBits: bits) }
            let graph = lockedNew()
            if graph.adopt(operation) == nil { return graph }
            graph.lock.unlock()  // it joined another component meanwhile
        }
    }

    /// Locks the root of a component that holds both ends of an edge, merging theirs if needed.
    static func lock(componentOf dependent: ConcurrentOperation, and dependency: ConcurrentOperation) -> GraphComponent {
        while true {
            var anchor = dependent.graphComponentBits.load(ordering: .acquiring)
            if anchor == 0 { anchor = dependency.graphComponentBits.load(ordering: .acquiring) }
            let graph = anchor != 0 ? lockedRoot(fromBits: anchor) : lockedNew()
            if let foreign = graph.adopt(dependent) {
                graph.lock.unlock()
                merge(dependencySide: graph, dependentSide: foreign)
            } else if let foreign = graph.adopt(dependency) {
                graph.lock.unlock()
                merge(dependencySide: foreign, dependentSide: graph)
            } else {
                return graph
            }
        }
    }

    /// Merges the components of `lower` and `upper` (no edge joins them) unless they are one: the
    /// smaller is moved into the larger, and its orders below the larger's (if it is `lower`'s)
    /// or above them (if it is `upper`'s). Takes both roots' locks, in the order of addresses.
    static func merge(dependencySide lower: GraphComponent, dependentSide upper: GraphComponent) {
        while true {
            let below = root(from: lower)
            let above = root(from: upper)
            if below === above { return }
            let (first, second) = below.bits < above.bits ? (below, above) : (above, below)
            first.lock.lock()
            second.lock.lock()
            let bothRoots = below.parentBits.load(ordering: .relaxed) == 0 && above.parentBits.load(ordering: .relaxed) == 0
            if bothRoots {
                if below.memberCount <= above.memberCount {
                    // below's highest order lands on above's next free low order
                    let offset = above.nextLow - (below.nextHigh - 1)
                    above.nextLow = below.nextLow + offset
                    above.memberCount += below.memberCount
                    below.forward(to: above, offset: offset)
                } else {
                    // above's lowest order lands on below's next free high order
                    let offset = below.nextHigh - (above.nextLow + 1)
                    below.nextHigh = above.nextHigh + offset
                    below.memberCount += above.memberCount
                    above.forward(to: below, offset: offset)
                }
            }
            second.lock.unlock()
            first.lock.unlock()
            if bothRoots { return }
        }
    }

    /// Under the locks of this root and of `parent`.
    private func forward(to parent: GraphComponent, offset: Int) {
        offsetInParent = offset
        parentReference = parent
        parentBits.store(parent.bits, ordering: .releasing)
    }

    // MARK: Members (call on a locked root)

    /// Makes `operation` a member if it belongs to no component. Returns `nil` if it is a member
    /// now, or the component it belongs to if that is another one.
    func adopt(_ operation: ConcurrentOperation) -> GraphComponent? {
        let own = bits
        var current = operation.graphComponentBits.load(ordering: .acquiring)
        if current == 0 {
            let (joined, found) = operation.graphComponentBits.compareExchange(
                expected: 0, desired: own, ordering: .acquiringAndReleasing)
            if joined {
                // Written once, by the one thread whose exchange succeeded; read only by deinit.
                operation.graphComponentKeepAlive = self
                memberCount += 1
                return nil
            }
            current = found
        }
        if current == own || GraphComponent.rootBits(from: current) == own { return nil }
        return GraphComponent.at(current).takeUnretainedValue()
    }

    /// Whether `operation` is a member (a dependency that is not may be anywhere).
    func holds(_ operation: ConcurrentOperation) -> Bool {
        let current = operation.graphComponentBits.load(ordering: .acquiring)
        return current != 0 && (current == bits || GraphComponent.rootBits(from: current) == bits)
    }

    /// The order of member `operation` in this root's order space (`DependencyGraph.unassigned`
    /// if it has none). Points the operation at this root, folding the offsets of the
    /// components on the way into its order.
    @inline(__always)
    func order(of operation: ConcurrentOperation) -> Int {
        let own = bits
        let current = operation.graphComponentBits.load(ordering: .acquiring)
        if current == own { return operation.graphOrder }
        return compress(operation, from: current)
    }

    private func compress(_ operation: ConcurrentOperation, from start: UInt) -> Int {
        let own = bits
        var offset = 0
        var current = start
        while current != own {
            let step = GraphComponent.at(current)._withUnsafeGuaranteedRef {
                ($0.offsetInParent, $0.parentBits.load(ordering: .acquiring))
            }
            precondition(step.1 != 0, "an operation of the graph is not in the component of its edge")
            offset += step.0
            current = step.1
        }
        if operation.graphOrder != DependencyGraph.unassigned { operation.graphOrder += offset }
        operation.graphComponentBits.store(own, ordering: .releasing)
        return operation.graphOrder
    }

    /// Gives member `operation` an order below every other.
    func moveToBottom(_ operation: ConcurrentOperation) {
        _ = order(of: operation)
        operation.graphOrder = nextLow
        nextLow -= 1
    }

    /// Gives member `operation` an order above every other.
    func moveToTop(_ operation: ConcurrentOperation) {
        _ = order(of: operation)
        operation.graphOrder = nextHigh
        nextHigh += 1
    }
}

extension ConcurrentOperation {
    /// The operation's component (not necessarily a root), if it has one.
    var componentForReading: GraphComponent? {
        let bits = graphComponentBits.load(ordering: .acquiring)
        return bits == 0 ? nil : GraphComponent.at(bits).takeUnretainedValue()
    }
}
