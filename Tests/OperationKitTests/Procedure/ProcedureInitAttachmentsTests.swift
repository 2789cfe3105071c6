import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Conditions and observers given to the initialiser (`ProcedureOperation.init(name:conditions:observers:)`,
/// `ClosureProcedure(name:conditions:observers:_:)`…): the same as adding them right after init.
/// Most tests run both forms and expect the same. A usual pair — one `ClosureCondition` without
/// dependencies and one observer that does not want did attach — is stored before the base
/// initialiser; anything else once the procedure is complete: both ways are covered.
@Suite("Procedures: conditions and observers given at init", .offThePool)
struct ProcedureInitAttachmentsTests {
    /// The two ways to give a procedure its conditions and observers.
    enum Form: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case atInit, addedAfterInit

        var testDescription: String { rawValue }

        func procedure(
            _ name: String, conditions: [any OperationCondition] = [], observers: [any OperationObserver] = [],
            _ body: @escaping @Sendable () throws -> Void = {}
        ) throws -> ClosureProcedure<Void> {
            switch self {
            case .atInit:
                return ClosureProcedure<Void>(name: name, conditions: conditions, observers: observers, body)
            case .addedAfterInit:
                let procedure = ClosureProcedure<Void>(name: name, body)
                for condition in conditions { try procedure.addCondition(condition) }
                for observer in observers { try procedure.addObserver(observer) }
                return procedure
            }
        }
    }

    /// Adds `procedure` to `queue` while it is suspended, then resumes it: a condition other than
    /// a `ClosureCondition` may produce a dependency, which the add makes, and may be overtaken by
    /// the conditions after it if a worker takes the procedure before that is done (documented).
    /// Added this way, every condition is evaluable when a worker takes the procedure.
    func addSuspended(_ procedure: ConcurrentOperation, to queue: ConcurrentOperationQueue) throws {
        queue.isSuspended = true
        try queue.addOperation(procedure)
        queue.isSuspended = false
    }

    @Test("the usual pair — a satisfied ClosureCondition, a did-finish observer: the condition is evaluated once, the work runs, the observer is told once", arguments: Form.allCases)
    func usualPair(form: Form) async throws {
        let queue = ConcurrentOperationQueue(name: "init-pair")
        let seen = Recorder<String>()
        let ran = AtomicCounter()
        let condition = ClosureCondition(name: "always") { procedure in
            seen.record("condition \(procedure.state)")
            return .satisfied
        }
        let observer = ClosureObserver(didFinish: { procedure, errors in
            seen.record("didFinish \(procedure.state) \(errors.count)")
        })
        let procedure = try form.procedure("pair", conditions: [condition], observers: [observer]) { ran.increment() }
        #expect(procedure.conditionCount == 1 && procedure.observerCount == 1)
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(await queue.empties())
        #expect(ran.value == 1)
        #expect(seen.values == ["condition evaluatingConditions", "didFinish finished 0"])
        #expect(!procedure.isCancelled && procedure.errors.isEmpty)
        #expect(procedure.conditionCount == 0 && procedure.observerCount == 0, "let go of once finished")
    }

    @Test("a failing condition: the work never runs, the procedure is cancelled with its error, the observer is told did cancel, will finish, did finish", arguments: Form.allCases)
    func failingCondition(form: Form) async throws {
        let queue = ConcurrentOperationQueue(name: "init-failing")
        let events = Recorder<String>()
        let ran = AtomicCounter()
        let evaluations = AtomicCounter()
        let condition = ClosureCondition(name: "fails") { _ in
            evaluations.increment()
            return .failed(ProcedureTestError(17))
        }
        // No did attach: stored before the base initialiser with the condition.
        let observer = ClosureObserver(
            willExecute: { _ in events.record("willExecute") },
            didCancel: { _, error in events.record("didCancel \(error.map { "\($0)" } ?? "nil")") },
            willFinish: { _, errors in events.record("willFinish \(errorIDs(errors))") },
            didFinish: { _, errors in events.record("didFinish \(errorIDs(errors))") })
        let procedure = try form.procedure("failing", conditions: [condition], observers: [observer]) { ran.increment() }
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(await queue.empties())
        #expect(ran.value == 0)
        #expect(evaluations.value == 1)
        #expect(procedure.isCancelled)
        #expect(errorIDs(procedure.errors) == [17])
        #expect(events.values == ["didCancel E17", "willFinish [17]", "didFinish [17]"])
    }

    @Test("every event reaches every observer, in lifecycle order, the observers in the order given", arguments: Form.allCases)
    func everyEventInOrder(form: Form) async throws {
        let queue = ConcurrentOperationQueue(name: "init-events")
        let first = ProcedureEventLog()
        let second = ProcedureEventLog()
        let order = Recorder<String>()
        let ordering = ["A", "B"].map { label in
            ClosureObserver(
                willExecute: { _ in order.record("\(label) willExecute") },
                didExecute: { _ in order.record("\(label) didExecute") },
                willFinish: { _, _ in order.record("\(label) willFinish") },
                didFinish: { _, _ in order.record("\(label) didFinish") })
        }
        let procedure = try form.procedure(
            "events", conditions: [ClosureCondition { _ in .satisfied }],
            observers: [first.observer, ordering[0], second.observer, ordering[1]])
        #expect(procedure.observerCount == 4)
        try queue.addOperation(procedure)
        #expect(await first.finishes())
        #expect(await second.finishes())
        #expect(await queue.empties())
        for log in [first, second] {
            #expect(log.eventsWithStates == [
                // (A synchronous body finishes inside `execute()`: did execute comes with the finish.)
                "didAttach:initialized", "willExecute:executing", "didExecute:finishing", "willFinish:finishing",
                "didFinish:finished",
            ])
        }
        #expect(order.values == [
            "A willExecute", "B willExecute", "A didExecute", "B didExecute", "A willFinish", "B willFinish",
            "A didFinish", "B didFinish",
        ])
    }

    @Test("did attach is told before the initialiser returns, in order; a cancel from it reaches every observer, after its did attach")
    func didAttachAtInit() async throws {
        let queue = ConcurrentOperationQueue(name: "init-attach")
        let events = Recorder<String>()
        let observers = ["A", "B"].map { label in
            ClosureObserver(
                didAttach: { procedure in
                    events.record("\(label) didAttach \(procedure.state) \(procedure.observerCount)")
                    if label == "A" { procedure.cancel() }
                },
                didCancel: { _, _ in events.record("\(label) didCancel") },
                didFinish: { _, _ in events.record("\(label) didFinish") })
        }
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Void>(name: "attach", observers: observers) { ran.increment() }
        // Told on this thread before the initialiser returned: all there without waiting.
        #expect(events.values == ["A didAttach initialized 2", "B didAttach initialized 2", "A didCancel", "B didCancel"])
        #expect(procedure.isCancelled)
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(await queue.empties())
        #expect(ran.value == 0)
        #expect(events.values.suffix(2) == ["A didFinish", "B didFinish"])
    }

    @Test("several conditions: all evaluated, in the order given; the first failure decides; a condition given twice is kept once", arguments: Form.allCases)
    func severalConditions(form: Form) async throws {
        let queue = ConcurrentOperationQueue(name: "init-several")
        let evaluations = Recorder<String>()
        let twice = ClosureCondition(name: "twice") { _ in
            evaluations.record("twice")
            return .satisfied
        }
        let satisfied = try form.procedure(
            "all", conditions: [RecordingCondition("c1", evaluations), twice, RecordingCondition("c2", evaluations), twice])
        #expect(satisfied.conditionCount == 3)
        try addSuspended(satisfied, to: queue)
        #expect(await satisfied.finishes())
        #expect(!satisfied.isCancelled)
        #expect(evaluations.values == ["c1", "twice", "c2"])

        let failures = Recorder<String>()
        let failing = try form.procedure(
            "failing",
            conditions: [
                RecordingCondition("ok", failures), RecordingCondition("first", failures, .failed(ProcedureTestError(1))),
                RecordingCondition("second", failures, .failed(ProcedureTestError(2))),
            ])
        try addSuspended(failing, to: queue)
        #expect(await failing.finishes())
        #expect(failing.isCancelled)
        #expect(errorIDs(failing.errors) == [1])
        #expect(failures.values == ["ok", "first"])
    }

    @Test("an asynchronous condition given at init is waited for", arguments: Form.allCases)
    func asynchronousCondition(form: Form) async throws {
        let queue = ConcurrentOperationQueue(name: "init-async")
        let condition = ManualCondition()
        let ran = AtomicCounter()
        let procedure = try form.procedure("async", conditions: [condition]) { ran.increment() }
        try queue.addOperation(procedure)
        #expect(await condition.evaluating.opens())
        #expect(procedure.state == .evaluatingConditions && ran.value == 0)
        condition.complete(.satisfied)
        #expect(await procedure.finishes())
        #expect(ran.value == 1 && condition.evaluations.value == 1)
    }

    @Test("MutuallyExclusive given at init: procedures of a category never overlap, across queues and with those given it after init")
    func mutualExclusivityAtInit() async throws {
        let category = uniqueExclusivityCategory("init-exclusive")
        let queues = try (0..<2).map { try ConcurrentOperationQueue(name: "init-exclusive-\($0)", maxConcurrentOperationCount: 4) }
        let meter = InFlightMeter()
        var procedures: [ClosureProcedure<Void>] = []
        for index in 0..<12 {
            let work: @Sendable (ClosureProcedure<Void>) -> Void = { procedure in
                meter.enter()
                procedureTestLaterQueue.asyncAfter(deadline: .now() + .milliseconds(5)) {
                    meter.leave()
                    procedure.finish()
                }
            }
            let exclusive = MutuallyExclusive(category: category)
            let procedure: ClosureProcedure<Void>
            if index % 3 == 2 {
                procedure = ClosureProcedure<Void>(name: "after-\(index)", asynchronous: work)
                try procedure.addCondition(exclusive)
            } else {
                procedure = ClosureProcedure<Void>(name: "init-\(index)", conditions: [exclusive], asynchronous: work)
            }
            #expect(procedure.conditionCount == 1)
            procedures.append(procedure)
            try queues[index % 2].addOperation(procedure)
        }
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(meter.peak == 1)
    }

    @Test("conditions and observers added after init come after those given at init", arguments: [false, true])
    func addingAfterInit(usualPairFirst: Bool) async throws {
        let queue = ConcurrentOperationQueue(name: "init-then-add")
        let order = Recorder<String>()
        let atInit: any OperationCondition = usualPairFirst
            ? ClosureCondition(name: "init") { _ in
                order.record("condition init")
                return .satisfied
            }
            : RecordingCondition("condition init", order)
        let observers = ["init", "added"].map { label in ClosureObserver(didFinish: { _, _ in order.record("\(label) didFinish") }) }
        let procedure = ClosureProcedure<Void>(name: "then-add", conditions: [atInit], observers: [observers[0]]) {
            order.record("work")
        }
        try procedure.addCondition(RecordingCondition("condition added", order))
        try procedure.addObserver(observers[1])
        #expect(procedure.conditionCount == 2 && procedure.observerCount == 2)
        try addSuspended(procedure, to: queue)
        #expect(await procedure.finishes())
        #expect(await queue.empties())
        #expect(order.values == ["condition init", "condition added", "work", "init didFinish", "added didFinish"])
    }

    @Test("a subclass gives its conditions and observers to super.init: hooks, then observers, are told; its condition decides", arguments: [false, true])
    func subclassUsingSuperInit(fails: Bool) async throws {
        let queue = ConcurrentOperationQueue(name: "init-subclass")
        let order = Recorder<String>()
        let procedure = GuardedProcedure(
            conditions: [ClosureCondition { _ in fails ? .failed(ProcedureTestError(5)) : .satisfied }],
            observers: [ClosureObserver(didFinish: { _, errors in order.record("observer didFinish \(errorIDs(errors))") })],
            order: order)
        #expect(procedure.conditionCount == 1 && procedure.observerCount == 1)
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(await queue.empties())
        if fails {
            #expect(order.values == ["hook didFinish [5]", "observer didFinish [5]"])
            #expect(procedure.isCancelled)
        } else {
            #expect(order.values == ["execute", "hook didFinish []", "observer didFinish []"])
        }

        let answer = AnswerProcedure(conditions: [ClosureCondition { _ in .satisfied }], observers: [
            ClosureObserver(didFinish: { procedure, _ in order.record("answer \((procedure as? AnswerProcedure)?.output ?? -1)") }),
        ])
        try queue.addOperation(answer)
        #expect(await answer.finishes())
        #expect(answer.output == 42)
        #expect(await queue.empties())
        #expect(order.values.last == "answer 42")
    }

    @Test("ClosureProcedure's other initialisers: a value, and asynchronous work, with a condition and an observer")
    func otherClosureInitialisers() async throws {
        let queue = ConcurrentOperationQueue(name: "init-closure-forms")
        let told = AtomicCounter()
        let observer = ClosureObserver(didFinish: { _, _ in told.increment() })
        let evaluated = AtomicCounter()
        let condition = ClosureCondition { _ in
            evaluated.increment()
            return .satisfied
        }
        let value = ClosureProcedure<Int>(name: "value", conditions: [condition], observers: [observer]) { 42 }
        let later = ClosureProcedure<String>(name: "later", conditions: [condition], observers: [observer], asynchronous: { procedure in
            procedureTestLaterQueue.async { procedure.finish(withValue: "done") }
        })
        try queue.addOperations([value, later], waitUntilFinished: false)
        #expect(await value.finishes())
        #expect(await later.finishes())
        #expect(await queue.empties())
        #expect(value.output == 42 && later.output == "done")
        #expect(evaluated.value == 2 && told.value == 2)
    }

    @Test("start() by hand refuses a procedure given a condition at init; given only an observer, it starts and tells it")
    func startByHand() async throws {
        let guarded = ClosureProcedure<Void>(name: "guarded", conditions: [ClosureCondition { _ in .satisfied }]) {}
        #expect(caughtOperationError { try guarded.start() }?.code == .requiresQueue)
        #expect(guarded.state == .initialized)

        let told = Recorder<String>()
        let observed = ClosureProcedure<Void>(name: "observed", observers: [ClosureObserver(
            willExecute: { _ in told.record("willExecute") }, didFinish: { _, _ in told.record("didFinish") })]) {}
        try observed.start()
        #expect(await observed.finishes())
        #expect(told.values == ["willExecute", "didFinish"])
    }

    @Test("an observer with an event queue given at init is told every event there", arguments: Form.allCases)
    func eventQueueObserver(form: Form) async throws {
        let marked = MarkedQueue("init-event-queue.observer")
        let log = Recorder<String>()
        let finished = Latch()
        let queue = ConcurrentOperationQueue(name: "init-event-queue")
        let procedure = try form.procedure(
            "observed", conditions: [ClosureCondition { _ in .satisfied }],
            observers: [QueueNamingObserver(marked: marked, log: log, finished: finished)])
        try queue.addOperation(procedure)
        #expect(await finished.opens())
        #expect(await procedure.finishes())
        #expect(log.values == ["didAttach:true", "willExecute:true", "didExecute:true", "willFinish:true", "didFinish:true"])
    }

    @Test("conditions with dependencies given at init: the produced one is made when the procedure is added, and both are waited for", arguments: Form.allCases)
    func conditionsWithDependencies(form: Form) async throws {
        let queue = try ConcurrentOperationQueue(name: "init-dependencies", maxConcurrentOperationCount: 4)
        let order = Recorder<String>()
        let produced = Recorder<ConcurrentOperation>()
        let own = ClosureOperation(name: "own") { order.record("own") }
        let procedure = try form.procedure(
            "dependent",
            conditions: [
                ProducingCondition("evaluate produced", order, produced: produced) {
                    ClosureOperation(name: "produced") { order.record("produced") }
                },
                ClosureCondition(name: "waits", dependencies: [own]) { _ in
                    order.record("evaluate waits")
                    return .satisfied
                },
            ]) { order.record("work") }
        #expect(procedure.conditionCount == 2)
        #expect(produced.values.isEmpty, "made only when the procedure is added to a queue")
        try queue.addOperation(procedure)
        #expect(produced.values.count == 1)
        try queue.addOperation(own)
        #expect(await procedure.finishes())
        #expect(await queue.empties())
        let values = order.values
        func precedes(_ first: String, _ second: String) -> Bool {
            guard let one = values.firstIndex(of: first), let other = values.firstIndex(of: second) else { return false }
            return one < other
        }
        #expect(values.count == 5 && values.last == "work")
        #expect(precedes("produced", "evaluate produced"))
        #expect(precedes("own", "evaluate waits"))
    }
}

/// A subclass that takes its conditions and observers in its own initialiser.
private final class GuardedProcedure: ProcedureOperation, @unchecked Sendable {
    // Immutable; the recorder synchronises itself.
    private let order: Recorder<String>

    init(conditions: [any OperationCondition], observers: [any OperationObserver], order: Recorder<String>) {
        self.order = order
        super.init(name: "guarded", conditions: conditions, observers: observers)
    }

    override func execute() {
        order.record("execute")
        finish()
    }

    override func procedureDidFinish(with errors: [any Error]) { order.record("hook didFinish \(errorIDs(errors))") }
}

/// A `ResultProcedure` subclass that takes its conditions and observers in its initialiser.
private final class AnswerProcedure: ResultProcedure<Int>, @unchecked Sendable {
    init(conditions: [any OperationCondition], observers: [any OperationObserver]) {
        super.init(name: "answer", conditions: conditions, observers: observers)
    }

    override func execute() { finish(withValue: 42) }
}
