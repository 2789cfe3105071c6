import OperationKit
import OperationKitTestSupport
import Testing

/// The usual procedure — one synchronous condition, observers of did finish only — takes shorter
/// paths: the condition's answer is recorded in the base operation's start step, and its finish
/// makes the base operation's finish step in its own critical section. These tests pin what
/// those paths must keep: the order of the lifecycle, cancellation between the steps, and what
/// the did-finish observers and the completion block see.
@Suite("Procedure merged steps", .offThePool)
struct ProcedureMergedStepsTests {
    @Test("a synchronous condition that cancels its procedure, then answers satisfied: it never executes and finishes once")
    func cancelInsideSatisfiedCondition() async throws {
        let queue = ConcurrentOperationQueue(name: "merged-cancel")
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Void>(name: "merged-cancel") { ran.increment() }
        let seen = Recorder<String>()
        try procedure.addCondition(ClosureCondition { procedure in
            seen.record("\(procedure.state)")
            procedure.cancel()
            return .satisfied
        })
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(await queue.empties())
        #expect(ran.value == 0)
        #expect(procedure.isCancelled && !procedure.isFailed)
        #expect(procedure.state == .finished)
        #expect(seen.values == ["evaluatingConditions"])
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
    }

    @Test("a satisfied synchronous condition, a did-finish observer: each step sees its state, in order", arguments: [1, 64])
    func satisfiedThenFinished(count: Int) async throws {
        let queue = ConcurrentOperationQueue(name: "merged-finish")
        var procedures: [ClosureProcedure<Void>] = []
        var logs: [Recorder<String>] = []
        for index in 0..<count {
            let log = Recorder<String>()
            let holder = ProcedureHolder()
            let procedure = ClosureProcedure<Void>(name: "merged-\(index)") {
                log.record("work \(holder.procedure.map { "\($0.state)" } ?? "?")")
            }
            holder.procedure = procedure
            try procedure.addCondition(ClosureCondition { procedure in
                log.record("condition \(procedure.state)")
                return .satisfied
            })
            try procedure.addObserver(ClosureObserver(didFinish: { procedure, errors in
                log.record("didFinish \(procedure.state) \(procedure.isFinished) \(errors.count)")
            }))
            procedure.completionBlock = { log.record("completion \(holder.procedure.map { "\($0.state)" } ?? "?")") }
            procedures.append(procedure)
            logs.append(log)
        }
        try queue.addOperations(procedures, waitUntilFinished: false)
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(await queue.empties())
        for (procedure, log) in zip(procedures, logs) {
            #expect(procedure.state == .finished && !procedure.isCancelled && procedure.errors.isEmpty)
            #expect(log.values == [
                "condition evaluatingConditions", "work executing", "completion finished", "didFinish finished true 0",
            ])
        }
    }
}

/// The procedure a closure of that procedure reads (set before it is added to a queue, which
/// publishes it to the worker).
private final class ProcedureHolder: @unchecked Sendable {
    var procedure: ProcedureOperation?
}
