import Dispatch
import Foundation
import OperationKit
import Synchronization

/// Something that can run a graph of closures with dependencies between them.
///
/// A fresh contender is created for every measured run, so no state leaks from one run into the next.
protocol Contender {
    associatedtype Node

    /// The name printed in the results.
    static var name: String { get }

    init()

    /// Wraps `body` in one schedulable unit; nothing runs yet.
    func makeNode(_ body: @escaping @Sendable () -> Void) -> Node

    /// Makes `node` wait for `dependency`. Only called before `run(_:)`.
    func addDependency(_ node: Node, on dependency: Node)

    /// Makes `node` wait for every one of `dependencies`, with the contender's bulk API if it has
    /// one (OperationKit's `addDependencies(_:)`); by default one `addDependency` per edge.
    func addDependencies(_ node: Node, on dependencies: [Node])

    /// Hands a fully wired graph to the scheduler and returns once every node has finished.
    func run(_ nodes: [Node])

    /// Whether the contender can suspend and cancel (S5); the minimal scheduler cannot.
    static var supportsCancellation: Bool { get }

    /// Runs `body` `count` times with no dependencies and returns once all runs are done.
    func runIndependent(count: Int, body: @escaping @Sendable () -> Void)

    /// The same as `runIndependent`, but each unit is made and handed to the scheduler on its own (one
    /// `addOperation` per operation, as a Foundation user writes it), then the caller waits for all.
    func runIndependentOneByOne(count: Int, body: @escaping @Sendable () -> Void)

    /// Submits `count` units while the scheduler is suspended, optionally cancels them all, resumes and waits.
    ///
    /// With `oneByOne`, each unit is handed over as soon as it is made (one `addOperation` each); otherwise
    /// all of them at once. `beforeCreating` is called after the caller-side array is reserved and before the
    /// first unit is made; `afterAdding` once every unit has been handed to the (still suspended) scheduler.
    func runSuspended(
        count: Int,
        cancelling: Bool,
        oneByOne: Bool,
        body: @escaping @Sendable () -> Void,
        beforeCreating: () -> Void,
        afterAdding: () -> Void
    )

    /// Checks what the contender itself counted during a run in which `finished` nodes finished and
    /// `conditionsEvaluated` of them executed (the procedure contender counts its condition and observer
    /// calls); by default nothing. Called after the timed part of the run.
    func verify(finished: Int, conditionsEvaluated: Int, in what: String)
}

extension Contender {
    static var supportsCancellation: Bool { true }

    func verify(finished: Int, conditionsEvaluated: Int, in what: String) {}

    func runSuspended(
        count: Int,
        cancelling: Bool,
        oneByOne: Bool = false,
        body: @escaping @Sendable () -> Void
    ) {
        runSuspended(
            count: count, cancelling: cancelling, oneByOne: oneByOne, body: body, beforeCreating: {}, afterAdding: {}
        )
    }

    func runSuspended(
        count: Int,
        cancelling: Bool,
        body: @escaping @Sendable () -> Void,
        beforeCreating: () -> Void,
        afterAdding: () -> Void
    ) {
        runSuspended(
            count: count,
            cancelling: cancelling,
            oneByOne: false,
            body: body,
            beforeCreating: beforeCreating,
            afterAdding: afterAdding
        )
    }
}

// MARK: - Operation queues

/// The shared shape of OperationKit's and Foundation's queues: both contenders are driven identically.
protocol QueueContender: Contender {
    /// Makes the nodes of a run whose every node runs the same `body` (S1, S5): by default
    /// `makeNode(body)` each time. A contender that must wrap a body to run it wraps it once here,
    /// as a user running one closure many times would, instead of once per node.
    func nodeMaker(sharing body: @escaping @Sendable () -> Void) -> () -> Node
    func add(_ nodes: [Node])
    /// Adds one node on its own (`addOperation(_:)`).
    func addOne(_ node: Node)
    func waitForAll()
    func setSuspended(_ suspended: Bool)
    func cancelAll()
}

extension QueueContender {
    func nodeMaker(sharing body: @escaping @Sendable () -> Void) -> () -> Node {
        { makeNode(body) }
    }

