import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Runs `body` in a new task; returns its value, or records an issue and returns `nil` if it has
/// not returned within `timeout` (the stuck task is abandoned): a leaked continuation fails the
/// test instead of hanging it.
func asyncStressValue<Value: Sendable>(
    within timeout: Duration = Stress.timeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async throws -> Value
) async throws -> Value? {
    guard let outcome = await outcome(within: timeout, of: body) else {
        Issue.record("timed out after \(timeout)", sourceLocation: sourceLocation)
        return nil
    }
    return try outcome.get()
}

extension StressTests {
    @Suite("Async operations under load")
    struct AsyncOperations {
        @Test("10,000 async closures on a queue limited to 4 never have more than 4 in flight; all released")
        func tenThousandLimitedToFour() async throws {
            let count = Stress.count(10_000, minimum: 100)
            let queue = try ConcurrentOperationQueue(name: "async-4", maxConcurrentOperationCount: 4)
            let meter = ConcurrencyMeter()
            var weakRefs: [WeakRef] = []
            weakRefs.reserveCapacity(count)
            for index in 0..<count {
                let operation = queue.addOperation { () async -> Int in
                    meter.enter()
                    await Task.yield()  // a suspension inside the work: the slot stays held
                    meter.leave()
                    return index
                }
                weakRefs.append(WeakRef(operation))
            }
            let weakOperations = weakRefs
            let drained = try await asyncStressValue { await queue.waitUntilAllOperationsAreFinished(); return true }
            #expect(drained == true)
            #expect(meter.entered == count)
            #expect(meter.peak <= 4)
            #expect(meter.peak >= 1)
            // Each task lets go of its operation just after finishing it.
            let released = try await asyncStressValue { () async -> Bool in
                while !weakOperations.allSatisfy({ $0.isReleased }) { await Task.yield() }
                return true
            }
            #expect(released == true)
        }

        @Test("map over 10,000 items with maxConcurrent 3 on a queue of 4: order kept, never more than 3 in flight")
        func tenThousandMapped() async throws {
            let count = Stress.count(10_000, minimum: 100)
            let queue = try ConcurrentOperationQueue(name: "map-3", maxConcurrentOperationCount: 4)
            let meter = ConcurrencyMeter()
            let results = try await asyncStressValue {
                try await queue.map(0..<count, maxConcurrent: 3) { item in
                    meter.enter()
                    await Task.yield()
                    meter.leave()
                    return item
                }
            }
            #expect(results == Array(0..<count))
            #expect(meter.peak <= 3)
        }

        @Test("10,000 awaiters of 10 operations, a third of them cancelled under stopWaiting, each resumed once")
        func manyAwaitersWithCancellation() async throws {
            let count = Stress.count(10_000, minimum: 100)
            let queue = ConcurrentOperationQueue(name: "awaiters")
            queue.isSuspended = true
            let operations = (0..<10).map { index in AsyncOperation(name: "op\(index)") { () async in index } }
            try queue.addOperations(operations, waitUntilFinished: false)
            let resumed = Tally()
            let done = try await asyncStressValue { () async -> Bool in
                await withTaskGroup(of: Void.self) { group in
                    for index in 0..<count {
                        let operation = operations[index % 10]
                        group.addTask {
                            if index % 3 == 0 { withUnsafeCurrentTask { $0?.cancel() } }
                            _ = try? await operation.value(whenCancelled: .stopWaiting)
                            resumed.recordFinish(true)
                        }
                    }
                    queue.isSuspended = false
                }
                return true
            }
            #expect(done == true)
            #expect(resumed.finishWinCount == count)
        }
    }
}
