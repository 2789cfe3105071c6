import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Result injection extras (issue 16, part 4): gathered(), map/flatMap/reduce, bind(to:) and
/// bind(from:), Optional into non-optional, and the injection that also gets the producer's error.
@Suite("Result injection extras", .offThePool)
struct ResultInjectionExtrasTests {
    /// A procedure that waits at `gate` (off the pool), then finishes with `result`.
    static func gated<Output: Sendable>(
        _ name: String, _ gate: Gate, started: Latch? = nil, _ result: Result<Output, any Error>
    ) -> ClosureProcedure<Output> {
        ClosureProcedure<Output>(name: name, asynchronous: { procedure in
            started?.countDown()
            onThreadOfItsOwn {
                _ = gate.wait(timeout: procedureTimeout)
                procedure.finish(withResult: result)
            }
        })
    }

    // MARK: gathered

    @Test("gathered(): the values in the sequence's order, whatever order they finish in")
    func gatheredInOrder() async throws {
        let queue = ConcurrentOperationQueue(name: "gathered")
        let gate = Gate()
        let slow = Self.gated("slow", gate, .success("hello"))
        let fast = ClosureProcedure<String>(name: "fast") { "world" }
        let gathered = [slow, fast].gathered(name: "both")
        #expect(gathered.displayName == "both")
        #expect(Set(gathered.dependencies.map(\.displayName)) == ["slow", "fast"])
        try queue.addOperations([gathered, fast, slow], waitUntilFinished: false)
        #expect(await fast.finishes())
        #expect(!gathered.isFinished)
        gate.open()
        #expect(await gathered.finishes())
        #expect(gathered.output == ["hello", "world"])
        #expect(gathered.errors.isEmpty && !gathered.isCancelled)

        let empty = [ClosureProcedure<Int>]().gathered()
        try queue.addOperation(empty)
        #expect(await empty.finishes())
        #expect(empty.output == [])
    }

    @Test("gathered() with one failing or cancelled: cancelled with inputUnavailable naming them, never run")
    func gatheredFailing() async throws {
        let queue = ConcurrentOperationQueue(name: "gathered-failing")
        let good = ClosureProcedure<Int>(name: "good") { 1 }
        let failing = ClosureProcedure<Int>(name: "failing") { throw ProcedureTestError(7) }
        let cancelled = ClosureProcedure<Int>(name: "cancelled") { 3 }
        cancelled.cancel()
        let gathered = [good, failing, cancelled].gathered(name: "gathered")
        let onlyFailing = [good, failing].gathered(name: "only-failing")
        try queue.addOperations([gathered, onlyFailing, good, failing, cancelled], waitUntilFinished: false)
        #expect(await gathered.finishes())
        #expect(await onlyFailing.finishes())
        #expect(gathered.isCancelled && gathered.output == nil)
        let error = try #require(gathered.errors.first as? OperationError)
        #expect(error.code == .inputUnavailable)
        #expect(error.operationNames == ["gathered", "failing", "cancelled"])
        #expect(errorIDs(error.underlyingErrors) == [7])
        if case .failure = gathered.result {} else { Issue.record("gathered did not fail") }
        #expect((onlyFailing.errors.first as? OperationError)?.operationNames == ["only-failing", "failing"])
    }

    @Test("gathered() cancelled while a producer runs: finishes without gathering")
    func gatheredCancelledWhileWaiting() async throws {
        let queue = ConcurrentOperationQueue(name: "gathered-cancel")
        let gate = Gate()
        let started = Latch()
        let slow = Self.gated("slow", gate, started: started, .success(1))
        let gathered = [slow].gathered()
        try queue.addOperations([slow, gathered], waitUntilFinished: false)
        #expect(await started.opens())
        gathered.cancel()
        #expect(await gathered.finishes(), "a cancelled operation waits for no dependency")
        #expect(gathered.output == nil && gathered.isCancelled)
        gate.open()
        #expect(await slow.finishes())
    }

    // MARK: map, flatMap, reduce

