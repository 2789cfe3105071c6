// Workflows: re-runnable graphs of tasks.
//
// First the five graphs of Task.framework's README, each built with ClosureTasks and run to
// completion: A alone; A then B; A and B side by side; A and B, then C; A alone beside B then C.
// Every task records that it ran and finishes with its name; C finishes with a combination of its
// prerequisites' results. After each run the program prints the workflow as ASCII (the states are
// part of the drawing), the results and how often each task ran; for the second graph it also
// prints the events its `events` stream delivered and the Graphviz DOT text, and for the fourth
// the Mermaid flowchart.
//
// Then: a failure that blocks its dependent, a retry that runs it again, resets (including
// Task.framework 1.1's reset fix), a cancel that reaches the dependent, an external condition
// fulfilled after the workflow has started, and a sub-workflow run as one step with a MethodTask
// depending on it.
//
// Tasks run concurrently on each workflow's queue, but the program only prints from the main
// thread, after waiting — with the workflow's delegate and a DispatchSemaphore, never a sleep — for
// the workflow to finish or a task to fail. So every run prints the same thing.
//
// Run it with `swift run Workflows`.

import Dispatch
import OperationKit
import Synchronization

// MARK: Helpers

/// How many times each task of one example ran, by name. Tasks run on the workflows' queues, so a
/// mutex guards the counts.
final class RunLog: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    func record(_ task: WorkflowTask) {
        counts.withLock { $0[task.name, default: 0] += 1 }
    }

    /// "A 1, B 1": the runs of `tasks`, in their order.
    func summary(of tasks: [WorkflowTask]) -> String {
        let counts = counts.withLock { $0 }
        return tasks.map { "\($0.name) \(counts[$0.name, default: 0])" }.joined(separator: ", ")
    }
}

/// A task that records its run and finishes with its name.
func recording(_ name: String, log: RunLog) -> ClosureTask {
    ClosureTask(name: name) { run in
        log.record(run.task)
        run.finish(with: name)
    }
}

/// A task that records its run and finishes with its name followed by its prerequisites' results,
/// for example "C(A+B)". `allPrerequisiteResults` lists them in the order the prerequisites were
/// given to `add`.
func combining(_ name: String, log: RunLog) -> ClosureTask {
    ClosureTask(name: name) { run in
        log.record(run.task)
        let inputs = run.task.allPrerequisiteResults.map { "\($0)" }
        run.finish(with: "\(name)(\(inputs.joined(separator: "+")))")
    }
}

/// The workflow's delegate while the main thread waits: it signals when the workflow finishes or
/// one of its tasks fails. Delegate methods run on the thread that caused the change — here a
/// worker of the workflow's queue.
final class Waiter: WorkflowDelegate {
    private let semaphore = DispatchSemaphore(value: 0)

    func workflowDidFinish(_ workflow: Workflow) {
        semaphore.signal()
    }

    func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error) {
        semaphore.signal()
    }

    func wait() {
        semaphore.wait()
    }
}

/// Does `action` (a start, a retry, a fulfilment) and blocks until `workflow` finishes or one of
/// its tasks fails.
func runAndWait(_ workflow: Workflow, _ action: () -> Void) {
    let waiter = Waiter()
    workflow.delegate = waiter  // held weakly: `waiter` lives until wait() returns
    action()
    waiter.wait()
    workflow.delegate = nil
}

/// Collects the events of a workflow's `events` stream until `.workflowFinished`.
final class EventRecorder: Sendable {
    private let events = Mutex<[String]>([])
    private let finished = DispatchSemaphore(value: 0)

    init(_ workflow: Workflow) {
        let stream = workflow.events  // subscribe now, before anything happens
        Task.detached { [self] in
            for await event in stream {
                events.withLock { $0.append("\(event)") }
                if case .workflowFinished = event { break }
            }
            finished.signal()
        }
    }

