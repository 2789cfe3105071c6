// Instruments and procedures: conditions evaluated with their results, mutual exclusivity
// waited for and granted, produced operations, condition-produced dependencies, retries, groups.

import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Observability: procedure events told to a queue's instrument", .offThePool, .exclusiveInstrumentation)
struct ProcedureInstrumentTests {
    typealias Support = OperationInstrumentTests

    /// The results of the `conditionsEvaluated` event of `procedure`, as `name=result`.
    static func conditions(of procedure: ProcedureOperation, in instrument: RecordingInstrument) -> [String] {
        for event in instrument.events(of: procedure) {
            if case .conditionsEvaluated(let results) = event.kind {
                return results.map { "\($0.name)=\(Self.describe($0.result))" }
            }
        }
        return []
    }

    static func describe(_ result: ConditionResult) -> String {
        switch result {
        case .satisfied: "satisfied"
        case .failed: "failed"
        case .ignored: "ignored"
        }
    }

    @Test("a satisfied condition: added, ready, conditionsEvaluated, started, finished(succeeded)")
    func satisfiedCondition() throws {
        let (queue, instrument) = Support.instrumentedQueue("conditions-satisfied")
        let procedure = ClosureProcedure(name: "guarded") {}
        try procedure.addCondition(ClosureCondition(name: "always") { _ in .satisfied })
        try queue.addOperation(procedure)
        Support.drain(queue)
        #expect(instrument.kinds(of: procedure) == ["added", "ready", "conditionsEvaluated", "started", "finished(succeeded)"])
        #expect(Self.conditions(of: procedure, in: instrument) == ["always=satisfied"])
    }

