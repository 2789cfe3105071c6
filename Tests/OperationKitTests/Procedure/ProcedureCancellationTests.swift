import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section C (and D35–D37): cancelling a procedure at every point of its lifecycle, and what a
/// cancelled dependency does to its dependents (nothing, in the operation layer).
@Suite("C. ProcedureOperation cancellation", .offThePool)
struct ProcedureCancellationTests {
    @Test("C20 cancelled before queueing: cancelled at once; queued, it never runs and has no result")
    func cancelBeforeQueueing() async throws {
        let queue = ConcurrentOperationQueue(name: "C20")
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Int>(name: "C20") { ran.increment(); return 1 }
        // OD's value and error callbacks: a did-finish observer reading `result`.
        let results = Recorder<String>()
        try procedure.addObserver(ClosureObserver(didFinish: { procedure, _ in
            let result = (procedure as? ClosureProcedure<Int>)?.result
            results.record(result.map { "\($0)" } ?? "nil")
        }))
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        procedure.cancel()
        #expect(procedure.isCancelled)
        #expect(!procedure.isFinished)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(ran.value == 0)
        #expect(procedure.isFinished && procedure.isCancelled)
        #expect(procedure.output == nil && procedure.result == nil)
        #expect(results.values == ["nil"])
        #expect(!procedure.isFailed)
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
    }

    @Test("C21/C22 cancelled in a suspended queue: told at once, finished without running once resumed")
    func cancelInSuspendedQueue() async throws {
        let queue = suspendedProcedureQueue("C21")
        let procedure = ProcedureCountingHooks(name: "C21")
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        procedure.cancel()
        // Did-cancel is delivered, but the procedure does not finish until the queue starts it.
        #expect(log.events == ["didAttach", "didCancel"])
        #expect(!procedure.isFinished)
        #expect(procedure.state == .pending)
        #expect(procedure.isReady, "a cancelled procedure is ready at once")
        queue.isSuspended = false
        #expect(await log.finishes())
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
        #expect(procedure.willExecuteCalls.value == 0)
        #expect(await queue.empties())
    }

