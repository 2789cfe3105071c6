import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// `addDependencies(_:)`, the bulk form of `addDependency(_:)`, and what a cancelled dependent
/// leaves behind in the dependencies it never waited for.
@Suite("D. Bulk dependencies and cancelled dependents", .offThePool)
struct BulkDependencyTests {
    @Test("addDependencies before enqueueing: the dependent waits for every one")
    func bulkBeforeEnqueue() throws {
        let queue = ConcurrentOperationQueue(name: "bulk")
        queue.isSuspended = true
        let finished = AtomicCounter()
        let sources = (0..<50).map { index in ClosureOperation(name: "s\(index)") { finished.increment() } }
        let seen = Recorder<Int>()
        let sink = ClosureOperation(name: "sink") { seen.record(finished.value) }
        try sink.addDependencies(sources)
        #expect(sink.dependencies.count == 50)
        #expect(!sink.isReady)
        try queue.addOperations([sink] + sources, waitUntilFinished: false)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(seen.values == [50])
    }

    @Test("dependents given one array of dependencies keep their own lists: adding to and removing from one leaves the others as they were")
    func sharedArrayOfDependencies() throws {
        let queue = ConcurrentOperationQueue(name: "bulk-shared")
        queue.isSuspended = true
        let layer = (0..<3).map { index in ClosureOperation(name: "l\(index)") {} }
        let extra = ClosureOperation(name: "extra") {}
        let ran = Recorder<String>()
        // One array for all four (an empty list takes it without copying it), then each list
        // changes on its own: one gets a single dependency first, one an extra dependency
        // after, one loses a dependency.
        let first = ClosureOperation(name: "first") { ran.record("first") }
        try first.addDependency(extra)
        try first.addDependencies(layer)
        let second = ClosureOperation(name: "second") { ran.record("second") }
        try second.addDependencies(layer)
        try second.addDependency(extra)
        let third = ClosureOperation(name: "third") { ran.record("third") }
        try third.addDependencies(layer)
        third.removeDependency(layer[1])
        let fourth = ClosureOperation(name: "fourth") { ran.record("fourth") }
        try fourth.addDependencies(layer)
        try fourth.addDependencies([extra, layer[0]])
        #expect(first.dependencies.map(\.displayName) == ["extra", "l0", "l1", "l2"])
        #expect(second.dependencies.map(\.displayName) == ["l0", "l1", "l2", "extra"])
        #expect(third.dependencies.map(\.displayName) == ["l0", "l2"])
        #expect(fourth.dependencies.map(\.displayName) == ["l0", "l1", "l2", "extra", "l0"])
        #expect(layer.map(\.displayName) == ["l0", "l1", "l2"])
        try queue.addOperations(layer + [extra, first, second, third, fourth], waitUntilFinished: false)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(Set(ran.values) == ["first", "second", "third", "fourth"])
        #expect([first, second, third, fourth].allSatisfy { $0.dependencies.isEmpty })
    }

    @Test("addDependencies on an enqueued operation registers each edge and detects a cycle")
    func bulkWhileEnqueued() throws {
        let queue = ConcurrentOperationQueue(name: "bulk-enqueued")
        queue.isSuspended = true
        let a = ClosureOperation(name: "a") {}
        let b = ClosureOperation(name: "b") {}
        let c = ClosureOperation(name: "c") {}
        try c.addDependency(b)
        try queue.addOperations([a, b, c], waitUntilFinished: false)
        // b waits for a: fine. Then a waiting for c closes a → c → b → a.
        try b.addDependencies([a])
        let error = caughtOperationError { try a.addDependencies([c]) }
        #expect(error?.code == .dependencyCycle)
        #expect(Set(error?.operationNames ?? []) == ["a", "b", "c"])
        #expect(a.dependencies.isEmpty, "the refused edge is not kept")
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("addDependencies refuses self and a started operation, adding nothing")
    func bulkRefusals() throws {
        let a = ClosureOperation(name: "a") {}
        let b = ClosureOperation(name: "b") {}
        #expect(caughtOperationError { try b.addDependencies([a, b]) }?.code == .selfDependency)
        #expect(b.dependencies.isEmpty)
        try b.start()
        #expect(caughtOperationError { try b.addDependencies([a]) }?.code == .dependentAlreadyFinished)
        #expect(b.dependencies.isEmpty)
    }

    @Test("cancelled dependents are released before their dependency finishes, and it finishes cleanly")
    func cancelledDependentsLeaveTheirDependency() throws {
        let queue = ConcurrentOperationQueue(name: "cancelled-dependents")
        let gate = Gate()
        let dependency = ClosureOperation(name: "dependency") { _ = gate.wait(timeout: operationTestTimeout) }
        let count = 200
        let released = Latch(count: count)
        var dependents: [DeallocationProbeOperation] = []
        for index in 0..<count {
            let dependent = DeallocationProbeOperation(name: "d\(index)", deallocated: released)
            try dependent.addDependency(dependency)
            dependents.append(dependent)
        }
        try queue.addOperations([dependency] + dependents, waitUntilFinished: false)
        for dependent in dependents { dependent.cancel() }
        for dependent in dependents { #expect(dependent.waitUntilFinishedBlocking(timeout: operationTestTimeout)) }
        // The dependency is still executing; its dependents have finished and are let go.
        #expect(!dependency.isFinished)
        dependents.removeAll()
        #expect(released.wait(timeout: operationTestTimeout), "every cancelled dependent was deallocated")
        // Finishing now must not touch them.
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(dependency.isFinished)
    }
}