    @Test("a failing condition among several: the results in the order added, those never asked left out; cancelled with its error")
    func failedConditions() throws {
        let (queue, instrument) = Support.instrumentedQueue("conditions-failed")
        let procedure = ClosureProcedure(name: "refused") {}
        try procedure.addCondition(ClosureCondition(name: "first") { _ in .satisfied })
        try procedure.addCondition(ClosureCondition(name: "second") { _ in .failed(InstrumentTestError(2)) })
        try procedure.addCondition(ClosureCondition(name: "third") { _ in .satisfied })
        try queue.addOperation(procedure)
        Support.drain(queue)
        #expect(Self.conditions(of: procedure, in: instrument) == ["first=satisfied", "second=failed"])
        #expect(instrument.kinds(of: procedure) == [
            "added", "ready", "conditionsEvaluated", "cancelled", "finished(cancelled)",
        ])
        let last = try #require(instrument.events(of: procedure).last)
        if case .finished(let outcome) = last.kind {
            #expect(outcome.errors.compactMap { $0 as? InstrumentTestError } == [InstrumentTestError(2)])
        }
    }

    @Test("mutual exclusivity: the second procedure waits, then is granted once the first has finished")
    func exclusivity() throws {
        let (queue, instrument) = Support.instrumentedQueue("exclusive")
        let category = "instrument-exclusivity-\(UInt(bitPattern: ObjectIdentifier(queue).hashValue))"
        let entered = Latch()
        let release = Gate()
        let first = ClosureProcedure(name: "holder") {
            entered.countDown()
            _ = release.wait(timeout: operationTestTimeout)
        }
        let second = ClosureProcedure(name: "waiter") {}
        try first.addCondition(MutuallyExclusive(category: category))
        try second.addCondition(MutuallyExclusive(category: category))
        try queue.addOperation(first)
        #expect(entered.wait(timeout: operationTestTimeout))
        try queue.addOperation(second)
        release.open()
        Support.drain(queue)
        let expected = ["added", "ready", "conditionsEvaluated", "exclusivityWaiting", "exclusivityGranted", "started", "finished(succeeded)"]
        #expect(instrument.kinds(of: first) == expected)
        #expect(instrument.kinds(of: second) == expected)
        let events = instrument.events
        let firstFinished = try #require(events.firstIndex { $0.operation === first && $0.kind.shortName.hasPrefix("finished") })
        let secondGranted = try #require(events.firstIndex { $0.operation === second && $0.kind.shortName == "exclusivityGranted" })
        #expect(firstFinished < secondGranted)
        for event in instrument.events(of: second) {
            if case .exclusivityWaiting(let categories) = event.kind { #expect(categories == [category]) }
        }
    }

    @Test("produce: the produced operation is told added on the queue, and the producer told produced before it finished")
    func produced() throws {
        let (queue, instrument) = Support.instrumentedQueue("produce")
        let child = ClosureOperation(name: "produced") {}
        let producer = ClosureProcedure<Void>(name: "producer", asynchronous: { procedure in
            do { try procedure.produce(child) } catch { Issue.record(error) }
            procedure.finish()
        })
        try queue.addOperation(producer)
        Support.drain(queue)
        #expect(instrument.kinds(of: producer) == ["added", "ready", "started", "produced", "finished(succeeded)"])
        #expect(instrument.kinds(of: child) == ["added", "ready", "started", "finished(succeeded)"])
        let producedEvent = instrument.events(of: producer).first { $0.kind.shortName == "produced" }
        if case .produced(let operation)? = producedEvent?.kind { #expect(operation === child) }
    }

    @Test("a dependency made by a condition is told added to the procedure's queue")
    func conditionDependency() throws {
        let (queue, instrument) = Support.instrumentedQueue("condition-dependency")
        let made = Recorder<ConcurrentOperation>()
        let procedure = ClosureProcedure(name: "needs") {}
        try procedure.addCondition(DependencyMakingCondition(made: made))
        try queue.addOperation(procedure)
        Support.drain(queue)
        let dependency = try #require(made.values.first)
        #expect(instrument.kinds(of: dependency) == ["added", "ready", "started", "finished(succeeded)"])
        #expect(instrument.kinds(of: procedure).last == "finished(succeeded)")
    }

    @Test("retry: retrying(attempt: 2) with its delay, told to the retry's queue; the attempts told to the same instrument")
    func retry() throws {
        let (queue, instrument) = Support.instrumentedQueue("retry")
        let attempts = AtomicCounter()
        let retry = RetryOperation<Int>(name: "retry", maxAttempts: 3) { attempt in
            ClosureProcedure<Int>(name: "attempt\(attempt)") { () throws -> Int in
                if attempts.increment() == 1 { throw InstrumentTestError(1) }
                return 42
            }
        }
        try queue.addOperation(retry)
        Support.drain(queue)
        #expect(instrument.kinds(of: retry) == ["added", "ready", "started", "retrying(2)", "finished(succeeded)"])
        let retrying = instrument.events(of: retry).first { $0.kind.shortName == "retrying(2)" }
        if case .retrying(let attempt, let delay)? = retrying?.kind {
            #expect(attempt == 2 && delay == .zero)
        }
        let attemptNames = instrument.events.filter { $0.kind.shortName == "started" }.compactMap { $0.operation.name }
        #expect(attemptNames.contains("attempt1") && attemptNames.contains("attempt2"))
    }

    @Test("a group added to an instrumented queue: its children are told to the same instrument, with the group's queue")
    func groupChildren() throws {
        let (queue, instrument) = Support.instrumentedQueue("group-parent")
        // The first child holds the group open until the second is added (else the group may
        // finish first and refuse it).
        let added = Gate()
        let first = ClosureOperation(name: "child1") { _ = added.wait(timeout: .seconds(30)) }
        let group = try GroupOperation(name: "group", operations: [first])
        let second = ClosureOperation(name: "child2") {}
        try queue.addOperation(group)
        try group.addChild(second)
        added.open()
        Support.drain(queue)
        #expect(instrument.kinds(of: group).first == "added")
        #expect(instrument.kinds(of: group).last == "finished(succeeded)")
        for child in [first, second] {
            #expect(instrument.kinds(of: child) == ["added", "ready", "started", "finished(succeeded)"])
            #expect(instrument.events(of: child).allSatisfy { $0.queue != nil && $0.queue !== queue })
        }
    }
}

/// A condition whose dependency is a new closure operation (recorded), always satisfied.
struct DependencyMakingCondition: OperationCondition {
    let made: Recorder<ConcurrentOperation>
    var name: String { "makes-a-dependency" }
    func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        let operation = ClosureOperation(name: "made-dependency") {}
        made.record(operation)
        return operation
    }
    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(.satisfied)
    }
}
