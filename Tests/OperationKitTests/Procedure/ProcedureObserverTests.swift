import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section M (M92) and C33: observers — every event once and in order, never two at a time,
/// ClosureObserver, TimeoutObserver — and produce(_:).
@Suite("M. ProcedureOperation observers", .offThePool)
struct ProcedureObserverTests {
    @Test("M92 every event reaches every observer once, in lifecycle order, with produce and cancel where they happen")
    func everyEventOnceInOrder() async throws {
        let queue = ConcurrentOperationQueue(name: "M92")
        let produced = ClosureOperation(name: "produced") {}
        let procedure = ClosureProcedure<Int>(name: "M92", asynchronous: { procedure in
            try? procedure.produce(produced)
            procedure.cancel()
            procedure.finish(withValue: 1)
        })
        let logs = [ProcedureEventLog(), ProcedureEventLog()]
        for log in logs { try procedure.addObserver(log.observer) }
        #expect(procedure.observerCount == 2)
        try queue.addOperation(procedure)
        for log in logs {
            #expect(await log.finishes())
            #expect(log.events == [
                "didAttach", "willExecute", "didProduce(produced)", "didCancel", "didExecute",
                "willFinish", "didFinish",
            ])
        }
        #expect(await produced.finishes())
    }

    @Test("M92 did-attach is delivered at once; an observer added later sees only the later events")
    func attachAndLaterObserver() async throws {
        let queue = suspendedProcedureQueue("M92-attach")
        let procedure = ClosureProcedure<Void>(name: "attach") {}
        let early = ProcedureEventLog()
        try procedure.addObserver(early.observer)
        #expect(early.events == ["didAttach"])
        procedure.cancel()
        try queue.addOperation(procedure)
        let late = ProcedureEventLog()
        try procedure.addObserver(late.observer)
        #expect(late.events == ["didAttach"])
        queue.isSuspended = false
        #expect(await early.finishes())
        #expect(await late.finishes())
        #expect(early.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
        #expect(late.events == ["didAttach", "willFinish", "didFinish"])
    }

    @Test("ClosureObserver calls only the closures it was given, with the procedure")
    func closureObserver() async throws {
        let queue = ConcurrentOperationQueue(name: "closure-observer")
        let procedure = ClosureProcedure<Void>(name: "closure-observer") { throw ProcedureTestError(5) }
        let seen = Recorder<String>()
        let done = Latch()
        try procedure.addObserver(ClosureObserver(
            willExecute: { seen.record("willExecute \($0.displayName)") },
            didFinish: { procedure, errors in
                seen.record("didFinish \(procedure.displayName) \(errorIDs(errors))")
                done.countDown()
            }))
        try procedure.addObserver(ClosureObserver())  // no closures at all: nothing happens
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(seen.values == ["willExecute closure-observer", "didFinish closure-observer [5]"])
    }

    @Test("M92 events are never delivered two at a time: a finish waits for a did-cancel in progress")
    func eventsAreSerialised() async throws {
        let queue = ConcurrentOperationQueue(name: "serialised")
        let procedure = ProcedureAwaitingFinish(name: "serialised")
        let order = Recorder<String>()
        let inDidCancel = Latch()
        let gate = Gate()
        defer { gate.open() }
        let meter = InFlightMeter()
        try procedure.addObserver(ClosureObserver(
            didCancel: { _, _ in
                meter.enter()
                order.record("didCancel begins")
                inDidCancel.countDown()
                _ = gate.wait(timeout: procedureTimeout)
                order.record("didCancel ends")
                meter.leave()
            },
            willFinish: { procedure, _ in
                meter.enter()
                order.record("willFinish \(procedure.state)")
                meter.leave()
            }))
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await procedure.executing.opens())
        onThreadOfItsOwn { procedure.cancel() }
        #expect(await inDidCancel.opens())
        onThreadOfItsOwn { procedure.finish() }
        // The finishing thread has reached its will-finish event, which must wait.
        #expect(await eventually { procedure.state >= .finishing })
        gate.open()
        #expect(await log.finishes())
        #expect(order.values == ["didCancel begins", "didCancel ends", "willFinish finishing"])
        #expect(meter.peak == 1)
    }

    @Test("finishing from the did-cancel hook: will-finish observers still run before the procedure has finished")
    func finishFromCancelHook() async throws {
        // procedureDidCancel's documentation: "An executing procedure should stop its work and
        // finish." Doing so synchronously, from the hook, must keep the finishing order.
        final class FinishesInCancelHook: ProcedureOperation, @unchecked Sendable {
            // No mutable state of its own.
            let executing = Latch()
            override func execute() { executing.countDown() }
            override func procedureDidCancel(with error: (any Error)?) { finish() }
        }
        let queue = ConcurrentOperationQueue(name: "finish-in-hook")
        let procedure = FinishesInCancelHook(name: "finish-in-hook")
        let order = Recorder<String>()
        procedure.completionBlock = { order.record("completion block") }
        try procedure.addObserver(ClosureObserver(willFinish: { procedure, _ in
            order.record("willFinish \(procedure.state) finished:\(procedure.isFinished)")
        }))
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.executed.opens())
        procedure.cancel()
        #expect(await log.finishes())
        #expect(order.values == ["willFinish finishing finished:false", "completion block"])
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "didCancel", "willFinish", "didFinish"])
    }

    @Test("did-finish is the last event: a produce(_:) that raced with the finish is not told after it")
    func produceRacingWithFinish() async throws {
        let queue = ConcurrentOperationQueue(name: "produce-race")
        let inWillAdd = Latch()
        let gate = Gate()
        defer { gate.open() }
        // Holds the producing thread inside produce(_:), after its check that the procedure executes.
        queue.eventHandlers = QueueEventHandlers(willAdd: { operation in
            guard operation.name == "late-produced" else { return }
            inWillAdd.countDown()
            _ = gate.wait(timeout: procedureTimeout)
        })
        let procedure = ProcedureAwaitingFinish(name: "racing-producer")
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.executed.opens())
        let produced = ClosureOperation(name: "late-produced") {}
        let produceReturned = Latch()
        onThreadOfItsOwn {
            _ = try? procedure.produce(produced)
            produceReturned.countDown()
        }
        #expect(await inWillAdd.opens())
        // The finish counts at once, but completes only once the racing produce(_:) has added its
        // operation and told the observers (ProcedureOperation.produce(_:)).
        #expect(procedure.finish())
        #expect(!log.events.contains("didFinish"))
        gate.open()
        #expect(await log.finishes())
        #expect(await produceReturned.opens())
        #expect(await queue.empties())
        #expect(log.events.last == "didFinish", "no event may follow did-finish")
        #expect(log.events.filter { $0 == "didFinish" }.count == 1)
    }

    @Test("an observer that captures its procedure does not keep it alive once it has finished")
    func observersReleasedAfterFinish() async throws {
        // DESIGN.md: no retain cycle survives a finished operation. The completion block and the
        // conditions are released on finish; an observer is the same kind of closure.
        let queue = ConcurrentOperationQueue(name: "observer-cycle")
        let done = Latch()
        let probe = WeakProcedureProbe()
        do {
            let procedure = ClosureProcedure<Void>(name: "captured") {}
            try procedure.addObserver(ClosureObserver(didFinish: { _, _ in
                _ = procedure.name  // the closure holds the procedure
                done.countDown()
            }))
            probe.procedure = procedure
            try queue.addOperation(procedure)
        }
        #expect(await done.opens())
        #expect(await queue.empties())
        #expect(await eventually(within: .seconds(2)) { probe.procedure == nil }, "the procedure leaked")
    }

    // MARK: C33 TimeoutObserver

    @Test("C33 TimeoutObserver cancels a procedure still executing after the timeout with timedOut")
    func timeoutCancels() async throws {
        let queue = ConcurrentOperationQueue(name: "C33")
        let procedure = ProcedureAwaitingFinish(name: "slow", finishesWhenTold: true)
        try procedure.addObserver(TimeoutObserver(timeout: .milliseconds(50)))
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(procedure.isCancelled)
        #expect(errorCodes(procedure.errors) == [.timedOut])
        #expect((procedure.errors.first as? OperationError)?.operationNames == ["slow"])
        // Did-execute (once `execute()` returned) and the timer's did-cancel may come in either order.
        #expect(log.events.filter { $0 != "didExecute" }
            == ["didAttach", "willExecute", "didCancel", "willFinish", "didFinish"])
        #expect(log.events.firstIndex(of: "didExecute").map { (2...3).contains($0) } == true)
    }

    @Test("C33 TimeoutObserver does nothing to a procedure that finished first; one cancelled first and still executing is finished with timedOut, not cancelled again")
    func timeoutAfterFinishOrCancel() async throws {
        let queue = ConcurrentOperationQueue(name: "C33-late")
        let timeout: Duration = .milliseconds(200)
        let fast = ProcedureCountingHooks(name: "fast")
        try fast.addObserver(TimeoutObserver(timeout: timeout))
        let cancelled = ProcedureAwaitingFinish(name: "cancelled")
        // Cancelled as it starts to execute, before the timeout observer (added next) starts its timer.
        try cancelled.addObserver(ClosureObserver(willExecute: { $0.cancel() }))
        try cancelled.addObserver(TimeoutObserver(timeout: timeout))
        try queue.addOperations([fast, cancelled], waitUntilFinished: false)
        #expect(await fast.finished.opens())
        #expect(await cancelled.executing.opens())
        // A probe with the same timeout, started after both: by the time its timer has fired, so
        // have theirs.
        let probe = ProcedureAwaitingFinish(name: "probe", finishesWhenTold: true)
        try probe.addObserver(TimeoutObserver(timeout: timeout))
        try queue.addOperation(probe)
        #expect(await probe.finishes())
        #expect(errorCodes(probe.errors) == [.timedOut])
        #expect(!fast.isCancelled && fast.errors.isEmpty)
        #expect(cancelled.isCancelled)
        // Its work never finishes: the timeout ends it, without a second cancel.
        #expect(await cancelled.finishes())
        #expect(errorCodes(cancelled.errors) == [.timedOut])
        #expect(cancelled.cancelHookCalls.value == 1)
    }

    // MARK: produce(_:)

    @Test("produce(_:) adds the operation to the procedure's queue and tells the observers")
    func produce() async throws {
        let queue = ConcurrentOperationQueue(name: "produce")
        let ran = AtomicCounter()
        let produced = ClosureOperation(name: "produced") { ran.increment() }
        let producedSeen = Recorder<String>()
        let procedure = ClosureProcedure<Void>(name: "producer", asynchronous: { procedure in
            do {
                try procedure.produce(produced)
                procedure.finish()
            } catch {
                procedure.finish(with: error)
            }
        })
        try procedure.addObserver(ClosureObserver(didProduce: { procedure, operation in
            producedSeen.record("\(procedure.displayName) → \(operation.displayName)")
        }))
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(procedure.errors.isEmpty)
        #expect(await produced.finishes())
        #expect(ran.value == 1)
        #expect(producedSeen.values == ["producer → produced"])
    }

    @Test("produce(_:) throws notExecuting before queueing, without a queue, and after finishing")
    func produceOutsideExecution() async throws {
        let procedure = ClosureProcedure<Void>(name: "idle") {}
        #expect(caughtOperationError { try procedure.produce(ClosureOperation {}) }?.code == .notExecuting)

        let manual = ClosureProcedure<Void>(name: "manual", asynchronous: { procedure in
            let error = caughtOperationError { try procedure.produce(ClosureOperation {}) }
            procedure.finish(with: error)
        })
        try manual.start()
        #expect(errorCodes(manual.errors) == [.notExecuting])

        let queue = ConcurrentOperationQueue(name: "produce-late")
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        let late = caughtOperationError { try procedure.produce(ClosureOperation {}) }
        #expect(late?.code == .notExecuting)
        #expect(late?.operationNames.first == "idle")
    }

    @Test("produce(_:) of an operation the queue refuses throws the queue's error and tells no observer")
    func produceRefused() async throws {
        let queue = ConcurrentOperationQueue(name: "produce-refused")
        let other = suspendedProcedureQueue("elsewhere")
        let elsewhere = ClosureOperation(name: "elsewhere") {}
        try other.addOperation(elsewhere)
        let told = AtomicCounter()
        let procedure = ClosureProcedure<Void>(name: "refused", asynchronous: { procedure in
            procedure.finish(with: caughtOperationError { try procedure.produce(elsewhere) })
        })
        try procedure.addObserver(ClosureObserver(didProduce: { _, _ in told.increment() }))
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(errorCodes(procedure.errors) == [.enqueuedInAnotherQueue])
        #expect(told.value == 0)
        elsewhere.cancel()
        other.isSuspended = false
        #expect(await other.empties())
    }
}

/// A weak reference to a procedure, readable from any thread (weak loads are atomic).
final class WeakProcedureProbe: @unchecked Sendable {
    // `procedure` is a weak reference, set once by the test before anything runs.
    weak var procedure: ProcedureOperation?
    init() {}
}
