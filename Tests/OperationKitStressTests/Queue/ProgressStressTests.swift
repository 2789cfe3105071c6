import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// A queue's progress followed from a moment when operations are being added, reported,
    /// cancelled and finished on several threads: whatever it counted adds up in the end.
    @Suite("Stress: queue progress")
    struct ProgressStressTests {
        @Test("progress followed from the middle of a storm: complete and finished once the queue is empty")
        func followedMidway() async throws {
            let rounds = Stress.count(40)
            for round in 0..<rounds {
                let queue = ConcurrentOperationQueue(name: "progress-storm-\(round)")
                let adders = 4
                let perAdder = Stress.count(400, minimum: 20)
                let updates = ProgressUpdateCounter()
                let ran = onThreads(adders + 1, label: "progress-storm") { index in
                    if index == adders {
                        // Starts following while the others add.
                        queue.observeProgress(.everyChange) { _ in updates.increment() }
                        return
                    }
                    for item in 0..<perAdder {
                        let operation = ClosureOperation(name: "s\(index).\(item)") {}
                        if item % 5 == 0 { operation.progressWeight = 3 }
                        try? queue.addOperation(operation)
                        if item % 7 == 0 { operation.cancel() }
                        if item % 3 == 0 { operation.reportProgress(completed: 1, total: 2) }
                    }
                }
                #expect(ran)
                try? queue.addOperation(ClosureOperation(name: "last") {})
                let drained = await withCheckedContinuation { continuation in
                    DispatchQueue(label: "progress-storm.wait").async {
                        let emptied = queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout)
                        continuation.resume(returning: emptied)
                    }
                }
                #expect(drained)
                let progress = queue.progress
                #expect(progress.completed == progress.total, "round \(round): \(progress)")
                #expect(progress.isFinished, "round \(round): \(progress)")
                #expect(progress.fractionCompleted == 1, "round \(round): \(progress)")
                #expect(updates.value > 0)
            }
        }
    }
}

/// Counts progress updates, from any thread.
final class ProgressUpdateCounter: Sendable {
    private let count = Atomic<Int>(0)

    func increment() { count.add(1, ordering: .relaxed) }

    var value: Int { count.load(ordering: .relaxed) }
}
