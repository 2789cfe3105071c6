import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 15 §1: `workflow.snapshot()` names what each task waits for.
@Suite("Snapshot: workflow tasks", .offThePool)
struct WorkflowSnapshotTests {
    @Test("a task waiting for prerequisites, one for an external condition, one whose run waits for a slot")
    func blockers() async throws {
        let queue = try ConcurrentOperationQueue(name: "snapshot.workflow.queue", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "snapshot.workflow", queue: queue)
        let held = HeldRuns()
        let first = held.task("first")
        let other = held.task("other")
        let then = ClosureTask(name: "then") { $0.finish(with: nil) }
        let approval = ExternalConditionTask(name: "approval")
        try workflow.add(first)
        try workflow.add(other)
        try workflow.add(approval)
        try workflow.add(then, prerequisites: [first, approval])
        workflow.start()
        #expect(await held.started(1))

        let snapshot = workflow.snapshot()
        #expect(snapshot.source == .workflow && snapshot.name == "snapshot.workflow")
        let entries = Dictionary(uniqueKeysWithValues: snapshot.operations.map { ($0.name, $0) })
        let running = try #require(entries[held.run(1)!.task.name])
        let waiting = try #require(entries[running.name == "first" ? "other" : "first"])
        #expect(running.state == .executing && running.sinceStarted != nil)
        #expect(waiting.state == .executing)  // its run is queued behind the only slot
        #expect(waiting.blockers == [.concurrencyLimit(1, heldBy: [running.reference])])
        #expect(entries["approval"]?.blockers.contains(.externalCondition("approval")) == true)
        let thenEntry = try #require(entries["then"])
        #expect(thenEntry.state == .pending)
        guard case .prerequisites(let names)? = thenEntry.blockers.first else {
            Issue.record("expected prerequisites, got \(thenEntry.blockers)")
            return
        }
        #expect(Set(names.map(\.name)) == ["first", "approval"])
        #expect(snapshot.mermaid.contains("==>"))

        approval.fulfill(with: nil)
        held.run(1)?.finish(with: nil)
        #expect(await held.started(2))
        held.run(2)?.finish(with: nil)
        try await untilTrue { workflow.isFinished }
        #expect(workflow.snapshot().operations.allSatisfy { $0.state == .finished })
        #expect(await drained(queue))
    }
}
