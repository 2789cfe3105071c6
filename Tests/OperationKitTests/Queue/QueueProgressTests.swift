import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// A queue's aggregate progress: by count, weighted, with a set total; reported fractions of
/// running operations; coalesced and every-change updates; streams and handlers ending.
@Suite("Queue: aggregate progress", .offThePool)
struct QueueProgressTests {
    /// Collects a stream's values until one is finished (or the stream ends).
    static func untilFinished(_ stream: AsyncStream<OperationProgress>) async throws -> [OperationProgress] {
        try await awaitWithin {
            var values: [OperationProgress] = []
            for await value in stream {
                values.append(value)
                if value.isFinished { break }
            }
            return values
        }
    }

    /// An operation that reports `fraction` of 100 units, then waits for `gate` before finishing.
    final class ReportingOperation: ConcurrentOperation, @unchecked Sendable {
        // Immutable after init; the gate and latch synchronise themselves.
        let units: Int64
        let gate: Gate
        let reported = Latch()

        init(name: String, units: Int64, gate: Gate) {
            self.units = units
            self.gate = gate
            super.init(name: name)
        }

        override func execute() {
            reportProgress(completed: units, total: 100)
            reported.countDown()
            DispatchQueue.global().async {
                _ = self.gate.wait()
                self.finish()
            }
        }
    }

