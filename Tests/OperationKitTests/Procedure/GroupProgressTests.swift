import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// A group's aggregate progress (its children's), its stream ending with the group, and its share
/// in the progress of the queue it runs on.
@Suite("Procedure: group progress", .offThePool)
struct GroupProgressTests {
    @Test("the children's aggregate; the stream ends after the final update once the group finishes")
    func children() async throws {
        let children = (0..<4).map { index in ClosureOperation(name: "child\(index)") {} }
        let group = try GroupOperation(name: "group", operations: children)
        #expect(group.childrenProgress == OperationProgress(completed: 0, total: 4))
        #expect(group.progress == group.childrenProgress)
        let updates = group.progressUpdates(.everyChange)
        let queue = ConcurrentOperationQueue(name: "group-progress")
        try queue.addOperation(group)
        let values = try await awaitWithin { () -> [OperationProgress] in
            var values: [OperationProgress] = []
            for await value in updates { values.append(value) }  // ends with the group
            return values
        }
        #expect(values.first == OperationProgress(completed: 0, total: 4))
        #expect(values.map(\.completed) == [0, 1, 2, 3, 4])
        #expect(values.last?.isFinished == true)
        #expect(values.filter(\.isFinished).count == 1)
        #expect(group.progress == OperationProgress(completed: 4, total: 4, fractionCompleted: 1, isFinished: true))
    }

    @Test("children added later grow the total; a handler gets the final update")
    func addedLater() async throws {
        let gate = Gate()
        let first = ClosureOperation(name: "first") { _ = gate.wait() }
        let group = try GroupOperation(name: "growing", operations: [first])
        let finished = Latch()
        let recorded = Recorder<OperationProgress>()
        group.observeProgress(.everyChange) { progress in
            recorded.record(progress)
            if progress.isFinished { finished.countDown() }
        }
        let queue = ConcurrentOperationQueue(name: "group-growing")
        try queue.addOperation(group)
        try group.addChildren([ClosureOperation(name: "second") {}, ClosureOperation(name: "third") {}])
        try await untilTrue { group.childrenProgress.total == 3 }
        gate.open()
        #expect(await opened(finished))
        #expect(recorded.values.last == OperationProgress(
            completed: 3, total: 3, fractionCompleted: 1, isFinished: true))
    }

    @Test("in its queue's progress, a running group counts with its children's fraction")
    func nested() async throws {
        let queue = ConcurrentOperationQueue(name: "outer-progress")
        _ = queue.progress  // the queue follows progress before the group comes
        let gate = Gate()
        let quick = ClosureOperation(name: "quick") {}
        let slow = ClosureOperation(name: "slow") { _ = gate.wait() }
        let group = try GroupOperation(name: "nested", operations: [quick, slow])
        try queue.addOperation(group)
        try await untilTrue { group.childrenProgress.completed == 1 }
        try await untilTrue { queue.progress.fractionCompleted == 0.5 }
        #expect(queue.progress.completed == 0 && queue.progress.total == 1)
        gate.open()
        try await untilTrue { queue.progress.isFinished }
        #expect(queue.progress == OperationProgress(completed: 1, total: 1, fractionCompleted: 1, isFinished: true))
    }

    @Test("a cancelled group's children count as complete")
    func cancelled() async throws {
        let children = (0..<3).map { index in ClosureOperation(name: "cancelled\(index)") {} }
        let group = try GroupOperation(name: "cancelled", operations: children)
        let updates = group.progressUpdates()
        group.cancel()
        let queue = ConcurrentOperationQueue(name: "group-cancelled")
        try queue.addOperation(group)
        let values = try await awaitWithin { () -> [OperationProgress] in
            var values: [OperationProgress] = []
            for await value in updates { values.append(value) }
            return values
        }
        #expect(values.last == OperationProgress(completed: 3, total: 3, fractionCompleted: 1, isFinished: true))
        #expect(children.allSatisfy { $0.isCancelled })
    }
}
