import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 14: workflows, tasks, runs and outcomes print by name.
@Suite("Workflow descriptions", .offThePool)
struct WorkflowDescriptionTests {
    struct DiskFull: Error, CustomStringConvertible {
        var description: String { "Disk full" }
    }

    @Test("a workflow, a task and a run print their names")
    func namesPrint() throws {
        let workflow = Workflow(name: "backup")
        let task = ClosureTask(name: "upload") { $0.finish(with: nil) }
        try workflow.add(task, prerequisites: [])
        #expect("\(workflow)" == "backup")
        #expect("\(task)" == "upload")
        #expect("\(task.currentRun)" == "upload run \(task.currentRun.number)")
    }

    @Test("task outcomes print their case with the payload and the prerequisite's name")
    func taskOutcomesPrint() {
        let upload = ClosureTask(name: "upload") { $0.finish(with: nil) }
        #expect("\(WorkflowTaskOutcome.finished(42))" == "finished(42)")
        #expect("\(WorkflowTaskOutcome.finished(nil))" == "finished(nil)")
        #expect("\(WorkflowTaskOutcome.failed(DiskFull()))" == "failed(Disk full)")
        #expect("\(WorkflowTaskOutcome.cancelled)" == "cancelled")
        #expect("\(WorkflowTaskOutcome.prerequisiteFailed(upload, error: DiskFull()))" == "prerequisiteFailed(upload, Disk full)")
    }

    @Test("workflow outcomes print the tasks by name")
    func workflowOutcomesPrint() {
        let upload = ClosureTask(name: "upload") { $0.finish(with: nil) }
        let resize = ClosureTask(name: "resize") { $0.finish(with: nil) }
        #expect("\(WorkflowOutcome.finished)" == "finished")
        #expect("\(WorkflowOutcome.failed([(task: upload, error: DiskFull())]))" == "failed([upload: Disk full])")
        #expect("\(WorkflowOutcome.cancelled([upload, resize]))" == "cancelled([upload, resize])")
    }
}
