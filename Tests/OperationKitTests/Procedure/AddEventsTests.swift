import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

// Will-add and did-add events (issue 16, part 5): for operations a procedure produces and for a
// group's children — their order among the other events, exactly once, hooks before observers.

/// Records every event of a procedure, will add and did add included, as `event` or
/// `event(operation)`; opens `finished` once did finish was told.
final class AddEventLog: Sendable {
    private let log = Recorder<String>()
    let finished = Latch()

    init() {}

    /// An observer writing into this log; `extra` runs first for each event, with its name.
    func observer(_ extra: @escaping @Sendable (String, ProcedureOperation, ConcurrentOperation?) -> Void = { _, _, _ in }) -> ClosureObserver {
        ClosureObserver(
            didAttach: { self.note("didAttach", $0, nil, extra) },
            willExecute: { self.note("willExecute", $0, nil, extra) },
            didExecute: { self.note("didExecute", $0, nil, extra) },
            didCancel: { procedure, _ in self.note("didCancel", procedure, nil, extra) },
            didProduce: { self.note("didProduce", $0, $1, extra) },
            willFinish: { procedure, _ in self.note("willFinish", procedure, nil, extra) },
            didFinish: { procedure, _ in
                self.note("didFinish", procedure, nil, extra)
                self.finished.countDown()
            },
            willAdd: { self.note("willAdd", $0, $1, extra) },
            didAdd: { self.note("didAdd", $0, $1, extra) })
    }

    private func note(
        _ event: String, _ procedure: ProcedureOperation, _ operation: ConcurrentOperation?,
        _ extra: (String, ProcedureOperation, ConcurrentOperation?) -> Void
    ) {
        extra(event, procedure, operation)
        log.record(operation.map { "\(event)(\($0.displayName))" } ?? event)
    }

    var events: [String] { log.values }

    func finishes() async -> Bool { await finished.opens() }
}

/// Whether `operation` is in `queue` (not finished yet) or has finished — added, either way.
func wasAdded(_ operation: ConcurrentOperation, to queue: ConcurrentOperationQueue) -> Bool {
    operation.isFinished || queue.operations.contains { $0 === operation }
}

/// A procedure recording its will-add and did-add hooks into `log` (before its observers).
final class AddHookProcedure: ProcedureOperation, @unchecked Sendable {
    let log: Recorder<String>
    let produced: ConcurrentOperation

    init(log: Recorder<String>, producing produced: ConcurrentOperation) {
        self.log = log
        self.produced = produced
        super.init(name: "hooks")
    }

    override func execute() {
        try? produce(produced)
        finish()
    }

    override func procedureWillAdd(_ operation: ConcurrentOperation) { log.record("hook willAdd(\(operation.displayName))") }
    override func procedureDidAdd(_ operation: ConcurrentOperation) { log.record("hook didAdd(\(operation.displayName))") }
}

@Suite("Events: will add and did add", .offThePool)
struct AddEventsTests {
    @Test("produce: will add before the add, did add and did produce after it, once each, between will execute and will finish")
    func produceOrder() async throws {
        let queue = ConcurrentOperationQueue(name: "add-order")
        let hold = Gate()
        let produced = ClosureOperation(name: "produced") { _ = hold.wait() }
        let procedure = ClosureProcedure<Void>(name: "producer", asynchronous: { procedure in
            try? procedure.produce(produced)
            procedure.finish()
        })
        let addedAtWill = Recorder<Bool>()
        let addedAtDid = Recorder<Bool>()
        let log = AddEventLog()
        try procedure.addObserver(log.observer { event, _, operation in
            guard let operation else { return }
            if event == "willAdd" { addedAtWill.record(wasAdded(operation, to: queue)) }
            if event == "didAdd" { addedAtDid.record(wasAdded(operation, to: queue)) }
        })
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(log.events == [
            "didAttach", "willExecute", "willAdd(produced)", "didAdd(produced)", "didProduce(produced)",
            "didExecute", "willFinish", "didFinish",
        ])
        #expect(addedAtWill.values == [false])
        #expect(addedAtDid.values == [true])
        hold.open()
        #expect(await queue.empties())
    }

    @Test("the procedure's will-add and did-add hooks run once each, before the observers")
    func hooksBeforeObservers() async throws {
        let queue = ConcurrentOperationQueue(name: "add-hooks")
        let log = Recorder<String>()
        let procedure = AddHookProcedure(log: log, producing: ClosureOperation(name: "p") {})
        let done = Latch()
        try procedure.addObserver(ClosureObserver(
            didFinish: { _, _ in done.countDown() },
            willAdd: { log.record("observer willAdd(\($1.displayName))") },
            didAdd: { log.record("observer didAdd(\($1.displayName))") }))
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(log.values == ["hook willAdd(p)", "observer willAdd(p)", "hook didAdd(p)", "observer didAdd(p)"])
    }

    @Test("a refused produce tells will add but not did add, and throws the queue's error")
    func refusedProduce() async throws {
        let queue = ConcurrentOperationQueue(name: "add-refused")
        let other = suspendedProcedureQueue("add-refused-other")
        let elsewhere = ClosureOperation(name: "elsewhere") {}
        try other.addOperation(elsewhere)
        let procedure = ClosureProcedure<Void>(name: "refused", asynchronous: { procedure in
            procedure.finish(with: caughtOperationError { try procedure.produce(elsewhere) })
        })
        let log = AddEventLog()
        try procedure.addObserver(log.observer())
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(errorCodes(procedure.errors) == [.enqueuedInAnotherQueue])
        #expect(log.events.filter { $0.hasPrefix("willAdd") } == ["willAdd(elsewhere)"])
        #expect(!log.events.contains { $0.hasPrefix("didAdd") || $0.hasPrefix("didProduce") })
        elsewhere.cancel()
        other.isSuspended = false
        #expect(await other.empties())
    }

