import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

// Several completion blocks (issue 16, part 5): addCompletionBlock(_:) — every block once, in the
// order added, after the finish; none accepted after it; composed with completionBlock.

@Suite("Operation: several completion blocks", .offThePool)
struct CompletionBlocksTests {
    @Test("completionBlock and added blocks run once each, in order, after the operation finished")
    func order() async throws {
        let ran = Recorder<String>()
        let operation = ClosureOperation(name: "blocks") {}
        operation.completionBlock = { ran.record("block:\(operation.isFinished)") }
        for index in 1...3 { try operation.addCompletionBlock { ran.record("added\(index):\(operation.isFinished)") } }
        let queue = ConcurrentOperationQueue(name: "completion-order")
        try queue.addOperation(operation)
        #expect(await queue.empties())
        #expect(ran.values == ["block:true", "added1:true", "added2:true", "added3:true"])
    }

    @Test("setting completionBlock replaces the blocks added before; reading it gives one block that runs them all")
    func setterReplaces() async throws {
        let ran = Recorder<String>()
        let operation = ClosureOperation(name: "replace") {}
        try operation.addCompletionBlock { ran.record("old") }
        operation.completionBlock = { ran.record("new") }
        try operation.addCompletionBlock { ran.record("after") }
        let composite = operation.completionBlock
        composite?()
        #expect(ran.values == ["new", "after"])
        try operation.start()
        #expect(ran.values == ["new", "after", "new", "after"])
    }

    @Test("adding a block after the finish throws alreadyFinished and never runs it")
    func afterFinish() async throws {
        let ran = AtomicCounter()
        let operation = ClosureOperation(name: "late") {}
        try operation.start()
        let error = caughtOperationError { try operation.addCompletionBlock { ran.increment() } }
        #expect(error?.code == .alreadyFinished)
        #expect(error?.operationNames == ["late"])
        #expect(ran.value == 0)
    }

    @Test("a cancelled operation runs its blocks once; so does a procedure, before its did-finish observers")
    func cancelledAndProcedure() async throws {
        let ran = Recorder<String>()
        let queue = suspendedProcedureQueue("completion-cancelled")
        let operation = ClosureOperation(name: "cancelled") { ran.record("work") }
        try operation.addCompletionBlock { ran.record("a") }
        try operation.addCompletionBlock { ran.record("b") }
        operation.cancel()
        let procedure = ClosureProcedure<Void>(name: "procedure") {}
        try procedure.addCompletionBlock { ran.record("p1") }
        try procedure.addCompletionBlock { ran.record("p2") }
        let done = Latch()
        try procedure.addObserver(ClosureObserver(didFinish: { _, _ in
            ran.record("didFinish")
            done.countDown()
        }))
        try queue.addOperation(operation)
        // A suspended queue holds even a cancelled operation until it is resumed (S5).
        #expect(ran.values == [])
        #expect(queue.operationCount == 1)
        queue.isSuspended = false
        #expect(await queue.empties())
        #expect(ran.values == ["a", "b"])
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(ran.values == ["a", "b", "p1", "p2", "didFinish"])
    }

    @Test("blocks added from many threads while the operation finishes and is cancelled: each accepted block runs exactly once, in each thread's order; refused ones never")
    func concurrentAddsAndFinish() async throws {
        for round in 0..<20 {
            let start = Gate()
            let release = Gate()
            let operation = ClosureOperation(name: "race\(round)", asynchronous: { operation in
                _ = release.wait(timeout: procedureTimeout)
                operation.finish()
            })
            let ran = Recorder<[Int]>()
            let accepted = Recorder<[Int]>()
            let queue = ConcurrentOperationQueue(name: "completion-race")
            try queue.addOperation(operation)
            let threads = 4
            let perThread = 50
            let done = Latch(count: threads + 2)
            for thread in 0..<threads {
                onThreadOfItsOwn {
                    _ = start.wait(timeout: procedureTimeout)
                    for index in 0..<perThread {
                        let id = [thread, index]
                        if (try? operation.addCompletionBlock { ran.record(id) }) != nil { accepted.record(id) }
                    }
                    done.countDown()
                }
            }
            onThreadOfItsOwn {
                _ = start.wait(timeout: procedureTimeout)
                operation.cancel()
                done.countDown()
            }
            onThreadOfItsOwn {
                _ = start.wait(timeout: procedureTimeout)
                release.open()
                done.countDown()
            }
            start.open()
            #expect(await done.opens())
            #expect(await operation.finishes())
            #expect(await queue.empties())
            let runs = ran.values
            #expect(runs.count == accepted.values.count)
            #expect(Set(runs.map { "\($0)" }).count == runs.count)
            #expect(Set(runs.map { "\($0)" }) == Set(accepted.values.map { "\($0)" }))
            for thread in 0..<threads {
                let order = runs.filter { $0[0] == thread }.map { $0[1] }
                #expect(order == order.sorted())
            }
        }
    }
}
