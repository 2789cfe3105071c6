import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

// Pending-event tokens (issue 16, part 5): produce(_:before:) and GroupOperation.addChild(_:before:)
// with .execute and .finish — the operation is added before that event; a token for an event
// already past throws eventAlreadyPast.

@Suite("Events: pending-event tokens", .offThePool)
struct PendingEventTests {
    @Test("produce before .execute on a pending procedure: the operation is in the queue before will execute")
    func beforeExecuteWhilePending() async throws {
        let queue = suspendedProcedureQueue("pending-execute")
        let produced = ClosureOperation(name: "produced") {}
        let procedure = ClosureProcedure<Void>(name: "producer") {}
        let addedAtWillExecute = Recorder<Bool>()
        let log = AddEventLog()
        try procedure.addObserver(log.observer { event, _, _ in
            if event == "willExecute" { addedAtWillExecute.record(wasAdded(produced, to: queue)) }
        })
        try queue.addOperation(procedure)
        try procedure.produce(produced, before: .execute)
        #expect(queue.operations.contains { $0 === produced })
        queue.isSuspended = false
        #expect(await log.finishes())
        #expect(addedAtWillExecute.values == [true])
        #expect(log.events == [
            "didAttach", "willAdd(produced)", "didAdd(produced)", "didProduce(produced)", "willExecute", "didExecute",
            "willFinish", "didFinish",
        ])
        #expect(await queue.empties())
    }

    @Test("the start waits for a produce before .execute that is still adding")
    func startWaitsForTheAdd() async throws {
        let queue = suspendedProcedureQueue("pending-execute-wait")
        let produced = ClosureOperation(name: "produced") {}
        let procedure = ClosureProcedure<Void>(name: "producer") {}
        let inWillAdd = Latch()
        let release = Gate()
        let log = AddEventLog()
        try procedure.addObserver(log.observer { event, _, _ in
            if event == "willAdd" {
                inWillAdd.countDown()
                _ = release.wait(timeout: procedureTimeout)
            }
        })
        try queue.addOperation(procedure)
        let produceError = Recorder<String>()
        onThreadOfItsOwn {
            do { try procedure.produce(produced, before: .execute) } catch { produceError.record("\(error)") }
        }
        #expect(await inWillAdd.opens())
        // A worker reaches the procedure while the add is under way: its start must wait.
        queue.isSuspended = false
        #expect(!log.events.contains("willExecute"))
        release.open()
        #expect(await log.finishes())
        #expect(produceError.values.isEmpty)
        let events = log.events
        #expect(events.firstIndex(of: "didAdd(produced)")! < events.firstIndex(of: "willExecute")!)
        #expect(await queue.empties())
    }

    @Test("produce before .execute from a will-execute observer: added before the work runs (also from an observer on an event queue)",
          arguments: [false, true])
    func beforeExecuteFromWillExecute(onEventQueue: Bool) async throws {
        let queue = ConcurrentOperationQueue(name: "pending-will-execute")
        let produced = ClosureOperation(name: "produced") {}
        let addedWhenWorking = Recorder<Bool>()
        let procedure = ClosureProcedure<Void>(name: "producer") { addedWhenWorking.record(wasAdded(produced, to: queue)) }
        let failures = Recorder<String>()
        let log = AddEventLog()
        let observer = log.observer { event, procedure, _ in
            guard event == "willExecute" else { return }
            do { try procedure.produce(produced, before: .execute) } catch { failures.record("\(error)") }
        }
        try procedure.addObserver(onEventQueue ? observer.on(DispatchQueue(label: "will-execute")) : observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(failures.values.isEmpty)
        #expect(addedWhenWorking.values == [true])
        #expect(log.events == [
            "didAttach", "willExecute", "willAdd(produced)", "didAdd(produced)", "didProduce(produced)", "didExecute",
            "willFinish", "didFinish",
        ])
        #expect(await queue.empties())
    }

    @Test("produce before .finish from a will-finish observer: added before the procedure finishes, did add before did finish (also from an observer on an event queue)",
          arguments: [false, true])
    func beforeFinishFromWillFinish(onEventQueue: Bool) async throws {
        let queue = ConcurrentOperationQueue(name: "pending-will-finish")
        let produced = ClosureOperation(name: "produced") {}
        let procedure = ClosureProcedure<Void>(name: "producer") {}
        let failures = Recorder<String>()
        let addedAtDidFinish = Recorder<Bool>()
        let log = AddEventLog()
        let observer = log.observer { event, procedure, _ in
            if event == "willFinish" {
                do { try procedure.produce(produced, before: .finish) } catch { failures.record("\(error)") }
                // A plain produce is refused here: the procedure is finishing.
                let plain = caughtOperationError { try procedure.produce(ClosureOperation {}) }
                if plain?.code != .notExecuting { failures.record("plain produce: \(String(describing: plain))") }
            }
            if event == "didFinish" { addedAtDidFinish.record(wasAdded(produced, to: queue)) }
        }
        try procedure.addObserver(onEventQueue ? observer.on(DispatchQueue(label: "will-finish")) : observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(failures.values.isEmpty)
        #expect(addedAtDidFinish.values == [true])
        #expect(log.events == [
            "didAttach", "willExecute", "didExecute", "willFinish", "willAdd(produced)", "didAdd(produced)",
            "didProduce(produced)", "didFinish",
        ])
        #expect(await queue.empties())
    }

    @Test("a token for an event already past, or not reachable from where the procedure is, throws eventAlreadyPast and adds nothing")
    func misuse() async throws {
        // In no queue.
        let idle = ClosureProcedure<Void>(name: "idle") {}
        #expect(caughtOperationError { try idle.produce(ClosureOperation {}, before: .execute) }?.code == .eventAlreadyPast)
        #expect(caughtOperationError { try idle.produce(ClosureOperation {}, before: .finish) }?.code == .eventAlreadyPast)

        // Pending: .finish is not reachable by a produce yet.
        let queue = suspendedProcedureQueue("pending-misuse")
        let pending = ClosureProcedure<Void>(name: "pending") {}
        try queue.addOperation(pending)
        let notYet = caughtOperationError { try pending.produce(ClosureOperation {}, before: .finish) }
        #expect(notYet?.code == .eventAlreadyPast)
        #expect(notYet?.operationNames.first == "pending")
        queue.isSuspended = false
        #expect(await pending.finishes())

        // From the work: .execute is past; .finish is fine.
        let codes = Recorder<String>()
        let later = ClosureOperation(name: "later") {}
        let working = ClosureProcedure<Void>(name: "working", asynchronous: { procedure in
            codes.record("\(String(describing: caughtOperationError { try procedure.produce(ClosureOperation {}, before: .execute) }?.code))")
            codes.record("\(String(describing: caughtOperationError { try procedure.produce(later, before: .finish) }?.code))")
            procedure.finish()
        })
        try queue.addOperation(working)
        #expect(await working.finishes())
        #expect(codes.values == ["Optional(eventAlreadyPast)", "nil"])
        #expect(await later.finishes())

        // Finished: both past.
        #expect(caughtOperationError { try working.produce(ClosureOperation {}, before: .execute) }?.code == .eventAlreadyPast)
        #expect(caughtOperationError { try working.produce(ClosureOperation {}, before: .finish) }?.code == .eventAlreadyPast)
        #expect(caughtOperationError { try working.produce(ClosureOperation {}) }?.code == .notExecuting)
        #expect(await queue.empties())
    }

    @Test("a cancelled pending procedure still takes a produce before .execute; it finishes without executing, did add before did finish")
    func beforeExecuteOnCancelled() async throws {
        let queue = suspendedProcedureQueue("pending-cancelled")
        let produced = ClosureOperation(name: "produced") {}
        let procedure = ClosureProcedure<Void>(name: "cancelled") {}
        let log = AddEventLog()
        try procedure.addObserver(log.observer())
        try queue.addOperation(procedure)
        procedure.cancel()
        try procedure.produce(produced, before: .execute)
        queue.isSuspended = false
        #expect(await log.finishes())
        #expect(log.events == [
            "didAttach", "didCancel", "willAdd(produced)", "didAdd(produced)", "didProduce(produced)", "willFinish", "didFinish",
        ])
        #expect(await queue.empties())
        #expect(produced.isFinished && !produced.isCancelled)
    }

    @Test("group addChild before .execute: before the group executes; from a child it is past; before .finish the group waits for the child")
    func groupTokens() async throws {
        let queue = ConcurrentOperationQueue(name: "pending-group")
        let group = try GroupOperation(name: "group")
        let early = ClosureOperation(name: "early") {}
        try group.addChild(early, before: .execute)
        let late = ClosureOperation(name: "late") {}
        let codes = Recorder<String>()
        try group.addChild(ClosureOperation(name: "adder") {
            codes.record("\(String(describing: caughtOperationError { try group.addChild(ClosureOperation {}, before: .execute) }?.code))")
            codes.record("\(String(describing: caughtOperationError { try group.addChild(late, before: .finish) }?.code))")
        })
        let log = AddEventLog()
        try group.addObserver(log.observer())
        try queue.addOperation(group)
        #expect(await log.finishes())
        #expect(codes.values == ["Optional(eventAlreadyPast)", "nil"])
        #expect(early.isFinished && late.isFinished)
        #expect(log.events.firstIndex(of: "didAdd(late)")! < log.events.firstIndex(of: "willFinish")!)
        #expect(caughtOperationError { try group.addChild(ClosureOperation {}, before: .finish) }?.code == .eventAlreadyPast)
        #expect(caughtOperationError { try group.addChild(ClosureOperation {}, before: .execute) }?.code == .eventAlreadyPast)
    }

    @Test("group addChild before .execute while the group is pending: its start waits; the child is in the group before will execute")
    func groupBeforeExecutePending() async throws {
        let queue = suspendedProcedureQueue("pending-group-wait")
        let group = try GroupOperation(name: "group")
        let child = ClosureOperation(name: "child") {}
        let inWillAdd = Latch()
        let release = Gate()
        let log = AddEventLog()
        try group.addObserver(log.observer { event, _, _ in
            if event == "willAdd" {
                inWillAdd.countDown()
                _ = release.wait(timeout: procedureTimeout)
            }
        })
        try queue.addOperation(group)
        onThreadOfItsOwn { try? group.addChild(child, before: .execute) }
        #expect(await inWillAdd.opens())
        queue.isSuspended = false
        release.open()
        #expect(await log.finishes())
        let events = log.events
        #expect(events.firstIndex(of: "didAdd(child)")! < events.firstIndex(of: "willExecute")!)
        #expect(child.isFinished)
    }
}