    @Test("an observer that wants neither add event is not told them; ClosureObserver asks for the ones given")
    func observedEventMasks() async throws {
        #expect(ClosureObserver(willAdd: { _, _ in }).observedEvents == .willAdd)
        #expect(ClosureObserver(didAdd: { _, _ in }).observedEvents == .didAdd)
        #expect(ProcedureEventKinds.didProduce == .didAdd)
        #expect(ProcedureEventKinds.all.contains([.willAdd, .didAdd]))
        let queue = ConcurrentOperationQueue(name: "add-masks")
        let procedure = ClosureProcedure<Void>(name: "masks", asynchronous: { procedure in
            try? procedure.produce(ClosureOperation(name: "p") {})
            procedure.finish()
        })
        let produceOnly = Recorder<String>()
        let done = Latch()
        try procedure.addObserver(ClosureObserver(didProduce: { produceOnly.record("didProduce(\($1.displayName))") }))
        try procedure.addObserver(ClosureObserver(didFinish: { _, _ in done.countDown() }))
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(produceOnly.values == ["didProduce(p)"])
        #expect(await queue.empties())
    }

    @Test("a group's children added with addChild(ren) are told: will add each, then did add each; no did produce")
    func groupChildren() async throws {
        let queue = ConcurrentOperationQueue(name: "add-group")
        let first = ClosureOperation(name: "first") {}
        let group = try GroupOperation(name: "group", operations: [first])
        let log = AddEventLog()
        try group.addObserver(log.observer())
        try group.addChild(ClosureOperation(name: "a") {})
        try group.addChildren([ClosureOperation(name: "b") {}, ClosureOperation(name: "c") {}])
        try queue.addOperation(group)
        #expect(await log.finishes())
        #expect(log.events == [
            "didAttach", "willAdd(a)", "didAdd(a)", "willAdd(b)", "willAdd(c)", "didAdd(b)", "didAdd(c)",
            "willExecute", "didExecute", "willFinish", "didFinish",
        ])
        let late = caughtOperationError { try group.addChild(ClosureOperation(name: "late") {}) }
        #expect(late?.code == .alreadyFinished)
        #expect(log.events.count == 11)
    }

    @Test("a child added from a running child is told between will execute and will finish; one added to a cancelled group too")
    func groupChildFromChild() async throws {
        let queue = ConcurrentOperationQueue(name: "add-group-child")
        let group = try GroupOperation(name: "group")
        let added = ClosureOperation(name: "added") {}
        try group.addChild(ClosureOperation(name: "adder") { try? group.addChild(added) })
        let log = AddEventLog()
        try group.addObserver(log.observer())
        try queue.addOperation(group)
        #expect(await log.finishes())
        // The group's did execute comes when its `execute()` returns, while the children run.
        let events = log.events
        #expect(events.filter { $0 != "didExecute" } == ["didAttach", "willExecute", "willAdd(added)", "didAdd(added)", "willFinish", "didFinish"])
        #expect(events.filter { $0 == "didExecute" }.count == 1)
        #expect(added.isFinished)

        let cancelledGroup = try GroupOperation(name: "cancelled")
        let cancelledLog = AddEventLog()
        try cancelledGroup.addObserver(cancelledLog.observer())
        cancelledGroup.cancel()
        let child = ClosureOperation(name: "child") {}
        try cancelledGroup.addChild(child)
        #expect(child.isCancelled)
        try queue.addOperation(cancelledGroup)
        #expect(await cancelledLog.finishes())
        #expect(cancelledLog.events == ["didAttach", "didCancel", "willAdd(child)", "didAdd(child)", "willFinish", "didFinish"])
    }

    @Test("many concurrent produces: each operation told will add, did add and did produce exactly once, did add after its will add")
    func concurrentProducesExactlyOnce() async throws {
        let queue = ConcurrentOperationQueue(name: "add-concurrent")
        let count = 64
        let procedure = ClosureProcedure<Void>(name: "many", asynchronous: { procedure in
            DispatchQueue(label: "add-concurrent.producers").async {
                DispatchQueue.concurrentPerform(iterations: count) { index in
                    try? procedure.produce(ClosureOperation(name: "op\(index)") {})
                }
                procedure.finish()
            }
        })
        let log = AddEventLog()
        try procedure.addObserver(log.observer())
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        let events = log.events
        for index in 0..<count {
            let will = events.firstIndex(of: "willAdd(op\(index))")
            let did = events.firstIndex(of: "didAdd(op\(index))")
            #expect(events.filter { $0 == "willAdd(op\(index))" }.count == 1)
            #expect(events.filter { $0 == "didAdd(op\(index))" }.count == 1)
            #expect(events.filter { $0 == "didProduce(op\(index))" }.count == 1)
            if let will, let did { #expect(will < did) }
        }
        #expect(events.last == "didFinish")
        #expect(events.firstIndex(of: "willFinish")! > events.lastIndex { $0.hasPrefix("didProduce") }!)
        #expect(await queue.empties())
    }
}