    @Test("map / flatMap / reduce: TransformProcedures depending on the producer; nil and throws fail them")
    func mapFlatMapReduce() async throws {
        let queue = ConcurrentOperationQueue(name: "map")
        let text = ClosureProcedure<String>(name: "text") { "21" }
        let doubled = text.map { Int($0)! * 2 }
        let parsed = text.flatMap(name: "parsed") { Int($0) }
        let notANumber = text.flatMap(name: "nan") { Int("x" + $0) }
        let throwing = text.map(name: "throwing") { _ -> Int in throw ProcedureTestError(3) }
        let numbers = ClosureProcedure<[Int]>(name: "numbers") { [1, 2, 3, 4] }
        let sum = numbers.reduce(0) { $0 + $1 }
        let throwingReduce = numbers.reduce(name: "bad", 0) { _, _ in throw ProcedureTestError(11) }
        let emptySum = ClosureProcedure<[Int]>(name: "none") { [] }.reduce(name: "empty", 10) { $0 + $1 }
        #expect(doubled.displayName == "text.map")
        #expect(sum.displayName == "numbers.reduce")
        #expect(doubled.dependencies.first === text)
        let all: [ConcurrentOperation] = [text, doubled, parsed, notANumber, throwing, numbers, sum, throwingReduce] + emptySum.dependencies + [emptySum]
        try queue.addOperations(all, waitUntilFinished: false)
        for operation in all { #expect(await operation.finishes()) }
        #expect(doubled.output == 42)
        #expect(parsed.output == 21)
        let nilError = try #require(notANumber.errors.first as? OperationError)
        #expect(nilError.code == .noValue && nilError.operationNames == ["nan"])
        #expect(!notANumber.isCancelled, "a nil fails the transform; it does not cancel it")
        #expect(errorIDs(throwing.errors) == [3])
        #expect(sum.output == 10)
        #expect(errorIDs(throwingReduce.errors) == [11] && throwingReduce.output == nil)
        #expect(emptySum.output == 10)
    }

    @Test("gathered().reduce and .map: ProcedureKit's collection reduce and flatMap")
    func collectionReduce() async throws {
        let queue = ConcurrentOperationQueue(name: "collection-reduce")
        let hello = ClosureProcedure<String>(name: "hello") { "Hello" }
        let world = ClosureProcedure<String>(name: "world") { "World" }
        let gathered = [hello, world].gathered()
        let sentence = gathered.reduce("") { $0.isEmpty ? $1 : "\($0) \($1)" }
        let shouted = gathered.map { $0.map { $0.uppercased() } }
        try queue.addOperations([hello, world, gathered, sentence, shouted], waitUntilFinished: false)
        #expect(await sentence.finishes())
        #expect(await shouted.finishes())
        #expect(sentence.output == "Hello World")
        #expect(shouted.output == ["HELLO", "WORLD"])
    }

    @Test("map of a failed or cancelled producer: cancelled with inputUnavailable, the transform never runs")
    func mapOfFailedProducer() async throws {
        let queue = ConcurrentOperationQueue(name: "map-failed")
        let ran = AtomicCounter()
        let failing = ClosureProcedure<Int>(name: "failing") { throw ProcedureTestError(1) }
        let cancelled = ClosureProcedure<Int>(name: "cancelled") { 2 }
        cancelled.cancel()
        let fromFailing = failing.map { ran.increment(); return $0 }
        let fromCancelled = cancelled.map { ran.increment(); return $0 }
        try queue.addOperations([failing, cancelled, fromFailing, fromCancelled], waitUntilFinished: false)
        #expect(await fromFailing.finishes())
        #expect(await fromCancelled.finishes())
        #expect(ran.value == 0)
        #expect(errorCodes(fromFailing.errors) == [.inputUnavailable] && fromFailing.isCancelled)
        #expect(errorCodes(fromCancelled.errors) == [.inputUnavailable] && fromCancelled.isCancelled)
    }

    // MARK: Optional into non-optional

    @Test("Optional output into a non-optional input: a value is unwrapped, nil cancels with inputUnavailable")
    func optionalIntoNonOptional() async throws {
        let queue = ConcurrentOperationQueue(name: "optional")
        let some = ClosureProcedure<String?>(name: "some") { "Hello" }
        let none = ClosureProcedure<String?>(name: "none") { nil }
        let ran = AtomicCounter()
        let fromSome = TransformProcedure<String, String>(name: "from-some") { "\($0), World" }
        let fromNone = TransformProcedure<String, String>(name: "from-none") { ran.increment(); return $0 }
        try fromSome.injectNonNilInput(from: some)
        try fromNone.injectNonNilInput(from: none)
        let injected = Recorder<String>()
        let generic = ProcedureCountingHooks(name: "generic")
        try generic.injectNonNilResult(from: some) { consumer, value in injected.record("\(consumer.displayName) \(value)") }
        try queue.addOperations([some, none, fromSome, fromNone, generic], waitUntilFinished: false)
        #expect(await fromSome.finishes())
        #expect(await fromNone.finishes())
        #expect(await generic.finished.opens())
        #expect(fromSome.output == "Hello, World")
        #expect(ran.value == 0 && fromNone.isCancelled)
        let error = try #require(fromNone.errors.first as? OperationError)
        #expect(error.code == .inputUnavailable && error.operationNames == ["from-none", "none"])
        #expect(error.message.contains("nil"))
        #expect(injected.values == ["generic Hello"])
    }

    // MARK: injectOutcome

    @Test("injectOutcome: called with the value, the error, or cancelled/noValue; the consumer then runs")
    func injectOutcome() async throws {
        let queue = ConcurrentOperationQueue(name: "outcome")
        let value = ClosureProcedure<Int>(name: "value") { 5 }
        let failing = ClosureProcedure<Int>(name: "failing") { throw ProcedureTestError(6) }
        let cancelled = ClosureProcedure<Int>(name: "cancelled") { 7 }
        cancelled.cancel()
        let nothing = ClosureProcedure<Int>(name: "nothing", asynchronous: { $0.finish() })
        func consumer(of producer: ClosureProcedure<Int>) throws -> TransformProcedure<String, String> {
            let consumer = TransformProcedure<String, String>(name: "of-\(producer.displayName)") { $0 }
            try consumer.injectOutcome(from: producer) { consumer, outcome in
                switch outcome {
                case .success(let value): consumer.input = "value \(value)"
                case .failure(let error as OperationError): consumer.input = "\(error.code) \(error.operationNames)"
                case .failure(let error): consumer.input = "error \(errorIDs([error]))"
                }
            }
            return consumer
        }
        let consumers = try [value, failing, cancelled, nothing].map(consumer(of:))
        try queue.addOperations([value, failing, cancelled, nothing] + consumers, waitUntilFinished: false)
        for consumer in consumers { #expect(await consumer.finishes()) }
        #expect(consumers.map { $0.output ?? "-" } == [
            "value 5", "error [6]", "cancelled [\"cancelled\"]", "noValue [\"nothing\"]",
        ])
        #expect(consumers.allSatisfy { !$0.isCancelled && $0.errors.isEmpty })
    }