    /// Waits for `.workflowFinished`, then returns the events in the order the stream gave them.
    func waitForFinish() -> [String] {
        finished.wait()
        return events.withLock { $0 }
    }
}

/// A result or an error as text, "nil" for none.
func text(_ value: Any?) -> String {
    value.map { "\($0)" } ?? "nil"
}

func printResults(of tasks: [WorkflowTask], log: RunLog) {
    print("results: " + tasks.map { "\($0.name) = \(text($0.result))" }.joined(separator: ", "))
    print("runs: " + log.summary(of: tasks))
}

func section(_ title: String) {
    print("\n== \(title)\n")
}

// MARK: The README's five graphs

/// 1. A alone.
func graphA() throws {
    section("1. A alone")
    let log = RunLog()
    let workflow = Workflow(name: "A")
    let a = recording("A", log: log)
    try workflow.add(a)
    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)
}

/// 2. A, then B.
func graphAThenB() throws {
    section("2. A, then B")
    let log = RunLog()
    let workflow = Workflow(name: "A then B")
    let a = recording("A", log: log)
    let b = recording("B", log: log)
    try workflow.add(a)
    try workflow.add(b, prerequisites: [a])
    let recorder = EventRecorder(workflow)
    runAndWait(workflow) { workflow.start() }
    let events = recorder.waitForFinish()
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)
    // In a chain each event is caused by the one before, so they always come in this order.
    print("events: \(events.joined(separator: ", "))")
    print("\nGraphviz DOT:\n")
    print(workflow.graphvizDOT(), terminator: "")
}

/// 3. A and B, side by side.
func graphAAndB() throws {
    section("3. A and B, side by side")
    let log = RunLog()
    let workflow = Workflow(name: "A and B")
    let a = recording("A", log: log)
    let b = recording("B", log: log)
    try workflow.add(a)
    try workflow.add(b)
    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)
}

/// 4. A and B, then C.
func graphABThenC() throws {
    section("4. A and B, then C")
    let log = RunLog()
    let workflow = Workflow(name: "A and B, then C")
    let a = recording("A", log: log)
    let b = recording("B", log: log)
    let c = combining("C", log: log)
    try workflow.add(a)
    try workflow.add(b)
    try workflow.add(c, prerequisites: [a, b])
    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)
    print("\nMermaid:\n")
    print(workflow.mermaidDiagram(), terminator: "")
}

/// 5. A alone, beside B then C.
func graphAAndBThenC() throws {
    section("5. A alone, beside B then C")
    let log = RunLog()
    let workflow = Workflow(name: "A, and B then C")
    let a = recording("A", log: log)
    let b = recording("B", log: log)
    let c = combining("C", log: log)
    try workflow.add(a)
    try workflow.add(b)
    try workflow.add(c, prerequisites: [b])
    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)
}

// MARK: Failure, retry and reset

struct Offline: Error, CustomStringConvertible {
    var description: String { "offline" }
}

/// fetch fails on its first run and finishes on later ones; save depends on it.
func failureRetryReset() throws {
    section("6. A failure blocks its dependent")
    let log = RunLog()
    let attempts = Atomic<Int>(0)
    let fetch = ClosureTask(name: "fetch") { run in
        log.record(run.task)
        if attempts.add(1, ordering: .relaxed).newValue == 1 {
            run.fail(with: Offline())
        } else {
            run.finish(with: "data")
        }
    }
    let save = combining("save", log: log)
    let workflow = Workflow(name: "fetch then save")
    try workflow.add(fetch)
    try workflow.add(save, prerequisites: [fetch])

    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    print("fetch.error: \(text(fetch.error))")
    print("hasFailedTasks: \(workflow.hasFailedTasks), hasUnfinishedTasks: \(workflow.hasUnfinishedTasks)")

    section("7. Retry: fetch runs again, then save")
    runAndWait(workflow) { workflow.retry() }
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)
    print("hasFailedTasks: \(workflow.hasFailedTasks), isFinished: \(workflow.isFinished)")

    section("8. Reset the workflow: nothing runs until it is started again")
    workflow.reset()
    print(workflow.asciiDiagram())
    print("fetch.result: \(text(fetch.result)), hasUnfinishedTasks: \(workflow.hasUnfinishedTasks)")

    section("9. Start it again, then reset save, then fetch")
    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    save.reset()  // fetch has finished: save becomes ready (and does not start)
    print(workflow.asciiDiagram())
    fetch.reset()  // fetch is no longer finished: save goes back to pending
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)

    section("10. Cancel fetch: save is cancelled too; a retry runs both")
    fetch.cancel()
    print(workflow.asciiDiagram())
    runAndWait(workflow) { workflow.retry() }
    print(workflow.asciiDiagram())
    printResults(of: workflow.allTasks, log: log)
}

