// Tests of conditions with dependencies of their own (OperationCondition.dependencies): they gate
// that condition only, are not queued or cancelled by it, and show in snapshots by name.

import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Condition dependencies", .offThePool)
struct ConditionDependencyTests {
    @Test("a condition's dependency finishes before the condition is evaluated")
    func dependencyFirst() async throws {
        let order = Recorder<String>()
        let gate = Gate()
        let queue = ConcurrentOperationQueue(name: "dependency-first")
        let dependency = ClosureOperation(name: "fetch token") {
            _ = gate.wait(timeout: procedureTimeout)
            order.record("dependency")
        }
        let condition = ClosureCondition(name: "has token", dependencies: [dependency]) { _ in
            order.record("condition")
            return .satisfied
        }
        let procedure = ProcedureCountingHooks(name: "upload") {
            order.record("work")
            $0.finish()
        }
        try procedure.addCondition(condition)
        #expect(condition.dependencies.count == 1)
        try queue.addOperation(dependency)
        try queue.addOperation(procedure)
        // Not evaluated while the dependency runs.
        #expect(await eventually { procedure.state == .evaluatingConditions || dependency.isExecuting })
        #expect(order.values.isEmpty)
        gate.open()
        #expect(await procedure.finished.opens())
        #expect(order.values == ["dependency", "condition", "work"])
        // The procedure itself does not depend on it.
        #expect(!procedure.dependencies.contains { $0 === dependency })
    }

    @Test("the condition does not add its dependency to a queue: it waits until someone does; the snapshot names both")
    func notQueuedByTheCondition() async throws {
        let queue = ConcurrentOperationQueue(name: "not-queued")
        let dependency = ClosureOperation(name: "warm cache") {}
        let evaluations = AtomicCounter()
        let procedure = ProcedureCountingHooks(name: "reader")
        try procedure.addCondition(ClosureCondition(name: "cache warm", dependencies: [dependency]) { _ in
            evaluations.increment()
            return .satisfied
        })
        try queue.addOperation(procedure)
        #expect(await eventually { procedure.state == .evaluatingConditions })
        let blockers = try #require(queue.snapshot().operations.first { $0.name == "reader" }).blockers
        #expect(blockers.contains(.conditionDependencies("cache warm", [OperationReference(id: ObjectIdentifier(dependency), name: "warm cache")])))
        #expect(blockers.map(\.description).contains("condition cache warm waits for: warm cache"))
        #expect(evaluations.value == 0)
        #expect(!dependency.isExecuting && !dependency.isFinished)
        try queue.addOperation(dependency)
        #expect(await procedure.finished.opens())
        #expect(evaluations.value == 1)
        #expect(procedure.willExecuteCalls.value == 1)
    }

    @Test("a failed or cancelled dependency does not stop the evaluation: the condition looks at it")
    func failedDependency() async throws {
        let queue = ConcurrentOperationQueue(name: "failed-dependency")
        let failing = ClosureProcedure<Void>(name: "login") { throw ProcedureTestError(3) }
        let cancelled = ClosureOperation(name: "prefetch") {}
        cancelled.cancel()
        let procedure = ProcedureCountingHooks(name: "sync")
        try procedure.addCondition(ClosureCondition(name: "logged in", dependencies: [failing, cancelled]) { _ in
            failing.errors.isEmpty ? .satisfied : .failed(ProcedureTestError(4))
        })
        try queue.addOperations([failing, cancelled, procedure], waitUntilFinished: false)
        #expect(await procedure.finished.opens())
        #expect(errorIDs(procedure.errors) == [4])
        #expect(procedure.willExecuteCalls.value == 0)
    }