    @Test("injectOutcome: the block may cancel the consumer, which then does not run")
    func injectOutcomeCancels() async throws {
        let queue = ConcurrentOperationQueue(name: "outcome-cancel")
        let failing = ClosureProcedure<Int>(name: "failing") { throw ProcedureTestError(8) }
        let ran = AtomicCounter()
        let consumer = ClosureProcedure<Int>(name: "consumer") { ran.increment(); return 0 }
        try consumer.injectOutcome(from: failing) { consumer, outcome in
            if case .failure(let error) = outcome { consumer.cancel(with: error) }
        }
        try queue.addOperations([failing, consumer], waitUntilFinished: false)
        #expect(await consumer.finishes())
        #expect(ran.value == 0 && consumer.isCancelled)
        #expect(errorIDs(consumer.errors) == [8])
    }

    @Test("injectOutcome on a finished consumer: dependentAlreadyFinished, nothing added")
    func injectOutcomeTooLate() async throws {
        let queue = ConcurrentOperationQueue(name: "outcome-late")
        let producer = ClosureProcedure<Int>(name: "producer") { 1 }
        let consumer = ClosureProcedure<Int>(name: "consumer") { 2 }
        try queue.addOperation(consumer)
        #expect(await consumer.finishes())
        let error = caughtOperationError { try consumer.injectOutcome(from: producer) { _, _ in } }
        #expect(error?.code == .dependentAlreadyFinished)
        #expect(consumer.dependencies.isEmpty)
    }

    // MARK: bind

