import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// N99 and related: the concurrency limit, measured with an atomic in-flight counter (never with
/// durations), and races between adding, cancelling and the queue's workers.
@Suite("N99. ConcurrentOperationQueue concurrency limit", .offThePool)
struct QueueConcurrencyTests {
    /// An operation that counts itself in flight while it works for a moment.
    static func metered(_ name: String, _ meter: InFlightMeter, runs: AtomicCounter) -> ClosureOperation {
        ClosureOperation(name: name) {
            meter.enter()
            usleep(1_000)  // work that takes a little time; no assertion depends on how long
            runs.increment()
            meter.leave()
        }
    }

    @Test("N99 max concurrency 1: every operation runs and never two at once")
    func serialQueue() throws {
        let queue = try ConcurrentOperationQueue(name: "N99-1", maxConcurrentOperationCount: 1)
        #expect(queue.maxConcurrentOperationCount == 1)
        let meter = InFlightMeter()
        let runs = AtomicCounter()
        let operations = (0..<40).map { Self.metered("op\($0)", meter, runs: runs) }
        try queue.addOperations(operations, waitUntilFinished: true)
        #expect(runs.value == 40)
        #expect(meter.peak == 1)
    }

    @Test("N99 max concurrency 1 holds for operations that finish after execute() returns")
    func serialQueueWithAsynchronousOperations() throws {
        let queue = try ConcurrentOperationQueue(name: "N99-async", maxConcurrentOperationCount: 1)
        let meter = InFlightMeter()
        let operations = (0..<20).map { index in
            ClosureOperation(name: "async\(index)", asynchronous: { operation in
                meter.enter()
                DispatchQueue.global().async {
                    usleep(200)  // the work takes a moment; no assertion depends on how long
                    meter.leave()
                    operation.finish()
                }
            })
        }
        try queue.addOperations(operations, waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(operations.allSatisfy { $0.isFinished })
        #expect(meter.peak == 1)
    }

    @Test("N99 max concurrency 2: two do run at once, never three")
    func twoAtOnce() throws {
        let queue = try ConcurrentOperationQueue(name: "N99-2", maxConcurrentOperationCount: 2)
        let meter = InFlightMeter()
        let runs = AtomicCounter()
        // The first two meet at a rendezvous: they can only both pass if they run together.
        let rendezvous = Latch(count: 2)
        let met = Recorder<Bool>()
        let pair = (0..<2).map { index in
            ClosureOperation(name: "pair\(index)") {
                meter.enter()
                rendezvous.countDown()
                met.record(rendezvous.wait(timeout: operationTestTimeout))
                meter.leave()
            }
        }
        let rest = (0..<40).map { Self.metered("op\($0)", meter, runs: runs) }
        try queue.addOperations(pair + rest, waitUntilFinished: true)
        #expect(met.values == [true, true])
        #expect(runs.value == 40)
        #expect(meter.peak == 2)
    }

    @Test("N setMaxConcurrentOperationCount: raising it starts a waiting operation at once")
    func raisingTheLimit() throws {
        let queue = try ConcurrentOperationQueue(name: "raise", maxConcurrentOperationCount: 1)
        let secondRan = Latch()
        let firstSawSecond = Recorder<Bool>()
        let first = ClosureOperation(name: "first") {
            firstSawSecond.record(secondRan.wait(timeout: operationTestTimeout))
        }
        let second = ClosureOperation(name: "second") { secondRan.countDown() }
        try queue.addOperations([first, second], waitUntilFinished: false)
        try queue.setMaxConcurrentOperationCount(2)
        #expect(queue.maxConcurrentOperationCount == 2)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(firstSawSecond.values == [true])
    }

    @Test("N setMaxConcurrentOperationCount: after lowering it, executing ones finish, then one at a time")
    func loweringTheLimit() throws {
        let queue = try ConcurrentOperationQueue(name: "lower", maxConcurrentOperationCount: 2)
        let meter = InFlightMeter()
        let bothRunning = Latch(count: 2)
        let gate = Gate()
        let early = (0..<2).map { index in
            ClosureOperation(name: "early\(index)") {
                meter.enter()
                bothRunning.countDown()
                _ = gate.wait(timeout: operationTestTimeout)
                meter.leave()
            }
        }
        try queue.addOperations(early, waitUntilFinished: false)
        #expect(bothRunning.wait(timeout: operationTestTimeout))
        try queue.setMaxConcurrentOperationCount(1)
        let seenInFlight = Recorder<Int>()
        let late = (0..<10).map { index in
            ClosureOperation(name: "late\(index)") {
                seenInFlight.record(meter.enter())
                usleep(200)
                meter.leave()
            }
        }
        try queue.addOperations(late, waitUntilFinished: false)
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(seenInFlight.values == Array(repeating: 1, count: 10))
    }

    @Test("N99 max concurrency 1 holds when an operation runs at its own quality of service")
    func serialQueueWithOwnQualityOfService() throws {
        let queue = try ConcurrentOperationQueue(name: "serial-qos", maxConcurrentOperationCount: 1)
        let meter = InFlightMeter()
        let runs = AtomicCounter()
        let operations = (0..<10).map { index in
            let operation = Self.metered("q\(index)", meter, runs: runs)
            if index.isMultiple(of: 2) { operation.qualityOfService = .utility }
            return operation
        }
        try queue.addOperations(operations, waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(runs.value == 10)
        #expect(meter.peak == 1)
    }

    @Test("N operations added from many threads at once each run exactly once")
    func concurrentAdds() throws {
        let queue = try ConcurrentOperationQueue(name: "concurrent adds", maxConcurrentOperationCount: 4)
        let runs = AtomicCounter()
        let completions = AtomicCounter()
        let refused = AtomicCounter()
        DispatchQueue.concurrentPerform(iterations: 200) { index in
            let operation = ClosureOperation(name: "add\(index)") { runs.increment() }
            operation.completionBlock = { completions.increment() }
            if index.isMultiple(of: 50) { queue.isSuspended = index.isMultiple(of: 100) }
            if caughtOperationError({ try queue.addOperation(operation) }) != nil { refused.increment() }
        }
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(refused.value == 0)
        #expect(runs.value == 200)
        #expect(completions.value == 200)
        #expect(queue.operationCount == 0)
    }

    @Test("C cancel racing with the queue: every operation finishes once; uncancelled ones run once")
    func cancelRacingWithQueue() throws {
        let queue = try ConcurrentOperationQueue(name: "cancel race", maxConcurrentOperationCount: 2)
        let completions = AtomicCounter()
        let runs = (0..<300).map { _ in AtomicCounter() }
        let operations = (0..<300).map { index in
            let operation = ClosureOperation(name: "r\(index)") { runs[index].increment() }
            operation.completionBlock = { completions.increment() }
            return operation
        }
        for index in stride(from: 1, to: operations.count, by: 2) {
            try operations[index].addDependency(operations[index - 1])
        }
        try queue.addOperations(operations, waitUntilFinished: false)
        DispatchQueue.concurrentPerform(iterations: 2) { worker in
            for index in stride(from: worker * 3, to: operations.count, by: 6) { operations[index].cancel() }
        }
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(operations.allSatisfy { $0.isFinished })
        #expect(completions.value == 300)
        #expect(runs.allSatisfy { $0.value <= 1 })
        let uncancelled = operations.indices.filter { !operations[$0].isCancelled }
        #expect(uncancelled.allSatisfy { runs[$0].value == 1 })
    }
}