    @Test("nobody asked: the queue has no tracker and no listener; operations that never report have no entry")
    func zeroCost() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-unasked")
        let operations = (0..<10).map { index in ClosureOperation(name: "quiet\(index)") {} }
        try queue.addOperations(operations, waitUntilFinished: false)
        await queue.waitUntilAllOperationsAreFinished()
        #expect(queue.lock.withLock { queue._progressTracker == nil })
        let listenedBefore = queue.hasListeners.load(ordering: .acquiring)
        #expect(!listenedBefore)
        // Followed: still no entry for operations that never report.
        _ = queue.progress
        let listenedAfter = queue.hasListeners.load(ordering: .acquiring)
        #expect(listenedAfter)
        let followed = (0..<10).map { index in ClosureOperation(name: "followed\(index)") {} }
        try queue.addOperations(followed, waitUntilFinished: false)
        await queue.waitUntilAllOperationsAreFinished()
        #expect((operations + followed).allSatisfy { !ReportedProgressTable.hasEntry(for: ObjectIdentifier($0)) })
        #expect(queue.progress.completed == 10)
    }

    @Test("by count: each operation one unit, complete once finished")
    func byCount() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-count")
        queue.isSuspended = true
        #expect(queue.progress == .empty)
        let operations = (0..<4).map { index in ClosureOperation(name: "op\(index)") {} }
        try queue.addOperations(operations, waitUntilFinished: false)
        #expect(queue.progress == OperationProgress(completed: 0, total: 4))
        let updates = queue.progressUpdates()
        queue.isSuspended = false
        let values = try await Self.untilFinished(updates)
        #expect(values.last == OperationProgress(completed: 4, total: 4, fractionCompleted: 1, isFinished: true))
        #expect(values.filter(\.isFinished).count == 1)
    }

    @Test("a running operation counts with the fraction it reported")
    func runningFraction() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-running")
        _ = queue.progress  // follow from the start
        let gate = Gate()
        let running = ReportingOperation(name: "running", units: 50, gate: gate)
        let after = ClosureOperation(name: "after") {}
        try after.addDependency(running)
        try queue.addOperations([running, after], waitUntilFinished: false)
        #expect(await opened(running.reported))
        try await untilTrue { queue.progress.fractionCompleted == 0.25 }
        #expect(queue.progress.completed == 0 && queue.progress.total == 2)
        gate.open()
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress == OperationProgress(completed: 2, total: 2, fractionCompleted: 1, isFinished: true))
    }

    @Test("progress reported from many threads while the operation runs: the queue ends with the last report")
    func manyThreadsInQueue() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-threads")
        _ = queue.progress
        let operation = ManuallyFinishedOperation(name: "reported")
        try queue.addOperation(operation)
        #expect(await opened(operation.executed))
        let threads = 4
        let reports = 500
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            BlockingWaits.run {
                DispatchQueue.concurrentPerform(iterations: threads) { thread in
                    for index in 1...reports {
                        operation.reportProgress(completed: Int64(thread * reports + index), total: 10_000)
                    }
                }
                continuation.resume()
            }
        }
        operation.reportProgress(completed: 7_500, total: 10_000)
        #expect(queue.progress.fractionCompleted == 0.75)
        operation.finish()
        try await untilTrue { queue.progress.isFinished }
    }

    @Test("weighted: an operation counts for its progress weight")
    func weighted() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-weighted")
        _ = queue.progress
        let heavy = ManuallyFinishedOperation(name: "heavy")
        let light = ManuallyFinishedOperation(name: "light")
        try queue.addOperation(heavy, progressWeight: 3)
        try queue.addOperation(light)
        #expect(queue.progress == OperationProgress(completed: 0, total: 4))
        #expect(await opened(heavy.executed))
        heavy.reportProgress(completed: 1, total: 2)
        #expect(queue.progress.fractionCompleted == 1.5 / 4)
        heavy.finish()
        try await untilTrue { queue.progress.completed == 3 }
        #expect(queue.progress.fractionCompleted == 3.0 / 4)
        #expect(await opened(light.executed))
        light.finish()
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress.completed == 4)
    }

    @Test("a set total: finished operations fill it up; adding does not grow it")
    func totalUnitCount() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-total")
        queue.progressTotalUnitCount = 6
        #expect(queue.progressTotalUnitCount == 6)
        try queue.addOperations((0..<3).map { _ in ClosureOperation {} }, waitUntilFinished: false)
        try await untilTrue { queue.progress.completed == 3 }
        #expect(queue.progress == OperationProgress(completed: 3, total: 6))
        try queue.addOperations((0..<3).map { _ in ClosureOperation {} }, waitUntilFinished: false)
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress == OperationProgress(completed: 6, total: 6, fractionCompleted: 1, isFinished: true))
    }

    @Test("operations added later grow the total")
    func addedLater() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-later")
        _ = queue.progress
        try queue.addOperations((0..<2).map { _ in ClosureOperation {} }, waitUntilFinished: false)
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress.total == 2)
        queue.isSuspended = true
        try queue.addOperations((0..<3).map { _ in ClosureOperation {} }, waitUntilFinished: false)
        #expect(queue.progress == OperationProgress(completed: 2, total: 5))
        queue.isSuspended = false
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress.completed == 5)
    }

    @Test("operations the queue held before progress was asked for are counted")
    func heldBefore() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-seeded")
        queue.isSuspended = true
        try queue.addOperations((0..<3).map { _ in ClosureOperation {} }, waitUntilFinished: false)
        #expect(queue.progress == OperationProgress(completed: 0, total: 3))
        queue.isSuspended = false
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress.completed == 3)
    }

    @Test("a cancelled operation counts as complete")
    func cancellation() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-cancel")
        queue.isSuspended = true
        let operations = (0..<3).map { index in ClosureOperation(name: "c\(index)") {} }
        try queue.addOperations(operations, waitUntilFinished: false)
        _ = queue.progress
        queue.cancelAllOperations()
        queue.isSuspended = false
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress == OperationProgress(completed: 3, total: 3, fractionCompleted: 1, isFinished: true))
        #expect(operations.allSatisfy { $0.isCancelled })
        #expect(operations.allSatisfy { $0.progress.isFinished })
    }

    @Test("an executing operation cancelled counts as complete before it finishes; its later reports do not undo it")
    func cancelledWhileExecuting() async throws {
        let queue = ConcurrentOperationQueue(name: "progress-cancel-executing")
        _ = queue.progress
        let operation = ManuallyFinishedOperation(name: "executing")
        try queue.addOperation(operation)
        #expect(await opened(operation.executed))
        operation.reportProgress(completed: 1, total: 4)
        #expect(queue.progress.fractionCompleted == 0.25)
        operation.cancel()
        #expect(queue.progress == OperationProgress(completed: 0, total: 1, fractionCompleted: 1))
        operation.reportProgress(completed: 2, total: 4)
        #expect(queue.progress.fractionCompleted == 1)
        #expect(!queue.progress.isFinished)
        operation.finish()
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress.completed == 1)
    }

    @Test("100,000 quick operations: far fewer updates than operations, and a final complete one")
    func coalescing() async throws {
        let count = 100_000
        let queue = ConcurrentOperationQueue(name: "progress-coalesced")
        let updates = queue.progressUpdates()
        let received = AtomicCounter()
        let handled = Latch()
        let observation = queue.observeProgress { progress in
            received.increment()
            if progress.isFinished { handled.countDown() }
        }
        try queue.addOperations((0..<count).map { _ in ClosureOperation {} }, waitUntilFinished: false)
        let values = try await Self.untilFinished(updates)
        #expect(values.last == OperationProgress(
            completed: Int64(count), total: Int64(count), fractionCompleted: 1, isFinished: true))
        // At most one per 100 ms plus the first and the final one: far fewer than one per change.
        #expect(values.count < count / 10, "\(values.count) updates")
        #expect(await opened(handled))
        #expect(received.value < count / 10, "\(received.value) handler calls")
        observation.cancel()
    }

    @Test("every change: each change arrives, in order (stream and handler)")
    func everyChange() async throws {
        let count = 200
        let queue = try ConcurrentOperationQueue(name: "progress-every", maxConcurrentOperationCount: 1)
        let updates = queue.progressUpdates(.everyChange)
        let recorded = Recorder<OperationProgress>()
        let handled = Latch()
        queue.observeProgress(.everyChange) { progress in
            recorded.record(progress)
            if progress.isFinished { handled.countDown() }
        }
        try queue.addOperations((0..<count).map { _ in ClosureOperation {} }, waitUntilFinished: false)
        // The first value, one per operation added (the total grows), one per operation finished.
        let expected = [OperationProgress.empty]
            + (1...count).map { OperationProgress(completed: 0, total: Int64($0)) }
            + (1...count).map {
                OperationProgress(
                    completed: Int64($0), total: Int64(count), fractionCompleted: $0 == count ? 1 : nil,
                    isFinished: $0 == count)
            }
        #expect(try await Self.untilFinished(updates) == expected)
        #expect(await opened(handled))
        #expect(recorded.values == expected)
    }

    @Test("streams end when the consumer stops, or when the queue is released; handlers stop when cancelled")
    func termination() async throws {
        weak var released: ProgressBroadcaster?
        let first: AsyncStream<OperationProgress>
        do {
            let queue = ConcurrentOperationQueue(name: "progress-ending")
            let broadcaster = queue.progressTracker().broadcaster
            released = broadcaster
            first = queue.progressUpdates()
            // The consumer stops: its subscriber leaves.
            try await awaitWithin { for await _ in queue.progressUpdates() { break } }
            let observation = queue.observeProgress { _ in }
            try await untilTrue { broadcaster.subscriberCount == 2 }
            observation.cancel()
            #expect(broadcaster.subscriberCount == 1)
        }
        // The queue is released (it holds no operations): the remaining stream ends.
        let values = try await awaitWithin { () -> [OperationProgress] in
            var values: [OperationProgress] = []
            for await value in first { values.append(value) }
            return values
        }
        #expect(values == [.empty])
        #expect(released == nil)
    }
}
