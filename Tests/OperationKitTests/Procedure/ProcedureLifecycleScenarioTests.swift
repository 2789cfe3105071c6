import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section B (and M63, M95): the lifecycle of a ProcedureOperation on a queue, as its `state`
/// and its observers see it; errors, finishing once, late configuration, starting by hand.
@Suite("B. ProcedureOperation lifecycle", .offThePool)
struct ProcedureLifecycleScenarioTests {
    @Test("B13 a new procedure is initialized; on a queue it goes pending → executing → finishing → finished")
    func simpleRun() async throws {
        let queue = suspendedProcedureQueue("B13")
        let statesInWork = Recorder<ProcedureState>()
        let procedure = ClosureProcedure<Int>(name: "B13") { 42 }
        let log = ProcedureEventLog()
        let seenAtDidFinish = Recorder<String>()
        // OD's value callback: a did-finish observer reading `output`; the state is already finished.
        try procedure.addObserver(ClosureObserver(didFinish: { procedure, _ in
            let typed = procedure as? ClosureProcedure<Int>
            let output = typed?.output.map(String.init) ?? "nil"
            seenAtDidFinish.record("\(procedure.state) \(procedure.isFinished) \(output)")
        }))
        let inWork = ClosureObserver(willExecute: { statesInWork.record($0.state) })
        try procedure.addObserver(inWork)
        try procedure.addObserver(log.observer)  // last: its did-finish is the last event

        #expect(procedure.state == .initialized)
        // OD's new task is not ready; ours, like Foundation's operations, is ready to start by hand.
        #expect(procedure.isReady)
        #expect(!procedure.isExecuting && !procedure.isFinished && !procedure.isCancelled)

        try queue.addOperation(procedure)
        #expect(procedure.state == .pending)
        queue.isSuspended = false
        #expect(await log.finishes())
        #expect(procedure.state == .finished)
        #expect(procedure.isFinished && !procedure.isExecuting && !procedure.isCancelled)
        #expect(procedure.output == 42)
        #expect(statesInWork.values == [.executing])
        #expect(seenAtDidFinish.values == ["finished true 42"])
        #expect(log.eventsWithStates == [
            "didAttach:initialized", "willExecute:executing", "didExecute:finishing",
            "willFinish:finishing", "didFinish:finished",
        ])
    }

    @Test("B13 an asynchronous finish: did-execute while still executing, then finishing and finished")
    func asynchronousRunStates() async throws {
        let queue = ConcurrentOperationQueue(name: "B13-async")
        let gate = Gate()
        let procedure = ClosureProcedure<Void>(name: "async", asynchronous: { procedure in
            onThreadOfItsOwn {
                _ = gate.wait(timeout: procedureTimeout)
                procedure.finish()
            }
        })
        let log = ProcedureEventLog()
        let didExecute = Latch()
        try procedure.addObserver(log.observer)
        try procedure.addObserver(ClosureObserver(didExecute: { _ in didExecute.countDown() }))
        try queue.addOperation(procedure)
        #expect(await didExecute.opens())
        #expect(procedure.state == .executing)
        #expect(procedure.isExecuting)
        gate.open()
        #expect(await log.finishes())
        #expect(log.eventsWithStates == [
            "didAttach:initialized", "willExecute:executing", "didExecute:executing",
            "willFinish:finishing", "didFinish:finished",
        ])
    }

    @Test("B16 conditions are evaluated once the dependencies finish; not ready until they are decided")
    func conditionsAfterDependencies() async throws {
        let queue = ConcurrentOperationQueue(name: "B16")
        let dependency = ManuallyFinishedOperation(name: "dependency")
        let condition = ManualCondition()
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Void>(name: "B16") { ran.increment() }
        try procedure.addCondition(condition)
        try procedure.addDependency(dependency)
        try queue.addOperations([procedure, dependency], waitUntilFinished: false)

        #expect(procedure.state == .pending)
        #expect(!procedure.isReady)
        #expect(await dependency.executed.opens())
        #expect(procedure.state == .pending)
        #expect(condition.evaluations.value == 0, "evaluation must wait for the dependency")
        dependency.finish()
        #expect(await condition.evaluating.opens())
        #expect(procedure.state == .evaluatingConditions)
        #expect(!procedure.isReady, "PS: a procedure reports not ready until its conditions are evaluated")
        #expect(!procedure.isExecuting && ran.value == 0)
        condition.complete(.satisfied)
        #expect(await procedure.finishes())
        #expect(ran.value == 1)
        #expect(procedure.errors.isEmpty)
    }

    @Test("B17 a normal run tells each observer event once, in order, none for queueing")
    func eventsOfANormalRun() async throws {
        let queue = ConcurrentOperationQueue(name: "B17")
        for withDependency in [false, true] {
            let procedure = ClosureProcedure<Void>(name: "B17") {}
            let log = ProcedureEventLog()
            try procedure.addObserver(log.observer)
            var operations: [ConcurrentOperation] = [procedure]
            if withDependency {
                let dependency = ClosureOperation(name: "dependency") {}
                try procedure.addDependency(dependency)
                operations.append(dependency)
            }
            try queue.addOperations(operations, waitUntilFinished: false)
            #expect(await log.finishes())
            #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
        }
    }

    @Test("B18 cancelled before queueing: did-cancel first, did-finish last and once; completion block once")
    func eventsOfACancelledRun() async throws {
        let queue = ConcurrentOperationQueue(name: "B18")
        let procedure = ProcedureCountingHooks(name: "B18")
        let log = ProcedureEventLog()
        let completions = AtomicCounter()
        procedure.completionBlock = { completions.increment() }
        try procedure.addObserver(log.observer)
        procedure.cancel()
        #expect(procedure.isCancelled)
        #expect(procedure.state == .initialized)
        #expect(log.events == ["didAttach", "didCancel"])
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(await procedure.finished.opens())
        #expect(await queue.empties())
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
        #expect(completions.value == 1)
        #expect(procedure.willExecuteCalls.value == 0 && procedure.didExecuteCalls.value == 0)
        #expect(procedure.didCancelCalls.value == 1)
        #expect(procedure.didFinishErrors.values.count == 1)
        #expect(procedure.state == .finished)
    }

    @Test("B19 a condition is refused once evaluation has begun, and while executing")
    func lateCondition() async throws {
        let queue = ConcurrentOperationQueue(name: "B19-condition")
        let condition = ManualCondition()
        let procedure = ProcedureAwaitingFinish(name: "B19")
        try procedure.addCondition(condition)
        try queue.addOperation(procedure)
        #expect(await condition.evaluating.opens())
        let duringEvaluation = caughtOperationError { try procedure.addCondition(ClosureCondition { _ in .satisfied }) }
        #expect(duringEvaluation?.code == .tooLateToAddCondition)
        // An observer is still accepted before executing, and is told what follows.
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        condition.complete(.satisfied)
        #expect(await log.executed.opens())
        let whileExecuting = caughtOperationError { try procedure.addCondition(ClosureCondition { _ in .satisfied }) }
        #expect(whileExecuting?.code == .tooLateToAddCondition)
        #expect(procedure.conditionCount == 1)
        procedure.finish()
        #expect(await log.finishes())
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("B19 an observer is refused while executing and after finishing; a dependency too")
    func lateObserverAndDependency() async throws {
        let queue = ConcurrentOperationQueue(name: "B19-observer")
        let procedure = ProcedureAwaitingFinish(name: "B19")
        try queue.addOperation(procedure)
        #expect(await procedure.executing.opens())
        #expect(caughtOperationError { try procedure.addObserver(ClosureObserver()) }?.code == .tooLateToAddObserver)
        let other = ClosureOperation {}
        #expect(caughtOperationError { try procedure.addDependency(other) }?.code == .dependentAlreadyExecuting)
        procedure.finish()
        #expect(await procedure.finishes())
        #expect(caughtOperationError { try procedure.addObserver(ClosureObserver()) }?.code == .tooLateToAddObserver)
        #expect(caughtOperationError { try procedure.addCondition(ClosureCondition { _ in .satisfied }) }?.code
            == .tooLateToAddCondition)
        #expect(caughtOperationError { try procedure.addDependency(other) }?.code == .dependentAlreadyFinished)
        #expect(procedure.observerCount == 0)
    }

    @Test("M63 finishing with an error: errors is exactly that error; the finished hook runs once")
    func errorsList() async throws {
        let queue = ConcurrentOperationQueue(name: "M63")
        let procedure = ProcedureCountingHooks(name: "M63") { $0.finish(with: ProcedureTestError(63)) }
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(await procedure.finished.opens())
        #expect(errorIDs(procedure.errors) == [63])
        #expect(procedure.isFailed)
        #expect(!procedure.isCancelled)
        #expect(procedure.didFinishErrors.values.map(errorIDs) == [[63]])
        #expect(procedure.willFinishErrors.values.map(errorIDs) == [[63]])
        #expect(log.errorsAtFinish.map(errorIDs) == [[63], [63]])
    }

    @Test("M63 finish(withErrors:) keeps every error in order; finish(with: nil) records none")
    func severalErrors() async throws {
        let queue = ConcurrentOperationQueue(name: "M63-several")
        let several = ProcedureCountingHooks(name: "several") {
            $0.finish(withErrors: [ProcedureTestError(1), ProcedureTestError(2)])
        }
        let none = ProcedureCountingHooks(name: "none") { $0.finish(with: nil) }
        try queue.addOperations([several, none], waitUntilFinished: false)
        #expect(await several.finishes())
        #expect(await none.finishes())
        #expect(errorIDs(several.errors) == [1, 2])
        #expect(several.isFailed)
        #expect(none.errors.isEmpty && !none.isFailed)
    }

    @Test("M95 a second finish is ignored: only the first errors are kept, the call is in diagnostics")
    func secondFinishIgnored() async throws {
        let queue = ConcurrentOperationQueue(name: "M95")
        let results = Recorder<Bool>()
        let workDone = Latch()
        let procedure = ProcedureCountingHooks(name: "M95") { procedure in
            results.record(procedure.finish(with: ProcedureTestError(1)))
            results.record(procedure.finish(with: ProcedureTestError(2)))
            results.record(procedure.finish())
            workDone.countDown()
        }
        try queue.addOperation(procedure)
        #expect(await workDone.opens())
        #expect(await procedure.finished.opens())
        // From another thread, after it finished.
        let late = DispatchQueue.global().sync { procedure.finish(withErrors: [ProcedureTestError(3)]) }
        #expect(results.values == [true, false, false])
        #expect(!late)
        #expect(errorIDs(procedure.errors) == [1])
        #expect(procedure.diagnostics.count == 3)
        #expect(procedure.diagnostics.allSatisfy { $0.contains("finish ignored") })
        #expect(procedure.didFinishErrors.values.count == 1)
    }

    @Test("M95 finish before the procedure executes changes nothing and is in diagnostics")
    func finishBeforeExecuting() async throws {
        let queue = suspendedProcedureQueue("M95-early")
        let procedure = ProcedureCountingHooks(name: "early")
        #expect(!procedure.finish(with: ProcedureTestError(1)))
        try queue.addOperation(procedure)
        #expect(!procedure.finish())
        #expect(procedure.state == .pending)
        #expect(procedure.errors.isEmpty)
        #expect(procedure.diagnostics.count == 2)
        queue.isSuspended = false
        #expect(await procedure.finishes())
        #expect(procedure.willExecuteCalls.value == 1)
        #expect(procedure.errors.isEmpty)
    }

    @Test("start() by hand runs a procedure without conditions on the calling thread")
    func manualStart() async throws {
        let log = ProcedureEventLog()
        let procedure = ClosureProcedure<Int>(name: "manual") { 7 }
        try procedure.addObserver(log.observer)
        try procedure.start()
        #expect(procedure.isFinished)
        #expect(procedure.state == .finished)
        #expect(procedure.output == 7)
        #expect(await log.finishes())
        #expect(caughtOperationError { try procedure.start() }?.code == .alreadyFinished)
    }

    @Test("start() by hand refuses a procedure with conditions (requiresQueue); nothing runs")
    func manualStartWithConditions() async throws {
        let evaluations = Recorder<String>()
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Void>(name: "conditional") { ran.increment() }
        try procedure.addCondition(RecordingCondition("condition", evaluations))
        let error = caughtOperationError { try procedure.start() }
        #expect(error?.code == .requiresQueue)
        #expect(error?.operationNames == ["conditional"])
        #expect(procedure.state == .initialized)
        #expect(!procedure.isExecuting && !procedure.isFinished)
        #expect(evaluations.values.isEmpty && ran.value == 0)
        // It can still run on a queue.
        let queue = ConcurrentOperationQueue(name: "after-refusal")
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(evaluations.values == ["condition"] && ran.value == 1)
    }

    @Test("start() by hand on a cancelled procedure finishes it without executing")
    func manualStartCancelled() async throws {
        let procedure = ProcedureCountingHooks(name: "cancelled")
        procedure.cancel()
        try procedure.start()
        #expect(await procedure.finished.opens())
        #expect(procedure.isFinished && procedure.isCancelled)
        #expect(procedure.willExecuteCalls.value == 0)
        #expect(procedure.didFinishErrors.values.count == 1)
    }
}
