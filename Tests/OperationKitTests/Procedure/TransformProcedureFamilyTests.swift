import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

// MapProcedure, FilterProcedure, ReduceProcedure and AsyncTransformProcedure: results, thrown
// errors, missing input, injection from a producer, cancellation before and while running.

@Suite("Transform procedures: map, filter, reduce, async transform", .offThePool)
struct TransformProcedureFamilyTests {
    static let numbers = Array(0...9)

    /// A producer of the numbers 0...9, or of `error`.
    func numbersProcedure(failingWith error: (any Error)? = nil) -> ClosureProcedure<[Int]> {
        ClosureProcedure<[Int]>(name: "numbers") {
            if let error { throw error }
            return Self.numbers
        }
    }

    @Test("map, filter and reduce over an input given in the initialiser or set later")
    func results() async throws {
        let queue = ConcurrentOperationQueue(name: "transform-results")
        let map = MapProcedure<Int, Int>(name: "map", input: [0, 1, 2, 3]) { $0 * 2 }
        let filter = FilterProcedure<Int>(name: "filter", input: Self.numbers) { $0.isMultiple(of: 2) }
        let reduce = ReduceProcedure<Int, Int>(name: "reduce", initial: 0) { $0 + $1 }
        reduce.input = Self.numbers
        let empty = ReduceProcedure<Int, String>(name: "empty", input: [], initial: "start") { $0 + "\($1)" }
        let strings = MapProcedure<Int, String>(name: "strings", input: []) { "\($0)" }
        try queue.addOperations([map, filter, reduce, empty, strings], waitUntilFinished: false)
        for procedure in [map, filter, reduce, empty, strings] as [ProcedureOperation] {
            #expect(await procedure.finishes())
            #expect(procedure.errors.isEmpty && !procedure.isCancelled)
        }
        #expect(map.output == [0, 2, 4, 6])
        #expect(filter.output == [0, 2, 4, 6, 8])
        #expect(reduce.output == 45)
        #expect(empty.output == "start", "an empty input finishes with the initial value")
        #expect(strings.output == [])
        #expect(map.input == nil && reduce.input == nil, "the input is let go once the procedure ran")
    }