    func run(_ nodes: [Node]) {
        add(nodes)
        waitForAll()
    }

    func runIndependent(count: Int, body: @escaping @Sendable () -> Void) {
        let makeNode = nodeMaker(sharing: body)
        var nodes: [Node] = []
        nodes.reserveCapacity(count)
        for _ in 0..<count {
            nodes.append(makeNode())
        }
        run(nodes)
    }

    func runIndependentOneByOne(count: Int, body: @escaping @Sendable () -> Void) {
        let makeNode = nodeMaker(sharing: body)
        for _ in 0..<count {
            addOne(makeNode())
        }
        waitForAll()
    }

    func runSuspended(
        count: Int,
        cancelling: Bool,
        oneByOne: Bool,
        body: @escaping @Sendable () -> Void,
        beforeCreating: () -> Void,
        afterAdding: () -> Void
    ) {
        let makeNode = nodeMaker(sharing: body)
        setSuspended(true)
        if oneByOne {
            beforeCreating()
            for _ in 0..<count {
                addOne(makeNode())
            }
        } else {
            var nodes: [Node] = []
            nodes.reserveCapacity(count)
            beforeCreating()
            for _ in 0..<count {
                nodes.append(makeNode())
            }
            add(nodes)
        }
        afterAdding()
        if cancelling {
            cancelAll()
        }
        setSuspended(false)
        waitForAll()
    }
}

extension Contender {
    func addDependencies(_ node: Node, on dependencies: [Node]) {
        for dependency in dependencies { addDependency(node, on: dependency) }
    }
}

/// The two OperationKit contenders: `ConcurrentOperation`s on a `ConcurrentOperationQueue` with the
/// default concurrency, driven identically; they differ only in the operations `makeNode` makes.
protocol OperationKitQueueContender: QueueContender where Node == ConcurrentOperation {
    var queue: ConcurrentOperationQueue { get }
}

extension OperationKitQueueContender {
    func addDependency(_ node: ConcurrentOperation, on dependency: ConcurrentOperation) {
        do {
            try node.addDependency(dependency)
        } catch {
            fail("\(Self.name) refused a dependency: \(error)")
        }
    }

    func addDependencies(_ node: ConcurrentOperation, on dependencies: [ConcurrentOperation]) {
        do {
            try node.addDependencies(dependencies)
        } catch {
            fail("\(Self.name) refused dependencies: \(error)")
        }
    }

    func add(_ nodes: [ConcurrentOperation]) {
        do {
            try queue.addOperations(nodes, waitUntilFinished: false)
        } catch {
            fail("\(Self.name) refused a batch of \(nodes.count) operations: \(error)")
        }
    }

    func addOne(_ node: ConcurrentOperation) {
        do {
            try queue.addOperation(node)
        } catch {
            fail("\(Self.name) refused an operation: \(error)")
        }
    }

    func waitForAll() {
        queue.waitUntilAllOperationsAreFinishedBlocking()
    }

    func setSuspended(_ suspended: Bool) {
        queue.isSuspended = suspended
    }

    func cancelAll() {
        queue.cancelAllOperations()
    }
}

/// OperationKit: `ClosureOperation` on a `ConcurrentOperationQueue` with the default concurrency.
struct OperationKitContender: OperationKitQueueContender {
    static let name = "OperationKit"

    let queue = ConcurrentOperationQueue(name: "bench")

    func makeNode(_ body: @escaping @Sendable () -> Void) -> ConcurrentOperation {
        ClosureOperation(body)
    }
}

/// OperationKit's `AsyncOperation<Void>` running the same (synchronous) body from its async closure, on a
/// `ConcurrentOperationQueue` with the default concurrency.
///
/// Each node's closure is a literal, as a user writes `AsyncOperation { … }`: one closure context per
/// node, capturing the body. Where every node runs the same body (S1, S5), the other contenders reuse
/// the body itself and allocate nothing for it, so this one makes a single async closure for the run
/// (see `SharedAsyncBody`).
struct AsyncOperationContender: OperationKitQueueContender {
    static let name = "OK async"

    let queue = ConcurrentOperationQueue(name: "bench")

