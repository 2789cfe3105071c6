// Regression: the conditions a procedure evaluates first (result injection) are answered before
// any other condition starts, even when a worker takes the procedure while the queue's add is
// still making their gates. (Seen once in CI as "D44 the value is injected before the
// consumer's conditions are evaluated": a ClosureCondition ran before the injected value came.)
import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// A condition that may produce a dependency (so it has a gate), whose making blocks until
/// `release` opens: the queue's add is held between linking the procedure and opening the gate.
private struct SlowToMake: OperationCondition {
    let making: Gate
    let release: Gate
    let log: Recorder<String>

    var name: String { "SlowToMake" }

    func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        making.open()
        _ = release.wait(timeout: .seconds(30))
        return nil
    }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        log.record("first")
        completion(.satisfied)
    }
}

@Suite("Conditions: the leading (injection) conditions come first", .offThePool)
struct ConditionOrderRegressionTests {
    @Test("a condition added before an injection is not started while the injection's gate is being made")
    func leadingConditionsBeforeTheOthers() throws {
        let deterministic = DeterministicQueue()
        let log = Recorder<String>()
        let making = Gate()
        let release = Gate()
        let procedure = ClosureProcedure(name: "consumer") { log.record("body") }
        try procedure.addCondition(ClosureCondition { _ in
            log.record("closure")
            return .satisfied
        })
        try procedure.addCondition(SlowToMake(making: making, release: release, log: log), first: true)
        // The add links the procedure, then makes the gate (blocked in `dependency(for:)`).
        let added = Gate()
        DispatchQueue.global().async {
            try? deterministic.addOperation(procedure)
            added.open()
        }
        #expect(making.wait(timeout: .seconds(30)))
        // A worker takes the procedure while the leading condition's gate is closed: nothing may
        // be evaluated yet.
        deterministic.runNext()
        #expect(log.values == [])
        release.open()
        #expect(added.wait(timeout: .seconds(30)))
        deterministic.runUntilIdle()
        #expect(log.values == ["first", "closure", "body"])
        #expect(procedure.isFinished && !procedure.isCancelled)
    }
}
