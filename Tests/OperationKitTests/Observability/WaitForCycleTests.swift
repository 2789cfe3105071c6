import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 15 §1: wait-for cycles named in a snapshot, and the renders of the live graph.
@Suite("Snapshot: wait-for cycles and renders", .offThePool)
struct WaitForCycleTests {
    /// A snapshot entry for the graph tests (no times, no children).
    func entry(
        _ name: String, _ id: Int, _ state: OperationSnapshot.State, _ blockers: [OperationSnapshot.Blocker]
    ) -> OperationSnapshot {
        OperationSnapshot(
            id: ids[id], name: name, kind: "Test", state: state, isCancelled: false, priority: .normal,
            sinceAdded: nil, sinceStarted: nil, dependencies: [], blockers: blockers, children: nil)
    }

    /// Objects that stand for operations in the graph tests (their identities only).
    let objects = (0..<4).map { _ in ClosureOperation {} }
    var ids: [ObjectIdentifier] { objects.map(ObjectIdentifier.init) }
    func reference(_ name: String, _ id: Int) -> OperationReference { OperationReference(id: ids[id], name: name) }

    @Test("a slot counts in a cycle only when every holder waits for the waiter")
    func slots() {
        let a = reference("a", 0), b = reference("b", 1), c = reference("c", 2)
        // a waits for a slot held by b and c; b waits for a; c waits for nothing: c will free one.
        let open = [
            entry("a", 0, .ready, [.concurrencyLimit(2, heldBy: [b, c])]),
            entry("b", 1, .executing, [.children([a])]),
            entry("c", 2, .executing, []),
        ]
        #expect(WaitForCycle.find(in: open).isEmpty)
        // Now c waits for a as well: nobody can free a slot.
        let closed = [
            entry("a", 0, .ready, [.concurrencyLimit(2, heldBy: [b, c])]),
            entry("b", 1, .executing, [.children([a])]),
            entry("c", 2, .executing, [.exclusiveCategory("x", heldBy: [a], queuedBehind: [])]),
        ]
        #expect(WaitForCycle.find(in: closed).map(\.description) == ["a —concurrency slot→ b —child→ a"])
    }

    @Test("two procedures waiting for each other's category form a cycle")
    func categories() {
        let a = reference("a", 0), b = reference("b", 1)
        let cycles = WaitForCycle.find(in: [
            entry("a", 0, .executing, [.exclusiveCategory("y", heldBy: [b], queuedBehind: [])]),
            entry("b", 1, .executing, [.exclusiveCategory("x", heldBy: [a], queuedBehind: [])]),
        ])
        #expect(cycles.map(\.description) == ["a —category y→ b —category x→ a"])
    }

