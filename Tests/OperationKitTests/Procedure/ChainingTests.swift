import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// `then` chaining (issue 16, part 4): `a.then(b)`, `a.then { … }`, `[a, b].then(c)`, and the
/// errors of misuse, which are addDependency's.
@Suite("Chaining with then", .offThePool)
struct ChainingTests {
    @Test("a.then(b).then(c) returns the last one and runs in order, whatever order they are added in")
    func orderThroughThen() async throws {
        let queue = ConcurrentOperationQueue(name: "then-order")
        let log = Recorder<String>()
        let a = ClosureOperation(name: "a") { log.record("a") }
        let b = ClosureProcedure<Int>(name: "b") { log.record("b"); return 2 }
        let c = ClosureOperation(name: "c") { log.record("c") }
        let last = try a.then(b).then(c)
        #expect(last === c)
        #expect(b.dependencies.map(\.displayName) == ["a"])
        #expect(c.dependencies.map(\.displayName) == ["b"])
        try queue.addOperations([c, b, a], waitUntilFinished: false)
        #expect(await c.finishes())
        #expect(log.values == ["a", "b", "c"])
        #expect(b.output == 2)
    }

    @Test("a.then { } makes a ClosureProcedure that depends on a, with the closure's value; not queued")
    func thenClosure() async throws {
        let queue = ConcurrentOperationQueue(name: "then-closure")
        let gate = Gate()
        let a = ClosureProcedure<Int>(name: "a") { _ = gate.wait(timeout: procedureTimeout); return 1 }
        let next = a.then(name: "next") { "after a" }
        let void = next.then(name: "void") {}
        #expect(next.displayName == "next")
        #expect(next.dependencies.first === a && next.dependencies.count == 1)
        #expect(void.dependencies.first === next)
        try queue.addOperations([a, next, void], waitUntilFinished: false)
        #expect(!next.isFinished && !next.isExecuting)
        gate.open()
        #expect(await void.finishes())
        #expect(next.output == "after a")
        #expect(void.errors.isEmpty && !void.isCancelled)
    }

    @Test("fan-in: [a, b].then(c) waits for both; [a, b].then { } too; an empty sequence adds nothing")
    func fanIn() async throws {
        let queue = ConcurrentOperationQueue(name: "then-fan-in")
        let gate = Gate()
        let a = ClosureOperation(name: "a") { _ = gate.wait(timeout: procedureTimeout) }
        let b = ClosureProcedure<Int>(name: "b") { 2 }  // mixed types: a [ConcurrentOperation]
        let c = ClosureOperation(name: "c") {}
        let mixed: [ConcurrentOperation] = [a, b]
        #expect(try mixed.then(c) === c)
        let d = [a, b].then(name: "d") { 4 }
        #expect(Set(c.dependencies.map(\.displayName)) == ["a", "b"])
        #expect(Set(d.dependencies.map(\.displayName)) == ["a", "b"])
        let lone = ClosureOperation(name: "lone") {}
        #expect(try [ClosureOperation]().then(lone) === lone)
        #expect(lone.dependencies.isEmpty)
        try queue.addOperations([a, b, c, d], waitUntilFinished: false)
        #expect(await b.finishes())
        #expect(!c.isFinished && !d.isFinished, "a still runs")
        gate.open()
        #expect(await c.finishes())
        #expect(await d.finishes())
        #expect(d.output == 4)
    }

    @Test("misuse throws addDependency's errors and changes nothing: self, started, finished, cycle")
    func misuse() async throws {
        let queue = ConcurrentOperationQueue(name: "then-misuse")
        let a = ClosureOperation(name: "a") {}
        #expect(caughtOperationError { try a.then(a) }?.code == .selfDependency)
        #expect(caughtOperationError { try [a].then(a) }?.code == .selfDependency)

        let finished = ClosureOperation(name: "finished") {}
        try queue.addOperation(finished)
        #expect(await finished.finishes())
        let late = caughtOperationError { try a.then(finished) }
        #expect(late?.code == .dependentAlreadyFinished)
        #expect(late?.operationNames == ["finished", "a"])
        #expect(caughtOperationError { try [a].then(finished) }?.code == .dependentAlreadyFinished)

        let gate = Gate()
        let started = Latch()
        let running = ClosureOperation(name: "running") {
            started.countDown()
            _ = gate.wait(timeout: procedureTimeout)
        }
        try queue.addOperation(running)
        #expect(await started.opens())
        #expect(caughtOperationError { try a.then(running) }?.code == .dependentAlreadyExecuting)
        #expect(running.dependencies.isEmpty)
        gate.open()

        // A cycle is found once both are in a queue (here, when the second is added).
        let cycleQueue = ConcurrentOperationQueue(name: "then-cycle")
        cycleQueue.isSuspended = true
        let x = ClosureOperation(name: "x") {}
        let y = ClosureOperation(name: "y") {}
        try x.then(y)
        try cycleQueue.addOperations([x, y], waitUntilFinished: false)
        let cycle = caughtOperationError { try y.then(x) }
        #expect(cycle?.code == .dependencyCycle)
        #expect(x.dependencies.isEmpty, "nothing was added")
        cycleQueue.isSuspended = false
        #expect(await y.finishes())
        #expect(await running.finishes())
    }

    @Test("cancelled before it runs: the next one still runs (a dependency, not a condition)")
    func cancelledBefore() async throws {
        let queue = ConcurrentOperationQueue(name: "then-cancel-before")
        let ran = AtomicCounter()
        let a = ClosureProcedure<Int>(name: "a") { ran.increment(); return 1 }
        let b = a.then(name: "b") { ran.increment(); return "b" }
        let skipped = ClosureProcedure<Int>(name: "skipped") { 3 }
        try skipped.addCondition(NoFailedDependencies())
        try a.then(skipped)
        a.cancel()
        try queue.addOperations([a, b, skipped], waitUntilFinished: false)
        #expect(await b.finishes())
        #expect(await skipped.finishes())
        #expect(ran.value == 1, "only b ran")
        #expect(b.output == "b")
        #expect(skipped.isCancelled && skipped.output == nil, "NoFailedDependencies opts out")
    }

    @Test("cancelled while running: the next one waits for it to finish, then runs")
    func cancelledWhileRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "then-cancel-running")
        let started = Latch()
        let gate = Gate()
        let a = ClosureProcedure<Int>(name: "a", asynchronous: { procedure in
            started.countDown()
            onThreadOfItsOwn {
                _ = gate.wait(timeout: procedureTimeout)
                procedure.finish(withValue: 1)
            }
        })
        let b = a.then(name: "b") { 2 }
        try queue.addOperations([a, b], waitUntilFinished: false)
        #expect(await started.opens())
        a.cancel()
        #expect(!b.isFinished && !b.isExecuting, "a has not finished")
        gate.open()
        #expect(await b.finishes())
        #expect(b.output == 2 && a.output == 1)
    }
}