// MARK: An external condition

func externalCondition() throws {
    section("11. An external condition, fulfilled after the start")
    let log = RunLog()
    let input = ExternalConditionTask(name: "input")
    let request = ClosureTask(name: "request", requiredPrerequisiteKeys: ["input"]) { run in
        log.record(run.task)
        let text = run.task.prerequisiteResult(forKey: "input", as: String.self) ?? "?"
        run.finish(with: "sent \(text)")
    }
    let workflow = Workflow(name: "input then request")
    try workflow.add(input)
    try workflow.add(request, keyedPrerequisites: ["input": input])

    // Started before it is fulfilled, the condition fails, and request stays pending.
    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    print("input.error: \(text(input.error))")

    // Fulfilling it retries it; it finishes with the value, and request runs.
    print("\nfulfill(with: \"hello\")\n")
    runAndWait(workflow) { input.fulfill(with: "hello") }
    print(workflow.asciiDiagram())
    input.fulfill(with: "ignored")  // only the first fulfilment counts
    print("results: input = \(text(input.result)), request = \(text(request.result))")
    print("runs: " + log.summary(of: [request]))
}

// MARK: A sub-workflow

/// Uploads what the resize sub-workflow produced. A MethodTask calls `upload(_:)`.
final class Uploader: Sendable {
    let log: RunLog

    init(log: RunLog) {
        self.log = log
    }

    func upload(_ run: WorkflowTaskRun) {
        log.record(run.task)
        guard let images = run.task.prerequisiteResult(forKey: "images", as: Workflow.self) else {
            return run.fail(with: Offline())
        }
        let names = images.allTasks.map { text($0.result) }
        run.finish(with: "uploaded \(names.joined(separator: " and "))")
    }
}

func subworkflow() throws {
    section("12. A sub-workflow as one step")
    let log = RunLog()
    let resize = Workflow(name: "resize")
    try resize.add(recording("small", log: log))
    try resize.add(recording("large", log: log))

    let download = recording("download", log: log)
    let resizeStep = SubworkflowTask(name: "resize", subworkflow: resize)
    let uploader = Uploader(log: log)
    let upload = MethodTask(name: "upload", target: uploader, method: Uploader.upload(_:),
                            requiredPrerequisiteKeys: ["images"])
    let workflow = Workflow(name: "publish")
    try workflow.add(download)
    try workflow.add(resizeStep, prerequisites: [download])
    try workflow.add(upload, keyedPrerequisites: ["images": resizeStep])

    runAndWait(workflow) { workflow.start() }
    print(workflow.asciiDiagram())
    print(resize.asciiDiagram())
    let subworkflowName = (resizeStep.result as? Workflow)?.name ?? "?"
    print("results: download = \(text(download.result)), resize = the workflow \"\(subworkflowName)\", upload = \(text(upload.result))")
    print("runs: " + log.summary(of: [download] + resize.allTasks + [upload]))
}

try graphA()
try graphAThenB()
try graphAAndB()
try graphABThenC()
try graphAAndBThenC()
try failureRetryReset()
try externalCondition()
try subworkflow()