    @Test("a thrown error finishes the procedure with it; no later element is visited")
    func thrownErrors() async throws {
        let queue = ConcurrentOperationQueue(name: "transform-errors")
        let visited = Recorder<String>()
        let map = MapProcedure<Int, Int>(name: "map", input: Self.numbers) { element in
            visited.record("map \(element)")
            if element == 2 { throw ProcedureTestError(1) }
            return element
        }
        let filter = FilterProcedure<Int>(name: "filter", input: Self.numbers) { element in
            visited.record("filter \(element)")
            throw ProcedureTestError(2)
        }
        let reduce = ReduceProcedure<Int, Int>(name: "reduce", input: Self.numbers, initial: 0) { partial, element in
            visited.record("reduce \(element)")
            if element == 1 { throw ProcedureTestError(3) }
            return partial + element
        }
        try queue.addOperations([map, filter, reduce], waitUntilFinished: false)
        for procedure in [map, filter, reduce] as [ProcedureOperation] { #expect(await procedure.finishes()) }
        #expect(errorIDs(map.errors) == [1] && map.output == nil && !map.isCancelled)
        #expect(errorIDs(filter.errors) == [2] && filter.output == nil)
        #expect(errorIDs(reduce.errors) == [3] && reduce.output == nil)
        #expect(visited.values.filter { $0.hasPrefix("map") } == ["map 0", "map 1", "map 2"])
        #expect(visited.values.filter { $0.hasPrefix("filter") } == ["filter 0"])
        #expect(visited.values.filter { $0.hasPrefix("reduce") } == ["reduce 0", "reduce 1"])
    }

    @Test("run without an input: finished (not cancelled) with inputUnavailable, the body never runs")
    func missingInput() async throws {
        let queue = ConcurrentOperationQueue(name: "transform-missing-input")
        let ran = AtomicCounter()
        let map = MapProcedure<Int, Int>(name: "map") { ran.increment(); return $0 }
        let filter = FilterProcedure<Int>(name: "filter") { _ in ran.increment(); return true }
        let reduce = ReduceProcedure<Int, Int>(name: "reduce", initial: 0) { _, _ in ran.increment(); return 0 }
        let asyncBody = AsyncTransformProcedure<Int, Int>(name: "async") { _ in ran.increment(); return 0 }
        let callback = AsyncTransformProcedure<Int, Int>(name: "callback", callback: { _, completion in
            ran.increment()
            completion(.success(0))
        })
        let all: [ProcedureOperation] = [map, filter, reduce, asyncBody, callback]
        try queue.addOperations(all, waitUntilFinished: false)
        for procedure in all {
            #expect(await procedure.finishes())
            #expect(errorCodes(procedure.errors) == [.inputUnavailable], "\(procedure.displayName)")
            #expect(!procedure.isCancelled)
        }
        #expect(ran.value == 0)
    }

    @Test("injected from a producer of any sequence; a failed producer cancels them with inputUnavailable")
    func injection() async throws {
        let queue = ConcurrentOperationQueue(name: "transform-injection")
        let numbers = numbersProcedure()
        let map = MapProcedure<Int, Int>(name: "map") { $0 * 2 }
        let filter = FilterProcedure<Int>(name: "filter") { $0 % 3 == 0 }
        let reduce = ReduceProcedure<Int, Int>(name: "reduce", initial: 0, +)
        let range = ClosureProcedure<ClosedRange<Int>>(name: "range") { 1...4 }
        let product = ReduceProcedure<Int, Int>(name: "product", initial: 1, *)
        let async = AsyncTransformProcedure<[Int], Int>(name: "count") { $0.count }
        try map.injectInput(from: numbers)
        try filter.injectInput(from: numbers)
        try reduce.injectInput(from: numbers)
        try product.injectInput(from: range)
        try async.injectInput(from: numbers)

        let failing = numbersProcedure(failingWith: ProcedureTestError(7))
        let starved = MapProcedure<Int, Int>(name: "starved") { $0 }
        let starvedAsync = AsyncTransformProcedure<[Int], Int>(name: "starved async") { $0.count }
        try starved.injectInput(from: failing)
        try starvedAsync.injectInput(from: failing)

        let all: [ProcedureOperation] = [numbers, map, filter, reduce, range, product, async, failing, starved, starvedAsync]
        try queue.addOperations(all, waitUntilFinished: false)
        for procedure in all { #expect(await procedure.finishes()) }
        #expect(map.output == Self.numbers.map { $0 * 2 })
        #expect(filter.output == [0, 3, 6, 9])
        #expect(reduce.output == 45)
        #expect(product.output == 24)
        #expect(async.output == 10)
        for consumer in [starved, starvedAsync] as [ProcedureOperation] {
            #expect(consumer.isCancelled)
            #expect(errorCodes(consumer.errors) == [.inputUnavailable])
            #expect(errorIDs((consumer.errors.first as? OperationError)?.underlyingErrors ?? []) == [7])
        }
    }

    @Test("cancelled before it executes: finished without executing, the body never runs")
    func cancelledBeforeRunning() async throws {
        let queue = suspendedProcedureQueue("transform-cancel-before")
        let ran = AtomicCounter()
        let map = MapProcedure<Int, Int>(name: "map", input: [1]) { ran.increment(); return $0 }
        let reduce = ReduceProcedure<Int, Int>(name: "reduce", input: [1], initial: 0) { _, _ in ran.increment(); return 0 }
        let asyncBody = AsyncTransformProcedure<Int, Int>(name: "async", input: 1) { _ in ran.increment(); return 0 }
        let callback = AsyncTransformProcedure<Int, Int>(name: "callback", input: 1, callback: { _, completion in
            ran.increment()
            completion(.success(0))
        })
        let all: [ProcedureOperation] = [map, reduce, asyncBody, callback]
        try queue.addOperations(all, waitUntilFinished: false)
        for procedure in all { procedure.cancel() }
        queue.isSuspended = false
        for procedure in all {
            #expect(await procedure.finishes())
            #expect(procedure.isCancelled && procedure.errors.isEmpty)
        }
        #expect(ran.value == 0)
        #expect(map.output == nil && asyncBody.output == nil)
    }

    @Test("cancelled while mapping: stops before the next element, finishes cancelled without a value, once")
    func cancelledWhileMapping() async throws {
        let queue = ConcurrentOperationQueue(name: "transform-cancel-while")
        let started = Latch()
        let gate = Gate()
        let visited = Recorder<Int>()
        let map = MapProcedure<Int, Int>(name: "map", input: Self.numbers) { element in
            visited.record(element)
            if element == 0 {
                started.countDown()
                _ = gate.wait(timeout: procedureTimeout)
            }
            return element
        }
        let log = ProcedureEventLog()
        try map.addObserver(log.observer)
        try queue.addOperation(map)
        #expect(await started.opens())
        map.cancel()
        gate.open()
        #expect(await log.finishes())
        #expect(map.isCancelled && map.errors.isEmpty && map.output == nil)
        #expect(visited.values == [0])
        #expect(log.events.sorted() == ["didAttach", "didCancel", "didExecute", "didFinish", "willExecute", "willFinish"],
                "each event exactly once")
        #expect(log.events.last == "didFinish" || log.events.last == "didExecute")
    }
}

@Suite("AsyncTransformProcedure", .offThePool)
struct AsyncTransformProcedureTests {
    @Test("an async body: its value or thrown error finishes the procedure")
    func asyncBody() async throws {
        let queue = ConcurrentOperationQueue(name: "async-transform")
        let double = AsyncTransformProcedure<Int, Int>(name: "double", input: 21) { input in
            await Task.yield()
            return input * 2
        }
        let failing = AsyncTransformProcedure<Int, Int>(name: "failing", input: 1) { _ in
            throw ProcedureTestError(4)
        }
        try queue.addOperations([double, failing], waitUntilFinished: false)
        #expect(try await double.value == 42)
        #expect(await failing.finishes())
        #expect(errorIDs(failing.errors) == [4] && failing.output == nil)
    }

