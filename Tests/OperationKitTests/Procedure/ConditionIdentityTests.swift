// Tests of condition identity: a condition given twice — to AllConditions / AnyCondition, or to
// one procedure — is evaluated once and its dependency produced once; names for diagnostics.

import OperationKit
import OperationKitTestSupport
import Testing

/// A value-type condition that counts its evaluations, with an optional explicit identity.
struct CountingCondition: OperationCondition {
    let label: String
    let key: String?
    let evaluations: AtomicCounter
    let result: ConditionResult

    init(_ label: String, key: String? = nil, evaluations: AtomicCounter = AtomicCounter(), result: ConditionResult = .satisfied) {
        self.label = label
        self.key = key
        self.evaluations = evaluations
        self.result = result
    }

    var name: String { label }
    var identity: ConditionIdentity? { key.map { .named($0) } }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        evaluations.increment()
        completion(result)
    }
}

/// A class condition (identity: the object) that counts its evaluations and the dependencies it
/// produced.
final class CountingObjectCondition: OperationCondition, Sendable {
    let evaluations = AtomicCounter()
    let made = AtomicCounter()
    let produces: Bool
    let result: ConditionResult

    init(produces: Bool = false, result: ConditionResult = .satisfied) {
        self.produces = produces
        self.result = result
    }

    var name: String { "CountingObject" }

    func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        guard produces else { return nil }
        made.increment()
        return ClosureOperation(name: "produced") {}
    }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        evaluations.increment()
        completion(result)
    }
}