    @Test("bind(from:) and bind(to:): the consumer depends on the producer and takes its value")
    func bindBothWays() async throws {
        let queue = ConcurrentOperationQueue(name: "bind")
        let hello = ClosureProcedure<String>(name: "hello") { "Hello" }
        let world = TransformProcedure<String, String>(name: "world") { "\($0) World" }
        let dan = TransformProcedure<String, String>(name: "dan") { "\($0) Dan" }
        #expect(try hello.bind(to: world) === world)
        #expect(try dan.bind(from: hello) === dan)
        let shout = TransformProcedure<String, String>(name: "shout") { $0.uppercased() }
        try hello.bind(to: world).bind(to: shout)
        #expect(world.dependencies.first === hello && shout.dependencies.first === world)
        try queue.addOperations([hello, world, dan, shout], waitUntilFinished: false)
        for procedure in [world, dan, shout] { #expect(await procedure.finishes()) }
        #expect(world.output == "Hello World")
        #expect(dan.output == "Hello Dan")
        #expect(shout.output == "HELLO WORLD")
    }

    @Test("bind: a cancel of the producer before it runs cancels the consumer at once, with inputUnavailable")
    func bindCancelBefore() async throws {
        let producer = ClosureProcedure<Int>(name: "producer") { 1 }
        let consumer = TransformProcedure<Int, Int>(name: "consumer") { $0 }
        try producer.bind(to: consumer)
        producer.cancel(with: ProcedureTestError(9))
        #expect(await eventually { consumer.isCancelled })
        let error = try #require(consumer.errors.first as? OperationError)
        #expect(error.code == .inputUnavailable && error.operationNames == ["consumer", "producer"])
        #expect(errorIDs(error.underlyingErrors) == [9])

        // A producer cancelled before the binding: the consumer is cancelled by bind itself.
        let early = ClosureProcedure<Int>(name: "early") { 1 }
        early.cancel()
        let late = TransformProcedure<Int, Int>(name: "late") { $0 }
        try late.bind(from: early)
        #expect(late.isCancelled)
        #expect(errorCodes(late.errors) == [.inputUnavailable])
        let queue = ConcurrentOperationQueue(name: "bind-cancel-before")
        try queue.addOperations([producer, consumer, early, late], waitUntilFinished: false)
        #expect(await queue.empties())
        #expect(consumer.output == nil && late.output == nil)
    }

    @Test("bind: a cancel of the producer while it is pending cancels the consumer before the producer finishes")
    func bindCancelWhilePending() async throws {
        // The producer's queue is suspended: cancelled, it stays unfinished until the queue resumes.
        let producerQueue = ConcurrentOperationQueue(name: "bind-producer")
        producerQueue.isSuspended = true
        let consumerQueue = ConcurrentOperationQueue(name: "bind-consumer")
        let producer = ClosureProcedure<Int>(name: "producer") { 1 }
        let consumer = TransformProcedure<Int, Int>(name: "consumer") { $0 }
        try consumer.bind(from: producer)
        try producerQueue.addOperation(producer)
        try consumerQueue.addOperation(consumer)
        producer.cancel()
        #expect(await consumer.finishes(), "cancelled, it waits for no dependency")
        #expect(!producer.isFinished, "the producer's queue is suspended")
        #expect(errorCodes(consumer.errors) == [.inputUnavailable])
        producerQueue.isSuspended = false
        #expect(await producer.finishes())
    }

    @Test("bind while the producer runs: a cancel reaches the consumer when the producer finishes")
    func bindCancelWhileRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "bind-cancel-running")
        let gate = Gate()
        let started = Latch()
        let producer = Self.gated("producer", gate, started: started, Result<Int, any Error>.failure(ProcedureTestError(4)))
        try queue.addOperation(producer)
        #expect(await started.opens())
        let consumer = TransformProcedure<Int, Int>(name: "consumer") { $0 }
        try consumer.bind(from: producer)  // the observer is refused: the injection still holds
        try queue.addOperation(consumer)
        producer.cancel()
        #expect(!consumer.isCancelled)
        gate.open()
        #expect(await consumer.finishes())
        #expect(consumer.isCancelled && errorCodes(consumer.errors) == [.inputUnavailable])
        #expect(errorIDs((consumer.errors.first as? OperationError)?.underlyingErrors ?? []) == [4])
    }
}
