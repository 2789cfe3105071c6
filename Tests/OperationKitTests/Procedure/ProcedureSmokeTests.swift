import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

@Suite struct ProcedureSmokeTests {
    struct Failure: Error, Equatable { let id: Int }

    func eventRecorder(_ recorder: Recorder<String>, done: Latch? = nil) -> ClosureObserver {
        ClosureObserver(
            didAttach: { _ in recorder.record("attach") },
            willExecute: { _ in recorder.record("willExecute") },
            didExecute: { _ in recorder.record("didExecute") },
            didCancel: { _, e in recorder.record("didCancel \(e.map { "\($0)" } ?? "nil")") },
            didProduce: { _, _ in recorder.record("didProduce") },
            willFinish: { p, e in recorder.record("willFinish \(e.count) \(p.state)") },
            didFinish: { p, e in recorder.record("didFinish \(e.count) \(p.state)"); done?.countDown() })
    }

    @Test func runsWithSatisfiedConditionAndObserver() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let recorder = Recorder<String>()
        let done = Latch(count: 1)
        let procedure = ClosureProcedure<Int> { recorder.record("work"); return 42 }
        try procedure.addCondition(ClosureCondition { _ in .satisfied })
        try procedure.addObserver(eventRecorder(recorder, done: done))
        try queue.addOperation(procedure)
        #expect(done.wait())
        #expect(procedure.output == 42)
        #expect(recorder.values == ["attach", "willExecute", "work", "didExecute", "willFinish 0 finishing", "didFinish 0 finished"])
    }

    @Test func failedConditionCancelsWithItsError() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let recorder = Recorder<String>()
        let done = Latch(count: 1)
        let procedure = ClosureProcedure<Int> { recorder.record("work"); return 42 }
        try procedure.addCondition(ClosureCondition { _ in .failed(Failure(id: 1)) })
        try procedure.addObserver(eventRecorder(recorder, done: done))
        try queue.addOperation(procedure)
        #expect(done.wait())
        #expect(procedure.isCancelled)
        #expect(procedure.errors.count == 1)
        #expect(recorder.values == ["attach", "didCancel Failure(id: 1)", "willFinish 1 finishing", "didFinish 1 finished"])
    }

    @Test func asyncConditionAndInjection() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let producer = ClosureProcedure<Int> { 20 }
        let consumer = TransformProcedure<Int, String> { "\($0 * 2)" }
        try consumer.injectInput(from: producer)
        try consumer.addCondition(ClosureCondition { _ in .satisfied })
        let gate = Gate()
        try consumer.addCondition(AsyncCondition(gate: gate))
        try queue.addOperations([consumer, producer], waitUntilFinished: false)
        gate.open()
        consumer.waitUntilFinished()
        #expect(consumer.output == "40")
    }

    struct AsyncCondition: OperationCondition {
        let gate: Gate
        func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
            DispatchQueue.global().async { _ = gate.wait(); completion(.satisfied) }
        }
    }

    @Test func injectionFromFailedProducerCancels() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let producer = ClosureProcedure<Int> { throw Failure(id: 7) }
        let consumer = TransformProcedure<Int, String> { "\($0)" }
        try consumer.injectInput(from: producer)
        try queue.addOperations([consumer, producer], waitUntilFinished: true)
        #expect(consumer.isCancelled)
        #expect((consumer.errors.first as? OperationError)?.code == .inputUnavailable)
        #expect(consumer.output == nil)
    }

    @Test func mutualExclusionAcrossQueues() throws {
        let queues = (0..<2).map { _ in try! ConcurrentOperationQueue(name: "q", maxConcurrentOperationCount: 4) }
        let inFlight = Recorder<Int>()
        let counter = Counter()
        var all: [ProcedureOperation] = []
        for index in 0..<40 {
            let procedure = ClosureProcedure<Void> {
                let now = counter.enter()
                inFlight.record(now)
                counter.leave()
            }
            try procedure.addCondition(MutuallyExclusive(category: "x"))
            all.append(procedure)
            try queues[index % 2].addOperation(procedure)
        }
        for procedure in all { procedure.waitUntilFinished() }
        #expect(inFlight.values.count == 40)
        #expect(inFlight.values.allSatisfy { $0 == 1 })
    }

    final class Counter: @unchecked Sendable {
        let queue = DispatchQueue(label: "c")
        var value = 0
        func enter() -> Int { queue.sync { value += 1; return value } }
        func leave() { queue.sync { value -= 1 } }
    }

    @Test func cancelBeforeRunAndWhileEvaluating() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let recorder = Recorder<String>()
        let done = Latch(count: 1)
        let gate = Gate()
        let procedure = ClosureProcedure<Int> { recorder.record("work"); return 1 }
        try procedure.addCondition(AsyncCondition(gate: gate))
        try procedure.addObserver(eventRecorder(recorder, done: done))
        let evaluating = Latch(count: 1)
        try procedure.addCondition(ClosureCondition { _ in evaluating.countDown(); return .satisfied })
        try queue.addOperation(procedure)
        #expect(evaluating.wait())
        procedure.cancel()
        #expect(done.wait())
        gate.open()
        #expect(recorder.values == ["attach", "didCancel nil", "willFinish 0 finishing", "didFinish 0 finished"])
    }
}

@Suite struct GroupRetrySmokeTests {
    struct Failure: Error {}

    @Test func groupWaitsForChildrenAndProduced() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let recorder = Recorder<String>()
        let child1 = ClosureProcedure<Void> { recorder.record("child1") }
        let child2 = ClosureProcedure<Void>(asynchronous: { procedure in
            try? procedure.produce(ClosureOperation { recorder.record("produced") })
            procedure.finish(with: Failure())
        })
        let group = GroupOperation(name: "g", operations: [child1, child2])
        try group.setMaxConcurrentOperationCount(1)
        let done = Latch(count: 1)
        group.completionBlock = { recorder.record("group"); done.countDown() }
        try queue.addOperation(group)
        #expect(done.wait())
        #expect(Set(recorder.values.dropLast()) == ["child1", "produced"])
        #expect(recorder.values.last == "group")
        #expect(group.errors.count == 1)
    }

    @Test func groupCancelledBeforeRun() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let childDone = Latch(count: 2)
        let ran = Recorder<String>()
        let children = (0..<2).map { _ in
            let c = ClosureOperation { ran.record("ran") }
            c.completionBlock = { childDone.countDown() }
            return c
        }
        let group = GroupOperation(operations: children)
        group.cancel()
        try queue.addOperation(group)
        #expect(childDone.wait())
        group.waitUntilFinished()
        #expect(ran.values.isEmpty)
    }

    @Test func retryAttempts() throws {
        let queue = ConcurrentOperationQueue(name: "q")
        let attempts = Recorder<Int>()
        let retry = RetryOperation<Int>(maxAttempts: 2) { n in
            ClosureProcedure { attempts.record(n); throw Failure() }
        }
        try queue.addOperation(retry)
        retry.waitUntilFinished()
        #expect(attempts.values == [1, 2])
        #expect(retry.isFailed)

        let attempts2 = Recorder<Int>()
        let retry2 = RetryOperation<Int>(maxAttempts: 5, wait: .fixed(.milliseconds(5))) { n in
            ClosureProcedure { attempts2.record(n); if n < 3 { throw Failure() }; return n * 10 }
        }
        try queue.addOperation(retry2)
        retry2.waitUntilFinished()
        #expect(attempts2.values == [1, 2, 3])
        #expect(retry2.output == 30)
    }
}