    @Test("the cycle through a barrier and a group's membership is found, named, and drawn in red")
    func barrierAndGroup() async throws {
        // A child of the group waits for `node`, added after a barrier that waits for the group.
        let queue = ConcurrentOperationQueue(name: "snapshot.cycle")
        let node = ClosureOperation(name: "node") {}
        let child = ClosureOperation(name: "child") {}
        try child.addDependency(node)
        let group = try GroupOperation(name: "group", operations: [child])
        try queue.addOperation(group)
        queue.addBarrierBlock {}
        try queue.addOperation(node)

        try await untilTrue { !queue.snapshot().waitForCycles.isEmpty }
        let snapshot = queue.snapshot()
        let cycle = try #require(snapshot.waitForCycles.first)
        #expect(cycle.steps.map(\.operation.name) == ["group", "child", "node", "barrier"])
        #expect(cycle.steps.map(\.reason) == [.child, .dependency, .dependency, .dependency])
        #expect(snapshot.description.contains("wait-for cycles:\n  group —child→ child —dependency→ node"))
        #expect(snapshot.mermaid.contains("linkStyle"))
        #expect(snapshot.dot.contains("color=red"))

        node.cancel()  // breaks the cycle: the node finishes without executing
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("two groups holding categories their children want the other way round: a cycle through categories")
    func crossedCategories() async throws {
        let first = uniqueExclusivityCategory("cycle-a"), second = uniqueExclusivityCategory("cycle-b")
        let queue = ConcurrentOperationQueue(name: "snapshot.crossed")
        let childOfA = ClosureProcedure<Void>(name: "a's child") {}
        try childOfA.addCondition(MutuallyExclusive(category: second))
        let childOfB = ClosureProcedure<Void>(name: "b's child") {}
        try childOfB.addCondition(MutuallyExclusive(category: first))
        let groupA = try GroupOperation(name: "group a", operations: [childOfA])
        try groupA.addCondition(MutuallyExclusive(category: first))
        let groupB = try GroupOperation(name: "group b", operations: [childOfB])
        try groupB.addCondition(MutuallyExclusive(category: second))
        // Both groups take their category before either child asks for the other's.
        groupA.isSuspended = true
        groupB.isSuspended = true
        try queue.addOperations([groupA, groupB], waitUntilFinished: false)
        try await untilTrue {
            let snapshot = queue.snapshot()
            return snapshot.operation(named: "group a")?.state == .executing
                && snapshot.operation(named: "group b")?.state == .executing
        }
        groupA.isSuspended = false
        groupB.isSuspended = false

        try await untilTrue { !queue.snapshot().waitForCycles.isEmpty }
        let cycle = try #require(queue.snapshot().waitForCycles.first)
        #expect(cycle.steps.map(\.operation.name) == ["group a", "a's child", "group b", "b's child"])
        #expect(cycle.steps.map(\.reason) == [.child, .exclusiveCategory(second), .child, .exclusiveCategory(first)])

        childOfA.cancel()  // a waiting procedure cancelled withdraws its request: the groups finish
        childOfB.cancel()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("the renders name every operation, its state, and mark the blocking edges")
    func renders() throws {
        let queue = ConcurrentOperationQueue(name: "snapshot.render")
        queue.isSuspended = true
        let first = ClosureOperation(name: "download") {}
        let second = ClosureOperation(name: "resize \"big\"") {}
        try second.addDependency(first)
        try queue.addOperations([first, second], waitUntilFinished: false)
        let snapshot = queue.snapshot()

        let table = snapshot.description
        #expect(table.hasPrefix("queue snapshot.render: 2 operations, at most 64 at once, suspended\n"))
        #expect(table.contains("download"))
        #expect(table.contains("dependencies: download"))
        #expect(table.contains("queue snapshot.render suspended"))

        let mermaid = snapshot.mermaid
        #expect(mermaid.hasPrefix("flowchart LR\n"))
        #expect(mermaid.contains("n0[\"download<br/>ready<br/><i>queue snapshot.render suspended</i>\"]:::ready"))
        #expect(mermaid.contains("n1(\"resize #quot;big#quot;<br/>pending\"):::pending"))
        #expect(mermaid.contains("n0 ==> n1"))

        let dot = snapshot.dot
        #expect(dot.hasPrefix("digraph \"snapshot.render\" {"))
        #expect(dot.contains("\"n0\" -> \"n1\" [style=bold];"))
        #expect(dot.contains("label=\"resize \\\"big\\\"\\npending\""))

        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("snapshots taken while operations are added, linked, run and finish: no crash, no race")
    func churn() async throws {
        let queue = try ConcurrentOperationQueue(name: "snapshot.churn", maxConcurrentOperationCount: 4)
        let done = Latch(count: 1)
        let taker = DispatchQueue(label: "snapshot.churn.taker")
        let taken = AtomicCounter()
        taker.async {
            while done.count > 0 {
                let snapshot = queue.snapshot()
                _ = snapshot.description
                _ = snapshot.mermaid
                taken.increment()
            }
        }
        for round in 0..<20 {
            var operations: [ConcurrentOperation] = []
            for index in 0..<50 {
                let operation = ClosureOperation(name: "r\(round)-\(index)") {}
                if let previous = operations.last, index % 3 != 0 { try operation.addDependency(previous) }
                operations.append(operation)
            }
            let group = try GroupOperation(name: "g\(round)", operations: [ClosureOperation {}, ClosureOperation {}])
            try queue.addOperations(operations + [group], waitUntilFinished: false)
            if round % 4 == 0 { operations.last?.cancel() }
        }
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        done.countDown()
        try await untilTrue { taken.value > 0 }
        #expect(queue.snapshot().operations.isEmpty)
    }
}