    func makeNode(_ body: @escaping @Sendable () -> Void) -> ConcurrentOperation {
        AsyncOperation<Void> { body() }
    }

    func nodeMaker(sharing body: @escaping @Sendable () -> Void) -> () -> ConcurrentOperation {
        let shared = SharedAsyncBody<Void> { body() }
        return { shared.makeOperation() }
    }
}

/// One async closure for the operations of a run. A closure stored in a generic type is kept as the
/// unspecialised type declares it, which is how `AsyncOperation<Output>`'s initialiser takes it; a
/// `() async -> Void` value passed to that initialiser is wrapped in a new thunk, an allocation, at
/// every call. (`makeAsyncOperation(_:)` of the Swift concurrency section pays that thunk per
/// operation; so did this contender until the fifth round of issue 17: see Performance.md.)
struct SharedAsyncBody<Output: Sendable>: Sendable {
    let body: @Sendable () async throws -> Output

    init(_ body: @escaping @Sendable () async throws -> Output) {
        self.body = body
    }

    func makeOperation() -> ConcurrentOperation {
        AsyncOperation(body)
    }
}

/// What the procedure contender's shared condition and observer saw during one run.
final class ProcedureCounters: Sendable {
    let conditionsEvaluated = Atomic<Int>(0)
    let didFinishCalls = Atomic<Int>(0)
}

/// OperationKit's procedures: `ClosureProcedure<Void>` running the same body, each with one condition
/// that is always satisfied and one observer (both one shared instance per run), on a
/// `ConcurrentOperationQueue` with the default concurrency. They are given to the initialiser
/// (`ClosureProcedure(name:conditions:observers:_:)`, what Procedures.md recommends: stored before the
/// procedure is shared, without its lock), in one pair of arrays shared by every procedure of the run
/// (an array literal per call would allocate two arrays per procedure). The condition counts its
/// evaluations and the observer its did-finish events (relaxed atomic increments); both counts are
/// checked after each run.
struct ProcedureContender: OperationKitQueueContender {
    static let name = "OK procedure"

    let queue = ConcurrentOperationQueue(name: "bench")
    private let counters: ProcedureCounters
    private let conditions: [any OperationCondition]
    private let observers: [any OperationObserver]

    init() {
        let counters = ProcedureCounters()
        self.counters = counters
        conditions = [ClosureCondition(name: "always") { _ in
            counters.conditionsEvaluated.wrappingAdd(1, ordering: .relaxed)
            return .satisfied
        }]
        observers = [ClosureObserver(didFinish: { _, _ in
            counters.didFinishCalls.wrappingAdd(1, ordering: .relaxed)
        })]
    }

    func makeNode(_ body: @escaping @Sendable () -> Void) -> ConcurrentOperation {
        ClosureProcedure<Void>(conditions: conditions, observers: observers, body)
    }

    /// Checks the condition ran once per procedure that executed, and did finish reached the observer once
    /// per procedure, right after the queue's wait returned: the wait returns only once every procedure's
    /// did-finish observers have returned (the wait orders their increments before these loads).
    func verify(finished: Int, conditionsEvaluated: Int, in what: String) {
        let didFinish = counters.didFinishCalls.load(ordering: .acquiring)
        let evaluated = counters.conditionsEvaluated.load(ordering: .acquiring)
        if didFinish != finished {
            fail("\(what): the observer was told did finish \(didFinish) times, expected \(finished)")
        }
        if evaluated != conditionsEvaluated {
            fail("\(what): the condition was evaluated \(evaluated) times, expected \(conditionsEvaluated)")
        }
    }
}

/// OperationKit's procedures with nothing added: `ClosureProcedure<Void>` running the same body, with no
/// condition and no observer, on a `ConcurrentOperationQueue` with the default concurrency. Beside
/// ``ProcedureContender`` it separates what the procedure type costs from what one condition and one
/// observer add.
struct BareProcedureContender: OperationKitQueueContender {
    static let name = "OK bare proc."

    let queue = ConcurrentOperationQueue(name: "bench")

    init() {}

    func makeNode(_ body: @escaping @Sendable () -> Void) -> ConcurrentOperation {
        ClosureProcedure<Void>(body)
    }
}