@Suite("Condition identity", .offThePool)
struct ConditionIdentityTests {
    /// Runs a procedure with `conditions` (each added in turn) and returns it once finished.
    func run(_ label: String, _ conditions: [any OperationCondition]) async throws -> ProcedureCountingHooks {
        let queue = ConcurrentOperationQueue(name: label)
        let procedure = ProcedureCountingHooks(name: label)
        for condition in conditions { try procedure.addCondition(condition) }
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens())
        return procedure
    }

    @Test("AllConditions([c, c]) keeps c once and evaluates it once")
    func allTwice() async throws {
        let counter = AtomicCounter()
        let c = CountingCondition("c", key: "c", evaluations: counter)
        let all = AllConditions([c, c])
        #expect(all.conditions.count == 1)
        let procedure = try await run("all-twice", [all])
        #expect(counter.value == 1)
        #expect(procedure.willExecuteCalls.value == 1)
    }

    @Test("AnyCondition([c, d, c]) with a class condition evaluates it once")
    func anyTwice() async throws {
        let c = CountingObjectCondition(result: .failed(ProcedureTestError(1)))
        let d = CountingCondition("d")
        let any = AnyCondition([c, d, c])
        #expect(any.conditions.count == 2)
        let procedure = try await run("any-twice", [any])
        #expect(c.evaluations.value == 1)
        #expect(procedure.willExecuteCalls.value == 1)
    }

    @Test("addCondition(c) twice: counted once, evaluated once")
    func procedureTwice() async throws {
        let counter = AtomicCounter()
        let closure = ClosureCondition(name: "closure") { _ in
            counter.increment()
            return .satisfied
        }
        let object = CountingObjectCondition()
        let named = CountingCondition("named", key: "same-key")
        let queue = ConcurrentOperationQueue(name: "procedure-twice")
        let procedure = ProcedureCountingHooks(name: "procedure-twice")
        for condition: any OperationCondition in [closure, object, closure, named, object, named] {
            try procedure.addCondition(condition)
        }
        #expect(procedure.conditionCount == 3)
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens())
        #expect(counter.value == 1)
        #expect(object.evaluations.value == 1)
        #expect(named.evaluations.value == 1)
        #expect(procedure.willExecuteCalls.value == 1)
    }

    @Test("a duplicate of the only condition: the single-condition path evaluates it once")
    func singleTwice() async throws {
        let counter = AtomicCounter()
        let closure = ClosureCondition { _ in
            counter.increment()
            return .satisfied
        }
        let procedure = try await run("single-twice", [closure, closure])
        #expect(procedure.conditionCount == 0)  // let go once finished
        #expect(counter.value == 1)
    }

    @Test("a failing duplicate: its error is reported once")
    func failingTwice() async throws {
        let c = CountingCondition("fails", key: "fails", result: .failed(ProcedureTestError(7)))
        let procedure = try await run("failing-twice", [c, AllConditions([c, c]), c])
        #expect(procedure.willExecuteCalls.value == 0)
        #expect(errorIDs(procedure.errors) == [7])
        // The procedure keeps c and All<c> (a compound is not the same as its part).
        #expect(c.evaluations.value <= 2)
    }

    @Test("a duplicate's produced dependency is made once")
    func producedOnce() async throws {
        let c = CountingObjectCondition(produces: true)
        let procedure = try await run("produced-once", [c, c, AllConditions([c, c])])
        #expect(procedure.willExecuteCalls.value == 1)
        // Once for the top-level c, once for All<c> (a different condition).
        #expect(c.made.value == 2)
        let d = CountingObjectCondition(produces: true)
        _ = try await run("produced-once-all", [AllConditions([d, d, d])])
        #expect(d.made.value == 1)
        #expect(d.evaluations.value == 1)
    }

    @Test("copies of one compound condition are the same; compounds of different parts are not")
    func compoundIdentity() async throws {
        let a = CountingCondition("a", key: "a")
        let b = CountingCondition("b", key: "b")
        let ab = AllConditions([a, b])
        #expect(ab.identity == AllConditions([a, b]).identity)
        #expect(ab.identity != AnyCondition([a, b]).identity)
        #expect(ab.identity != AllConditions([b, a]).identity)
        #expect(NegatedCondition(a).identity != a.identity)
        #expect(AllConditions([a, CountingCondition("no identity")]).identity == nil)
        _ = try await run("compound-identity", [ab, ab, AllConditions([a, b])])
        #expect(a.evaluations.value == 1)
        #expect(b.evaluations.value == 1)
    }

    @Test("conditions without an identity, and separately made closure conditions, are never merged")
    func distinct() async throws {
        let counter = AtomicCounter()
        let plain = CountingCondition("plain", evaluations: counter)
        let closures = AtomicCounter()
        let one = ClosureCondition(name: "same name") { _ in closures.increment(); return .satisfied }
        let two = ClosureCondition(name: "same name") { _ in closures.increment(); return .satisfied }
        let procedure = try await run("distinct", [plain, plain, one, two])
        #expect(counter.value == 2)
        #expect(closures.value == 2)
        #expect(procedure.willExecuteCalls.value == 1)
        #expect(AllConditions([plain, plain]).conditions.count == 2)
    }

    @Test("a duplicate added after evaluation began is still refused as too late")
    func tooLate() async throws {
        let queue = ConcurrentOperationQueue(name: "too-late")
        let procedure = ProcedureCountingHooks(name: "too-late")
        let c = CountingObjectCondition()
        try procedure.addCondition(c)
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens())
        #expect(throws: OperationError.self) { try procedure.addCondition(c) }
    }

    @Test("a duplicate added to a cancelled procedure does nothing; the procedure finishes cancelled")
    func cancelledBefore() async throws {
        let queue = ConcurrentOperationQueue(name: "cancelled-before")
        let procedure = ProcedureCountingHooks(name: "cancelled-before")
        let c = CountingObjectCondition(produces: true)
        try procedure.addCondition(c)
        procedure.cancel()
        try? procedure.addCondition(c)
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens())
        #expect(c.evaluations.value == 0)
        #expect(c.made.value == 0)
        #expect(procedure.isCancelled)
    }

    @Test("names: a closure condition says where it was made; compounds name their parts")
    func names() {
        let made = ClosureCondition { _ in .satisfied }
        #expect(made.name.hasPrefix("ClosureCondition(ConditionIdentityTests.swift:"))
        #expect("\(made)" == made.name)
        let named = ClosureCondition(name: "signed in") { _ in .satisfied }
        #expect(AllConditions([named, NegatedCondition(named)]).name == "All<signed in, Not<signed in>>")
        #expect("\(AnyCondition([named]))" == "Any<signed in>")
        #expect(SilentCondition(named).name == "Silent<signed in>")
        #expect(!named.isMutuallyExclusive)
        #expect(MutuallyExclusive(category: "x").isMutuallyExclusive)
        #expect(ConditionIdentity.named("k").description == "named(k)")
    }

    @Test("a failed condition's name is in what the instrument is told and in NegatedCondition's error", .exclusiveInstrumentation)
    func nameInFailure() async throws {
        let named = ClosureCondition(name: "signed in") { _ in .satisfied }
        let procedure = try await run("name-in-failure", [NegatedCondition(named)])
        let error = try #require(procedure.errors.first as? OperationError)
        #expect(error.code == .conditionFailed)
        #expect("\(error)".contains("Not<signed in>"))
    }
}
