import OperationKit
import OperationKitTestSupport
import Testing

@Suite struct WorkflowSmokeTests {
    final class FinishDelegate: WorkflowDelegate, @unchecked Sendable {
        let latch: Latch
        init(_ latch: Latch) { self.latch = latch }
        func workflowDidFinish(_ workflow: Workflow) { latch.countDown() }
    }

    @Test func chainAndReset() throws {
        let recorder = Recorder<String>()
        let workflow = Workflow(name: "AB+C")
        let a = ClosureTask(name: "A") { run in recorder.record("A"); run.finish(with: 1) }
        let b = ClosureTask(name: "B") { run in recorder.record("B"); run.finish(with: 2) }
        let c = ClosureTask(name: "C") { run in
            recorder.record("C")
            let sum = run.task.allPrerequisiteResults.compactMap { $0 as? Int }.reduce(0, +)
            run.finish(with: sum)
        }
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c, prerequisites: [a, b])
        #expect(c.state == .pending)
        let done = Latch(count: 1)
        let delegate = FinishDelegate(done)
        workflow.delegate = delegate
        workflow.start()
        #expect(done.wait())
        #expect(recorder.values.last == "C")
        #expect(c.result as? Int == 3)
        print(workflow.asciiDiagram())
        print(workflow.mermaidDiagram())
        // Scenario 53.
        c.reset()
        #expect(c.state == .ready)
        a.reset()
        #expect(a.state == .ready)
        #expect(c.state == .pending)
        print(workflow.asciiDiagram())
    }

    @Test func failBlocksAndCancelPropagates() throws {
        struct Boom: Error {}
        let workflow = Workflow(name: "w")
        let a = ClosureTask(name: "A") { run in run.fail(with: Boom()) }
        let b = ClosureTask(name: "B") { run in run.finish(with: nil) }
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let failed = Latch(count: 1)
        final class D: WorkflowDelegate, @unchecked Sendable {
            let l: Latch
            init(_ l: Latch) { self.l = l }
            func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error) { l.countDown() }
        }
        let d = D(failed)
        workflow.delegate = d
        workflow.start()
        #expect(failed.wait())
        #expect(a.state == .failed)
        #expect(b.state == .pending)
        workflow.cancel()
        #expect(a.state == .failed)
        #expect(b.state == .cancelled)
        #expect(throws: OperationError.self) { try workflow.add(b) }
    }

    @Test func externalConditionAndSubworkflow() throws {
        let sub = Workflow(name: "sub")
        let gate = ExternalConditionTask(name: "gate")
        try sub.add(gate)
        let parent = Workflow(name: "parent")
        let step = SubworkflowTask(name: "step", subworkflow: sub)
        try parent.add(step)
        let done = Latch(count: 1)
        let delegate = FinishDelegate(done)
        parent.delegate = delegate
        parent.start()
        // The gate is not fulfilled: it fails, and so does the parent step.
        #expect(step.currentRun.number == 1)
        gate.fulfill(with: "ok")
        step.retry()
        #expect(done.wait())
        #expect(gate.result as? String == "ok")
        #expect(step.state == .finished)
    }
}
