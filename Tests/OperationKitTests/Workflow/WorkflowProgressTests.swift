import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// A workflow's aggregate progress: tasks by count or weight, an executing task's reported
/// fraction, cancelled tasks, tasks added later.
@Suite("Workflow: aggregate progress", .offThePool)
struct WorkflowProgressTests {
    @Test("by count, with an executing task's reported fraction")
    func byCount() async throws {
        let workflow = Workflow(name: "progress")
        let gate = Gate()
        let reported = Latch()
        let first = ClosureTask(name: "first") { run in
            run.reportProgress(completed: 1, total: 2)
            reported.countDown()
            DispatchQueue.global().async {
                _ = gate.wait()
                run.finish(with: nil)
            }
        }
        let second = ClosureTask(name: "second") { $0.finish(with: nil) }
        let third = ClosureTask(name: "third") { $0.finish(with: nil) }
        try workflow.add(first)
        try workflow.add(second, prerequisites: [first])
        try workflow.add(third, prerequisites: [first])
        #expect(workflow.progress == OperationProgress(completed: 0, total: 3))
        let updates = workflow.progressUpdates(.everyChange)
        workflow.start()
        #expect(await reached(reported))
        try await untilTrue { workflow.progress.fractionCompleted == 0.5 / 3 }
        gate.open()
        let values = try await awaitWithin { () -> [OperationProgress] in
            var values: [OperationProgress] = []
            for await value in updates {
                values.append(value)
                if value.isFinished { break }
            }
            return values
        }
        #expect(values.last == OperationProgress(completed: 3, total: 3, fractionCompleted: 1, isFinished: true))
        #expect(values.map(\.fractionCompleted) == values.map(\.fractionCompleted).sorted(), "never backwards")
    }

    @Test("weighted, and a task added later grows the total")
    func weightedAndLater() async throws {
        let workflow = Workflow(name: "weighted")
        let heavy = ClosureTask(name: "heavy") { $0.finish(with: nil) }
        heavy.progressWeight = 3
        try workflow.add(heavy)
        let light = ClosureTask(name: "light") { $0.finish(with: nil) }
        try workflow.add(light)
        #expect(workflow.progress == OperationProgress(completed: 0, total: 4))
        let finished = Latch()
        workflow.observeProgress(.everyChange) { progress in
            if progress.isFinished { finished.countDown() }
        }
        heavy.start()
        try await untilTrue { workflow.progress.completed == 3 }
        #expect(workflow.progress.fractionCompleted == 0.75)
        let later = ClosureTask(name: "later") { $0.finish(with: nil) }
        try workflow.add(later)
        #expect(workflow.progress == OperationProgress(completed: 3, total: 5))
        workflow.start()
        #expect(await reached(finished))
        try await untilTrue { workflow.progress.isFinished }
        #expect(workflow.progress.completed == 5)
    }

    @Test("cancelled tasks count as complete")
    func cancellation() async throws {
        let workflow = Workflow(name: "cancelled")
        let gate = Gate()
        let running = Latch()
        let first = ClosureTask(name: "first") { _ in
            running.countDown()
            _ = gate.wait()
        }
        let second = ClosureTask(name: "second") { $0.finish(with: nil) }
        try workflow.add(first)
        try workflow.add(second, prerequisites: [first])
        _ = workflow.progress
        workflow.start()
        #expect(await reached(running))
        workflow.cancel()
        gate.open()
        try await untilTrue { workflow.progress.isFinished }
        #expect(workflow.progress == OperationProgress(completed: 2, total: 2, fractionCompleted: 1, isFinished: true))
        #expect(await drained(workflow.queue))
    }

    @Test("the stream ends when the workflow is released")
    func termination() async throws {
        let updates: AsyncStream<OperationProgress>
        do {
            let workflow = Workflow(name: "released")
            updates = workflow.progressUpdates()
        }
        let values = try await awaitWithin { () -> [OperationProgress] in
            var values: [OperationProgress] = []
            for await value in updates { values.append(value) }
            return values
        }
        #expect(values == [.empty])
    }
}
