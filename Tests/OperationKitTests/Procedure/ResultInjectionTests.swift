import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// G61, D44: typed results (ResultProcedure, ClosureProcedure, TransformProcedure) and result
/// injection between procedures, including that injection leaves no retain cycle.
@Suite("G61/D44 Typed results and result injection", .offThePool)
struct ResultInjectionTests {
    /// A ResultProcedure whose work is a closure handed the procedure.
    final class Producer<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
        // `work` is set in init and only read.
        private let work: @Sendable (Producer<Output>) -> Void
        init(name: String, _ work: @escaping @Sendable (Producer<Output>) -> Void) {
            self.work = work
            super.init(name: name)
        }
        override func execute() { work(self) }
    }

    /// Describes a result for comparison: "value <v>", "error <ids>", or "nil".
    func describe<Output>(_ result: Result<Output, any Error>?) -> String {
        switch result {
        case .success(let value): "value \(value)"
        case .failure(let error): "error \(errorIDs([error]))"
        case nil: "nil"
        }
    }

    @Test("outputs of every shape: () from a ClosureProcedure<Void> and from finish(withValue: ()), a nil Optional, a large value")
    func outputShapes() async throws {
        struct Large: Equatable { var a = 1, b = 2, c = 3, d = 4, e = 5 }
        let queue = ConcurrentOperationQueue(name: "output-shapes")
        let closureVoid = ClosureProcedure<Void>(name: "closure-void") {}
        let valueVoid = Producer<Void>(name: "value-void") { $0.finish(withValue: ()) }
        let nilOptional = Producer<Int?>(name: "nil-optional") { $0.finish(withValue: nil) }
        let large = ClosureProcedure<Large>(name: "large") { Large() }
        #expect(closureVoid.output == nil && valueVoid.result == nil, "nothing before they finished")
        let all: [ConcurrentOperation] = [closureVoid, valueVoid, nilOptional, large]
        try queue.addOperations(all, waitUntilFinished: false)
        for operation in all { try await operation.finished(within: .seconds(30)) }
        #expect(closureVoid.output != nil && describe(closureVoid.result) == "value ()")
        #expect(valueVoid.output != nil && describe(valueVoid.result) == "value ()")
        #expect(nilOptional.output == .some(nil), "a nil Optional output is still a value")
        #expect(large.output == Large())
    }

    @Test("finish(withValue:), finish(with:), finish(), finish(withResult:): output and result")
    func finishing() async throws {
        let queue = ConcurrentOperationQueue(name: "results")
        let value = Producer<Int>(name: "value") { $0.finish(withValue: 1) }
        let error = Producer<Int>(name: "error") { $0.finish(with: ProcedureTestError(2)) }
        let nothing = Producer<Int>(name: "nothing") { $0.finish() }
        let success = Producer<Int>(name: "success") { $0.finish(withResult: .success(4)) }
        let failure = Producer<Int>(name: "failure") { $0.finish(withResult: .failure(ProcedureTestError(5))) }
        #expect(value.result == nil && value.output == nil, "nothing before it finished")
        let all = [value, error, nothing, success, failure]
        try queue.addOperations(all, waitUntilFinished: false)
        for procedure in all { #expect(await procedure.finishes()) }
        #expect(all.map { describe($0.result) } == ["value 1", "error [2]", "nil", "value 4", "error [5]"])
        #expect(all.map { $0.output.map(String.init) ?? "nil" } == ["1", "nil", "nil", "4", "nil"])
        #expect(all.map(\.isFailed) == [false, true, false, false, true])
    }

    @Test("only the first finish sets the value")
    func valueSetOnce() async throws {
        let queue = ConcurrentOperationQueue(name: "value-once")
        let procedure = Producer<Int>(name: "once") { procedure in
            procedure.finish(withValue: 1)
            procedure.finish(withValue: 2)
        }
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(procedure.output == 1)
    }

    @Test("G61 value and error callbacks map to a did-finish observer reading result: exactly one of them")
    func valueOrErrorCallback() async throws {
        let queue = ConcurrentOperationQueue(name: "G61")
        let values = Recorder<String>()
        let errors = Recorder<String>()
        let done = Latch(count: 2)
        // OD's onValue / onError: a did-finish observer that switches on `result`.
        func callbacks() -> ClosureObserver {
            ClosureObserver(didFinish: { procedure, _ in
                switch (procedure as? ClosureProcedure<Int>)?.result {
                case .success(let value): values.record("\(procedure.displayName) \(value)")
                case .failure(let error): errors.record("\(procedure.displayName) \(error)")
                case nil: break
                }
                done.countDown()
            })
        }
        let succeeding = ClosureProcedure<Int>(name: "succeeding") { 61 }
        let throwing = ClosureProcedure<Int>(name: "throwing") { throw ProcedureTestError(61) }
        try succeeding.addObserver(callbacks())
        try throwing.addObserver(callbacks())
        try queue.addOperations([succeeding, throwing], waitUntilFinished: false)
        #expect(await done.opens())
        #expect(values.values == ["succeeding 61"])
        #expect(errors.values == ["throwing E61"])
    }

    @Test("ClosureProcedure: synchronous, asynchronous from another thread, throwing")
    func closureProcedure() async throws {
        let queue = ConcurrentOperationQueue(name: "closure-procedure")
        let synchronous = ClosureProcedure<String>(name: "sync") { "s" }
        let gate = Gate()
        let started = Latch()
        let asynchronous = ClosureProcedure<String>(name: "async", asynchronous: { procedure in
            started.countDown()
            onThreadOfItsOwn {
                _ = gate.wait(timeout: procedureTimeout)
                procedure.finish(withValue: "a")
            }
        })
        let throwing = ClosureProcedure<String>(name: "throwing") { throw ProcedureTestError(3) }
        try queue.addOperations([synchronous, asynchronous, throwing], waitUntilFinished: false)
        // Looked at as soon as its body has started (the longer the test waits before looking,
        // the likelier a starved machine lets the gate's bounded wait run out first).
        #expect(await started.opens())
        #expect(!asynchronous.isFinished)
        #expect(asynchronous.state == .executing)
        #expect(await synchronous.finishes())
        #expect(await throwing.finishes())
        gate.open()
        #expect(await asynchronous.finishes())
        let results = [synchronous, asynchronous, throwing].map { describe($0.result) }
        #expect(results == ["value s", "value a", "error [3]"])
    }

    @Test("a cancelled ClosureProcedure never runs its closure and has no result")
    func cancelledClosureProcedure() async throws {
        let queue = ConcurrentOperationQueue(name: "closure-cancelled")
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Int>(name: "cancelled") { ran.increment(); return 1 }
        procedure.cancel()
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(ran.value == 0 && procedure.result == nil)
    }

    @Test("a ClosureProcedure releases its closure once it has finished, whether it ran or was cancelled")
    func closureReleased() async throws {
        final class Captured: Sendable {}
        let queue = ConcurrentOperationQueue(name: "closure-released")
        weak var ranCapture: Captured?
        weak var cancelledCapture: Captured?
        var procedures: [ClosureProcedure<Int>] = []
        do {
            let forRun = Captured()
            let forCancelled = Captured()
            ranCapture = forRun
            cancelledCapture = forCancelled
            procedures.append(ClosureProcedure<Int>(name: "ran") { withExtendedLifetime(forRun) { 1 } })
            procedures.append(ClosureProcedure<Int>(name: "cancelled") { withExtendedLifetime(forCancelled) { 2 } })
        }
        procedures[1].cancel()
        try queue.addOperations(procedures, waitUntilFinished: false)
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(await eventually(within: .seconds(5)) { ranCapture == nil && cancelledCapture == nil })
        #expect(procedures[0].output == 1)
    }

    @Test("TransformProcedure: input at init → output; thrown error → failure; no input → inputUnavailable")
    func transform() async throws {
        let queue = ConcurrentOperationQueue(name: "transform")
        let doubled = TransformProcedure<Int, Int>(name: "doubled", input: 21) { $0 * 2 }
        let throwing = TransformProcedure<Int, Int>(name: "throwing", input: 1) { _ in throw ProcedureTestError(4) }
        let missing = TransformProcedure<Int, Int>(name: "missing") { $0 }
        #expect(doubled.input == 21)
        try queue.addOperations([doubled, throwing, missing], waitUntilFinished: false)
        for procedure in [doubled, throwing, missing] { #expect(await procedure.finishes()) }
        #expect(doubled.output == 42)
        #expect(doubled.input == nil, "the input is released once used")
        #expect(errorIDs(throwing.errors) == [4])
        #expect(errorCodes(missing.errors) == [.inputUnavailable])
        #expect(!missing.isCancelled, "a missing input fails the transform; it does not cancel it")
    }

    @Test("D44 injection from a successful producer: the consumer depends on it and runs with its value")
    func injectionSucceeds() async throws {
        let queue = ConcurrentOperationQueue(name: "D44")
        let producer = ClosureProcedure<Int>(name: "producer") { 20 }
        let consumer = TransformProcedure<Int, String>(name: "consumer") { "\($0 * 2)" }
        try consumer.injectInput(from: producer)
        #expect(consumer.dependencies.contains { $0 === producer })
        try queue.addOperations([consumer, producer], waitUntilFinished: false)
        #expect(await consumer.finishes())
        #expect(consumer.output == "40")
        #expect(consumer.errors.isEmpty && !consumer.isCancelled)
    }

    @Test("D44 injectResult into any procedure: the closure gets the consumer with its own type")
    func injectResultTyped() async throws {
        let queue = ConcurrentOperationQueue(name: "D44-typed")
        let producer = ClosureProcedure<String>(name: "producer") { "hello" }
        let consumer = ProcedureCountingHooks(name: "consumer")
        let injected = Recorder<String>()
        try consumer.injectResult(from: producer) { consumer, value in
            // `consumer` is a ProcedureCountingHooks: its own members are reachable.
            injected.record("\(consumer.displayName) \(value) executed:\(consumer.willExecuteCalls.value)")
        }
        try queue.addOperations([producer, consumer], waitUntilFinished: false)
        #expect(await consumer.finished.opens())
        #expect(injected.values == ["consumer hello executed:0"])
        #expect(consumer.willExecuteCalls.value == 1)
    }

    @Test("D44 the value is injected before the consumer's conditions are evaluated, whatever their order")
    func injectedBeforeConditions() async throws {
        let queue = ConcurrentOperationQueue(name: "D44-conditions")
        let producer = ClosureProcedure<Int>(name: "producer") { 7 }
        let seen = Recorder<String>()
        let before = TransformProcedure<Int, Int>(name: "condition-first") { $0 }
        try before.addCondition(ClosureCondition { procedure in
            seen.record("first: \((procedure as? TransformProcedure<Int, Int>)?.input.map(String.init) ?? "nil")")
            return .satisfied
        })
        try before.injectInput(from: producer)
        let after = TransformProcedure<Int, Int>(name: "injection-first") { $0 }
        try after.injectInput(from: producer)
        try after.addCondition(ClosureCondition { procedure in
            seen.record("second: \((procedure as? TransformProcedure<Int, Int>)?.input.map(String.init) ?? "nil")")
            return .satisfied
        })
        try queue.addOperations([producer, before, after], waitUntilFinished: false)
        #expect(await before.finishes())
        #expect(await after.finishes())
        #expect(Set(seen.values) == ["first: 7", "second: 7"])
        #expect(before.output == 7 && after.output == 7)
    }

    enum ProducerOutcome: String, CaseIterable, Sendable {
        case failed, cancelled, valueless
    }

    @Test("D44 a failed, cancelled or value-less producer: the consumer is cancelled (inputUnavailable), not run",
          arguments: ProducerOutcome.allCases)
    func injectionUnavailable(_ outcome: ProducerOutcome) async throws {
        let queue = ConcurrentOperationQueue(name: "D44-unavailable")
        let producer = Producer<Int>(name: "producer") { procedure in
            switch outcome {
            case .failed: procedure.finish(with: ProcedureTestError(44))
            case .cancelled, .valueless: procedure.finish()
            }
        }
        if outcome == .cancelled { producer.cancel() }
        let ran = AtomicCounter()
        let injected = AtomicCounter()
        let consumer = ClosureProcedure<Void>(name: "consumer") { ran.increment() }
        try consumer.injectResult(from: producer) { _, _ in injected.increment() }
        let log = ProcedureEventLog()
        try consumer.addObserver(log.observer)
        try queue.addOperations([producer, consumer], waitUntilFinished: false)
        #expect(await log.finishes())
        #expect(ran.value == 0 && injected.value == 0)
        #expect(consumer.isCancelled)
        let error = try #require(consumer.errors.first as? OperationError)
        #expect(consumer.errors.count == 1)
        #expect(error.code == .inputUnavailable)
        #expect(error.operationNames == ["consumer", "producer"])
        #expect(errorIDs(error.underlyingErrors) == (outcome == .failed ? [44] : []))
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
    }

    @Test("injection makes no retain cycle: producer and consumer are released once finished")
    func noRetainCycle() async throws {
        let queue = ConcurrentOperationQueue(name: "no-cycle")
        weak var weakProducer: ClosureProcedure<Int>?
        weak var weakConsumer: TransformProcedure<Int, Int>?
        do {
            let producer = ClosureProcedure<Int>(name: "producer") { 1 }
            let consumer = TransformProcedure<Int, Int>(name: "consumer") { $0 + 1 }
            try consumer.injectInput(from: producer)
            weakProducer = producer
            weakConsumer = consumer
            try queue.addOperations([consumer, producer], waitUntilFinished: false)
        }
        #expect(await queue.empties())
        // The worker that finished the consumer may still be leaving its did-finish step.
        let released = await eventually(within: .seconds(5)) { weakProducer == nil && weakConsumer == nil }
        #expect(released, "producer or consumer leaked")
    }

    @Test("injection into a consumer whose producer never runs: the consumer is released with it")
    func noRetainCycleWithoutRunning() {
        weak var weakProducer: ClosureProcedure<Int>?
        weak var weakConsumer: TransformProcedure<Int, Int>?
        do {
            let producer = ClosureProcedure<Int>(name: "producer") { 1 }
            let consumer = TransformProcedure<Int, Int>(name: "consumer") { $0 + 1 }
            try? consumer.injectInput(from: producer)
            weakProducer = producer
            weakConsumer = consumer
        }
        #expect(weakProducer == nil && weakConsumer == nil)
    }
}