    @Test("a callback body: finished by the first call of its completion, from another thread; later calls ignored")
    func callbackBody() async throws {
        let queue = ConcurrentOperationQueue(name: "async-transform-callback")
        let later = DispatchQueue(label: "async-transform-callback.later")
        let double = AsyncTransformProcedure<Int, Int>(name: "double", input: 2, callback: { input, completion in
            later.async {
                completion(.success(input * 2))
                completion(.success(-1))
                completion(.failure(ProcedureTestError(9)))
            }
        })
        let failing = AsyncTransformProcedure<Int, Int>(name: "failing", input: 2, callback: { _, completion in
            later.async { completion(.failure(ProcedureTestError(5))) }
        })
        let log = ProcedureEventLog()
        try double.addObserver(log.observer)
        try queue.addOperations([double, failing], waitUntilFinished: false)
        #expect(await log.finishes())
        #expect(double.output == 4 && double.errors.isEmpty)
        #expect(log.events.filter { $0 == "didFinish" }.count == 1)
        #expect(await failing.finishes())
        #expect(errorIDs(failing.errors) == [5])
    }

    @Test("cancelled while its async body runs: the task is cancelled; CancellationError finishes it cancelled, not failed")
    func cancelledWhileRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "async-transform-cancel")
        let started = Latch()
        let handlerRan = Latch()
        let transform = AsyncTransformProcedure<Int, Int>(name: "slow", input: 1) { input in
            try await withTaskCancellationHandler {
                started.countDown()
                _ = await handlerRan.opens()     // until the cancel reaches the task
                try Task.checkCancellation()
                return input
            } onCancel: {
                handlerRan.countDown()
            }
        }
        let log = ProcedureEventLog()
        try transform.addObserver(log.observer)
        try queue.addOperation(transform)
        #expect(await started.opens())
        transform.cancel()
        #expect(await log.finishes())
        #expect(transform.isCancelled && transform.errors.isEmpty && transform.output == nil)
        #expect(log.events.filter { $0 == "didFinish" }.count == 1)
    }

    @Test("cancelled while its callback body runs, with finishesWhenCancelled: finishes at once; the late callback is ignored")
    func callbackCancelledWhileRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "async-transform-callback-cancel")
        let started = Latch()
        let completionBox = Recorder<AsyncTransformProcedure<Int, Int>.Completion>()
        let transform = AsyncTransformProcedure<Int, Int>(name: "slow", input: 1, callback: { _, completion in
            completionBox.record(completion)
            started.countDown()
        })
        transform.finishesWhenCancelled = true
        try queue.addOperation(transform)
        #expect(await started.opens())
        transform.cancel()
        #expect(await transform.finishes())
        completionBox.values.first?(.success(5))
        #expect(transform.isCancelled && transform.output == nil && transform.errors.isEmpty)
    }
}