/// Foundation: `BlockOperation` on an `OperationQueue` with the default concurrency.
struct FoundationContender: QueueContender {
    static let name = "Foundation"

    private let queue: OperationQueue

    init() {
        queue = OperationQueue()
        queue.name = "bench"
    }

    func makeNode(_ body: @escaping @Sendable () -> Void) -> Foundation.Operation {
        BlockOperation(block: body)
    }

    func addDependency(_ node: Foundation.Operation, on dependency: Foundation.Operation) {
        node.addDependency(dependency)
    }

    func add(_ nodes: [Foundation.Operation]) {
        queue.addOperations(nodes, waitUntilFinished: false)
    }

    func addOne(_ node: Foundation.Operation) {
        queue.addOperation(node)
    }

    func waitForAll() {
        queue.waitUntilAllOperationsAreFinished()
    }

    func setSuspended(_ suspended: Bool) {
        queue.isSuspended = suspended
    }

    func cancelAll() {
        queue.cancelAllOperations()
    }
}

// MARK: - Raw Dispatch

/// A graph node for the Dispatch baseline (and the minimal scheduler's `MinimalNode`): a body, a count of
/// unfinished dependencies and its dependents.
final class DispatchNode {
    let body: @Sendable () -> Void
    let unfinishedDependencies = Atomic<Int>(0)
    // Written only while the graph is built, before the first node is dispatched; read-only afterwards.
    var dependents: [DispatchNode] = []

    init(body: @escaping @Sendable () -> Void) {
        self.body = body
    }
}

// `dependents` is mutated only before any node is handed over (the dispatch, or the minimal scheduler's
// lock, publishes it); the counter is atomic.
extension DispatchNode: @unchecked Sendable {}

/// Raw Dispatch: one `async(group:)` per unit on the global queue; graphs count down an atomic per node.
struct DispatchContender: Contender {
    static let name = "Dispatch"

    private let group = DispatchGroup()
    private let global = DispatchQueue.global()

    func makeNode(_ body: @escaping @Sendable () -> Void) -> DispatchNode {
        DispatchNode(body: body)
    }

    func addDependency(_ node: DispatchNode, on dependency: DispatchNode) {
        node.unfinishedDependencies.wrappingAdd(1, ordering: .relaxed)
        dependency.dependents.append(node)
    }

    func run(_ nodes: [DispatchNode]) {
        // Pick the roots before dispatching any: a running root already counts its dependents down to zero.
        let roots = nodes.filter { $0.unfinishedDependencies.load(ordering: .relaxed) == 0 }
        for root in roots {
            submit(root)
        }
        group.wait()
    }

    private func submit(_ node: DispatchNode) {
        global.async(group: group) {
            node.body()
            // The last dependency to finish releases the dependent.
            for dependent in node.dependents
            where dependent.unfinishedDependencies.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                submit(dependent)
            }
        }
    }

    func runIndependent(count: Int, body: @escaping @Sendable () -> Void) {
        for _ in 0..<count {
            global.async(group: group, execute: body)
        }
        group.wait()
    }

    /// Dispatch's S1 already submits one block per item; one by one is the same code.
    func runIndependentOneByOne(count: Int, body: @escaping @Sendable () -> Void) {
        runIndependent(count: count, body: body)
    }

    /// Dispatch's S5 already submits each work item as it is made, so `oneByOne` changes nothing.
    func runSuspended(
        count: Int,
        cancelling: Bool,
        oneByOne: Bool,
        body: @escaping @Sendable () -> Void,
        beforeCreating: () -> Void,
        afterAdding: () -> Void
    ) {
        let queue = DispatchQueue(label: "bench.suspended", attributes: .concurrent)
        queue.suspend()
        var items: [DispatchWorkItem] = []
        items.reserveCapacity(count)
        beforeCreating()
        for _ in 0..<count {
            let item = DispatchWorkItem(block: body)
            queue.async(group: group, execute: item)
            items.append(item)
        }
        afterAdding()
        if cancelling {
            for item in items {
                item.cancel()
            }
        }
        queue.resume()
        group.wait()
    }
}
