import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// Issue 13 item 11: a queue's waits return only once its operations have finished and their
/// completion blocks and did-finish observers have returned; so do an operation's own waits.
@Suite("Issue 13 item 11: waits return after the work's tail", .offThePool)
struct WaitsReturnAfterTheTailTests {
    /// Finishes from another thread, as callback work does (not as the last step of `execute()`).
    final class CallbackProcedure: ProcedureOperation, @unchecked Sendable {
        override func execute() {
            DispatchQueue.global().async { self.finish() }
        }
    }

    /// A procedure whose did-finish observers take a while (some work, then a record), and whose
    /// completion block records too; `done` reads whether both have run.
    final class Tail: Sendable {
        let procedure: ProcedureOperation
        let observed = AtomicCounter()

        init(_ procedure: ProcedureOperation) throws {
            self.procedure = procedure
            let observed = observed
            procedure.completionBlock = { observed.increment() }
            try procedure.addObserver(ClosureObserver(didFinish: { _, _ in
                // Some work, so that a wait released before the observers returns early visibly.
                var value = 0
                for index in 0..<20_000 { value = value &+ (index ^ value).nonzeroBitCount }
                if value >= 0 { observed.increment() }
            }))
            try procedure.addObserver(ClosureObserver(didFinish: { _, _ in observed.increment() }))
        }

        var done: Bool { observed.value == 3 }
    }

    static func makeTails(_ count: Int) throws -> [Tail] {
        try (0..<count).map { index in
            try Tail(index.isMultiple(of: 2) ? CallbackProcedure(name: "callback \(index)")
                                             : ClosureProcedure<Void>(name: "closure \(index)") {})
        }
    }

    static let runs = 60

    @Test("issue 13 item 11: queue and operation waits return after completion blocks and did-finish observers")
    func waitsReturnAfterTheTail() async throws {
        var missed: [String] = []
        for run in 0..<Self.runs {
            // The queue's blocking wait.
            do {
                let queue = try ConcurrentOperationQueue(name: "item 11 blocking \(run)", maxConcurrentOperationCount: 4)
                let tails = try Self.makeTails(4)
                try queue.addOperations(tails.map(\.procedure), waitUntilFinished: false)
                let seen = await waitingOffThePool {
                    queue.waitUntilAllOperationsAreFinishedBlocking(timeout: procedureTimeout) && tails.allSatisfy(\.done)
                }
                if !seen { missed.append("queue blocking wait, run \(run)") }
            }
            // The queue's async wait.
            do {
                let queue = try ConcurrentOperationQueue(name: "item 11 async \(run)", maxConcurrentOperationCount: 4)
                let tails = try Self.makeTails(4)
                try queue.addOperations(tails.map(\.procedure), waitUntilFinished: false)
                let seen = await outcome(within: procedureTimeout) {
                    await queue.waitUntilAllOperationsAreFinished()
                    return tails.allSatisfy(\.done)
                }
                if (try? seen?.get()) != true { missed.append("queue async wait, run \(run)") }
            }
            // An operation's own waits: blocking, async, and `finished`.
            do {
                let queue = try ConcurrentOperationQueue(name: "item 11 own \(run)", maxConcurrentOperationCount: 4)
                let tails = try Self.makeTails(3)
                try queue.addOperations(tails.map(\.procedure), waitUntilFinished: false)
                let blocking = await waitingOffThePool {
                    tails[0].procedure.waitUntilFinishedBlocking(timeout: procedureTimeout) && tails[0].done
                }
                if !blocking { missed.append("operation blocking wait, run \(run)") }
                let awaited = await outcome(within: procedureTimeout) {
                    await tails[1].procedure.waitUntilFinished()
                    let first = tails[1].done
                    await tails[2].procedure.finished
                    return first && tails[2].done
                }
                if (try? awaited?.get()) != true { missed.append("operation async wait, run \(run)") }
                #expect(await queue.empties())
            }
        }
        #expect(missed.isEmpty, "waits returned before the tail: \(missed.prefix(8)) (\(missed.count) in all)")
    }
}