    @Test("C23/C29 cancelled while executing: told, not finished, until its work finishes it")
    func cancelWhileExecuting() async throws {
        let queue = ConcurrentOperationQueue(name: "C23")
        let procedure = ProcedureAwaitingFinish(name: "C23")
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.executed.opens())
        procedure.cancel()
        #expect(await log.cancelled.opens())
        // PK's disableAutomaticFinishing is our default: the procedure is only told.
        #expect(procedure.isCancelled)
        #expect(procedure.cancelHookCalls.value == 1)
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "didCancel"])
        #expect(!procedure.isFinished)
        #expect(procedure.state == .executing)
        #expect(queue.operationCount == 1)
        procedure.finish()
        #expect(await log.finishes())
        #expect(procedure.isCancelled && procedure.isFinished)
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "didCancel", "willFinish", "didFinish"])
        #expect(procedure.executions.value == 1)
    }

    @Test("C23 with finishesWhenCancelled (PS's behaviour): cancel finishes an executing procedure at once")
    func cancelFinishesAtOnce() async throws {
        let queue = ConcurrentOperationQueue(name: "C23-PS")
        let procedure = ProcedureAwaitingFinish(name: "C23-PS")
        procedure.finishesWhenCancelled = true
        #expect(procedure.finishesWhenCancelled)
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.executed.opens())
        procedure.cancel(with: ProcedureTestError(23))
        #expect(procedure.isFinished, "finished before cancel returned")
        #expect(await log.finishes())
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "didCancel", "willFinish", "didFinish"])
        #expect(errorIDs(procedure.errors) == [23])
        #expect(await queue.empties(), "it leaves the queue")
        // Its work's own finish comes later and is ignored.
        #expect(!procedure.finish())
        #expect(procedure.diagnostics.count == 1)
    }

    @Test("C23 cancelled from inside its own work, then finishing: ends cancelled, events in order")
    func cancelFromOwnWork() async throws {
        let queue = ConcurrentOperationQueue(name: "C23-self")
        let procedure = ClosureProcedure<Int>(name: "self-cancel", asynchronous: { procedure in
            procedure.cancel()
            procedure.finish(withValue: 1)
        })
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(procedure.isCancelled)
        #expect(log.events == ["didAttach", "willExecute", "didCancel", "didExecute", "willFinish", "didFinish"])
    }

    @Test("C25 cancel after finish does nothing: not cancelled, no did-cancel, no error")
    func cancelAfterFinish() async throws {
        let queue = ConcurrentOperationQueue(name: "C25")
        let procedure = ProcedureCountingHooks(name: "C25")
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        procedure.cancel()
        DispatchQueue.global().sync { procedure.cancel(with: ProcedureTestError(1)) }
        #expect(!procedure.isCancelled)
        #expect(procedure.errors.isEmpty)
        #expect(procedure.didCancelCalls.value == 0)
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("C25 work that finishes then cancels, synchronously or from another thread: not cancelled")
    func finishThenCancel() async throws {
        let queue = ConcurrentOperationQueue(name: "C25-work")
        let same = ProcedureCountingHooks(name: "same-thread") { procedure in
            procedure.finish()
            procedure.cancel(with: ProcedureTestError(1))
        }
        let other = ProcedureCountingHooks(name: "other-thread") { procedure in
            procedure.finish()
            DispatchQueue.global().sync { procedure.cancel(with: ProcedureTestError(2)) }
        }
        try queue.addOperations([same, other], waitUntilFinished: false)
        for procedure in [same, other] {
            #expect(await procedure.finished.opens())
            #expect(!procedure.isCancelled, "\(procedure.displayName)")
            #expect(procedure.errors.isEmpty)
            #expect(procedure.didCancelCalls.value == 0)
        }
    }

    @Test("C27 cancel() cancels without failing; cancel(with:) fails too, its error reaches the finish hooks")
    func cancelWithAndWithoutError() async throws {
        let queue = ConcurrentOperationQueue(name: "C27")
        let plain = ProcedureCountingHooks(name: "plain")
        let failing = ProcedureCountingHooks(name: "failing")
        let log = ProcedureEventLog()
        try failing.addObserver(log.observer)
        plain.cancel()
        failing.cancel(with: ProcedureTestError(27))
        // A second cancel, with another error, changes nothing.
        failing.cancel(with: ProcedureTestError(28))
        plain.cancel(with: ProcedureTestError(29))
        try queue.addOperations([plain, failing], waitUntilFinished: false)
        #expect(await plain.finished.opens())
        #expect(await failing.finished.opens())
        #expect(await log.finishes())
        #expect(plain.isCancelled && !plain.isFailed && plain.errors.isEmpty)
        #expect(failing.isCancelled && failing.isFailed)
        #expect(errorIDs(failing.errors) == [27])
        #expect(failing.didFinishErrors.values.map(errorIDs) == [[27]])
        #expect(log.cancelledWith == ["E27"])
        #expect(log.errorsAtFinish.map(errorIDs) == [[27], [27]])
        #expect(failing.didCancelCalls.value == 1)
    }

    @Test("C27 errors arrive in order: a cancel's error, then the errors the work finishes with")
    func cancelThenFinishWithError() async throws {
        let queue = ConcurrentOperationQueue(name: "C27-order")
        let procedure = ProcedureAwaitingFinish(name: "order")
        try queue.addOperation(procedure)
        #expect(await procedure.executing.opens())
        procedure.cancel(with: ProcedureTestError(1))
        procedure.finish(with: ProcedureTestError(2))
        #expect(await procedure.finishes())
        #expect(errorIDs(procedure.errors) == [1, 2])
    }

    @Test("cancelling from many threads at once counts once: one did-cancel, one error")
    func concurrentCancels() async throws {
        let procedure = ProcedureCountingHooks(name: "racing")
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        DispatchQueue.concurrentPerform(iterations: 8) { index in
            procedure.cancel(with: ProcedureTestError(index))
        }
        #expect(procedure.errors.count == 1)
        #expect(procedure.didCancelCalls.value == 1)
        #expect(log.events == ["didAttach", "didCancel"])
    }

    @Test("C31 cancelled while pending on a running dependency: finishes at once without running")
    func cancelWhilePending() async throws {
        let queue = ConcurrentOperationQueue(name: "C31")
        let dependency = ManuallyFinishedOperation(name: "dependency")
        let procedure = ProcedureCountingHooks(name: "C31")
        try procedure.addDependency(dependency)
        try queue.addOperations([dependency, procedure], waitUntilFinished: false)
        #expect(await dependency.executed.opens())
        #expect(procedure.state == .pending && !procedure.isReady)
        procedure.cancel()
        #expect(await procedure.finished.opens(), "it does not wait for its dependency")
        #expect(!dependency.isFinished)
        #expect(procedure.willExecuteCalls.value == 0)
        dependency.finish()
        #expect(await queue.empties())
    }

    @Test("C32 cancelled during condition evaluation: finishes without waiting for the condition")
    func cancelDuringEvaluation() async throws {
        let queue = ConcurrentOperationQueue(name: "C32")
        let condition = ManualCondition()
        let procedure = ProcedureCountingHooks(name: "C32")
        try procedure.addCondition(condition)
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await condition.evaluating.opens())
        #expect(procedure.state == .evaluatingConditions)
        procedure.cancel()
        #expect(await log.finishes())
        #expect(procedure.isCancelled && procedure.errors.isEmpty)
        // The condition's late result changes nothing.
        condition.complete(.satisfied)
        #expect(procedure.willExecuteCalls.value == 0)
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
        #expect(condition.evaluations.value == 1)
    }

    @Test("C32 cancelled while pending on its condition's produced dependency: that dependency is cancelled too")
    func cancelCancelsProducedDependency() async throws {
        let queue = suspendedProcedureQueue("C32-produced")
        let evaluations = Recorder<String>()
        let producedRuns = AtomicCounter()
        let produced = Recorder<ConcurrentOperation>()
        let procedure = ProcedureCountingHooks(name: "C32-produced")
        try procedure.addCondition(ProducingCondition("condition", evaluations, produced: produced) {
            ClosureOperation(name: "produced") { producedRuns.increment() }
        })
        try queue.addOperation(procedure)
        let dependency = try #require(produced.values.first)
        #expect(!dependency.isCancelled)
        procedure.cancel()
        #expect(dependency.isCancelled)
        queue.isSuspended = false
        #expect(await procedure.finished.opens())
        #expect(await queue.empties())
        #expect(producedRuns.value == 0)
        #expect(evaluations.values.isEmpty)
        #expect(procedure.willExecuteCalls.value == 0)
    }

    @Test("a procedure cancelled before queueing produces no condition dependency")
    func cancelledProducesNothing() async throws {
        let queue = ConcurrentOperationQueue(name: "cancelled-produces-nothing")
        let evaluations = Recorder<String>()
        let produced = Recorder<ConcurrentOperation>()
        let procedure = ProcedureCountingHooks(name: "cancelled")
        try procedure.addCondition(ProducingCondition("condition", evaluations, produced: produced) {
            ClosureOperation(name: "produced") {}
        })
        procedure.cancel()
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens())
        #expect(produced.values.isEmpty)
        #expect(evaluations.values.isEmpty)
    }

    // MARK: D. Dependencies in the operation layer

    @Test("D35 C → B → A queued in reverse order run A, B, C")
    func dependencyOrder() async throws {
        let queue = try ConcurrentOperationQueue(name: "D35", maxConcurrentOperationCount: 4)
        let order = Recorder<String>()
        let a = ClosureProcedure<Void>(name: "A") { order.record("A") }
        let b = ClosureProcedure<Void>(name: "B") { order.record("B") }
        let c = ClosureProcedure<Void>(name: "C") { order.record("C") }
        try b.addDependency(a)
        try c.addDependency(b)
        try queue.addOperations([c, b, a], waitUntilFinished: false)
        #expect(await c.finishes())
        #expect(order.values == ["A", "B", "C"])
    }

    @Test("D36 a cancelled dependency still counts as finished: the dependent runs", arguments: [false, true])
    func cancelledDependencyCountsAsFinished(cancelAfterQueueing: Bool) async throws {
        let queue = suspendedProcedureQueue("D36")
        let a = ProcedureCountingHooks(name: "A")
        let b = ProcedureCountingHooks(name: "B")
        try b.addDependency(a)
        if !cancelAfterQueueing { a.cancel() }
        try queue.addOperations([a, b], waitUntilFinished: false)
        if cancelAfterQueueing { a.cancel() }
        queue.isSuspended = false
        #expect(await b.finished.opens())
        #expect(a.isCancelled && a.willExecuteCalls.value == 0)
        #expect(b.willExecuteCalls.value == 1 && !b.isCancelled)
    }

    @Test("D37 A → B → C, B cancelled while A runs: B never runs and finishes at once; C runs")
    func noPropagationOfCancel() async throws {
        let queue = ConcurrentOperationQueue(name: "D37")
        let a = ProcedureAwaitingFinish(name: "A")
        let b = ProcedureCountingHooks(name: "B")
        let c = ProcedureCountingHooks(name: "C")
        try b.addDependency(a)
        try c.addDependency(b)
        try queue.addOperations([a, b, c], waitUntilFinished: false)
        #expect(await a.executing.opens())
        b.cancel()
        #expect(await b.finished.opens())
        #expect(await c.finished.opens(), "C runs without waiting for A")
        #expect(!a.isFinished)
        #expect(b.willExecuteCalls.value == 0)
        #expect(c.willExecuteCalls.value == 1 && !c.isCancelled)
        a.finish()
        #expect(await queue.empties())
    }
}