    @Test("the procedure's other conditions may decide first: a failure does not wait for the dependency")
    func othersDecideFirst() async throws {
        let queue = ConcurrentOperationQueue(name: "others-first")
        let dependency = ClosureOperation(name: "never queued") {}
        let evaluations = AtomicCounter()
        let procedure = ProcedureCountingHooks(name: "p")
        try procedure.addCondition(ClosureCondition(name: "waits", dependencies: [dependency]) { _ in
            evaluations.increment()
            return .satisfied
        })
        try procedure.addCondition(ClosureCondition(name: "fails") { _ in .failed(ProcedureTestError(9)) })
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens())
        #expect(errorIDs(procedure.errors) == [9])
        #expect(evaluations.value == 0)
        // The condition's dependency is not cancelled with the procedure.
        #expect(!dependency.isCancelled)
    }

    @Test("cancelled before it is added: never evaluated, the dependency untouched")
    func cancelBefore() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-before")
        let dependency = ClosureOperation(name: "dependency") {}
        let evaluations = AtomicCounter()
        let procedure = ProcedureCountingHooks(name: "p")
        try procedure.addCondition(ClosureCondition(dependencies: [dependency]) { _ in
            evaluations.increment()
            return .satisfied
        })
        procedure.cancel()
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens())
        #expect(evaluations.value == 0)
        #expect(procedure.isCancelled)
        #expect(!dependency.isCancelled)
    }

    @Test("cancelled while the condition waits for its dependency: finishes at once, never evaluated")
    func cancelWhileWaiting() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-while")
        let gate = Gate()
        let dependency = ClosureOperation(name: "slow") { _ = gate.wait(timeout: procedureTimeout) }
        let evaluations = AtomicCounter()
        let procedure = ProcedureCountingHooks(name: "p")
        try procedure.addCondition(ClosureCondition(name: "after slow", dependencies: [dependency]) { _ in
            evaluations.increment()
            return .satisfied
        })
        try queue.addOperations([dependency, procedure], waitUntilFinished: false)
        #expect(await eventually { procedure.state == .evaluatingConditions })
        procedure.cancel(with: ProcedureTestError(5))
        #expect(await procedure.finished.opens())
        #expect(errorIDs(procedure.errors) == [5])
        #expect(!dependency.isCancelled)
        gate.open()
        #expect(await dependency.finishes())
        #expect(evaluations.value == 0)
        #expect(procedure.willExecuteCalls.value == 0)
    }

    @Test("a compound waits for its parts' dependencies; NegatedCondition and SilentCondition keep the inner's")
    func compoundDependencies() async throws {
        let queue = ConcurrentOperationQueue(name: "compound")
        let order = Recorder<String>()
        let first = ClosureOperation(name: "first") { order.record("first") }
        let second = ClosureOperation(name: "second") { order.record("second") }
        let a = ClosureCondition(name: "a", dependencies: [first]) { _ in order.record("a"); return .satisfied }
        let b = ClosureCondition(name: "b", dependencies: [second, first]) { _ in order.record("b"); return .failed(ProcedureTestError(1)) }
        let all = AllConditions([a, NegatedCondition(b), SilentCondition(a)])
        #expect(all.dependencies.map(\.displayName) == ["first", "second"])
        let procedure = ProcedureCountingHooks(name: "p")
        try procedure.addCondition(all)
        try queue.addOperation(procedure)
        try queue.addOperations([second, first], waitUntilFinished: false)
        #expect(await procedure.finished.opens())
        #expect(procedure.willExecuteCalls.value == 1)
        let values = order.values
        #expect(Set(values.prefix(2)) == ["first", "second"])
        #expect(Set(values.dropFirst(2)) == ["a", "b"])
    }

    @Test("a class condition with a produced and an own dependency waits for both")
    func producedAndOwn() async throws {
        final class Both: OperationCondition, Sendable {
            let own: ConcurrentOperation
            let recorder: Recorder<String>
            init(own: ConcurrentOperation, recorder: Recorder<String>) {
                self.own = own
                self.recorder = recorder
            }
            var dependencies: [ConcurrentOperation] { [own] }
            func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
                ClosureOperation(name: "produced") { self.recorder.record("produced") }
            }
            func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
                recorder.record("evaluate")
                completion(.satisfied)
            }
        }
        let queue = ConcurrentOperationQueue(name: "both")
        let recorder = Recorder<String>()
        let gate = Gate()
        let own = ClosureOperation(name: "own") {
            _ = gate.wait(timeout: procedureTimeout)
            recorder.record("own")
        }
        let procedure = ProcedureCountingHooks(name: "p")
        try procedure.addCondition(Both(own: own, recorder: recorder))
        try queue.addOperations([own, procedure], waitUntilFinished: false)
        #expect(await eventually { recorder.values == ["produced"] })
        gate.open()
        #expect(await procedure.finished.opens())
        #expect(recorder.values == ["produced", "own", "evaluate"])
    }

    @Test("the procedure and its condition share a dependency; another procedure's condition waits for the same one")
    func sharedDependency() async throws {
        let queue = ConcurrentOperationQueue(name: "shared")
        let dependency = ClosureProcedure<Void>(name: "dependency") {}
        let first = ProcedureCountingHooks(name: "first")
        try first.addDependency(dependency)
        try first.addCondition(ClosureCondition(name: "one", dependencies: [dependency]) { _ in .satisfied })
        let second = ProcedureCountingHooks(name: "second")
        try second.addDependency(first)
        try second.addCondition(ClosureCondition(name: "two", dependencies: [dependency]) { _ in .satisfied })
        try queue.addOperations([second, first, dependency], waitUntilFinished: false)
        #expect(await second.finished.opens())
        #expect(first.willExecuteCalls.value == 1)
        #expect(second.willExecuteCalls.value == 1)
    }

    @Test("a condition that lists its own procedure among its dependencies is refused")
    func selfDependency() throws {
        let procedure = ProcedureCountingHooks(name: "p")
        let condition = ClosureCondition(name: "loop", dependencies: [procedure]) { _ in .satisfied }
        let error = #expect(throws: OperationError.self) { try procedure.addCondition(condition) }
        #expect(error?.code == .selfDependency)
        #expect(procedure.conditionCount == 0)
    }
}
