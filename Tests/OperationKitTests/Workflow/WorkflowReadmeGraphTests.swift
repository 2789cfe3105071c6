import OperationKit
import OperationKitTestSupport
import Testing

/// The example graphs of Task.framework's README (seeds/001): A; A→B; A and B concurrently;
/// A and B then C; A alone and B→C. Each task records `X start` / `X end` around its work;
/// concurrency is proved by rendezvous (a task waits, with a timeout, for another to have started:
/// serialised, it would time out and fail) and order by the log.
@Suite("Workflow: Task.framework's README graphs", .offThePool)
struct WorkflowReadmeGraphTests {
    /// Runs `workflow` to its finish; returns the delegate (for the task states at the finish).
    private func run(_ workflow: Workflow) async -> RecordingWorkflowDelegate? {
        let delegate = RecordingWorkflowDelegate()
        workflow.delegate = delegate
        workflow.start()
        guard await reached(delegate.finished) else { return nil }
        return delegate
    }

    @Test("A: the lone task runs once and the workflow finishes")
    func single() async throws {
        let log = Recorder<String>()
        let workflow = Workflow(name: "Workflow A")
        let a = recordingTask("A", log)
        try workflow.add(a)
        let delegate = try #require(await run(workflow))
        #expect(log.values == ["A start", "A end"])
        #expect(a.result as? String == "A")
        #expect(delegate.statesAtFinish.value == [.finished])
        #expect(delegate.finishCount == 1)
    }

    @Test("A→B: B runs after A and sees A's result")
    func chain() async throws {
        let log = Recorder<String>()
        let workflow = Workflow(name: "Workflow A+B")
        let a = recordingTask("A", log)
        let seen = WorkflowBox<String?>(nil)
        let b = ClosureTask(name: "B") { run in
            log.record("B start")
            seen.value = run.task.anyPrerequisiteResult as? String
            log.record("B end")
            run.finish(with: "B")
        }
        try workflow.add(a)
        try workflow.add(b, prerequisites: [a])
        let delegate = try #require(await run(workflow))
        #expect(log.values == ["A start", "A end", "B start", "B end"])
        #expect(seen.value == "A")
        #expect(delegate.statesAtFinish.value == [.finished, .finished])
    }

    @Test("A and B: they run concurrently (each waits for the other to have started)")
    func concurrent() async throws {
        let log = Recorder<String>()
        let aStarted = Gate()
        let bStarted = Gate()
        let workflow = Workflow(name: "Workflow AB")
        let a = recordingTask("A", log) {
            aStarted.open()
            return bStarted.wait(timeout: rendezvousTimeout)
        }
        let b = recordingTask("B", log) {
            bStarted.open()
            return aStarted.wait(timeout: rendezvousTimeout)
        }
        try workflow.add(a)
        try workflow.add(b)
        let delegate = try #require(await run(workflow))
        #expect(a.state == .finished, "A did not see B start: the tasks were serialised")
        #expect(b.state == .finished, "B did not see A start: the tasks were serialised")
        let values = log.values
        let starts = [values.firstIndex(of: "A start"), values.firstIndex(of: "B start")].compactMap { $0 }
        let ends = [values.firstIndex(of: "A end"), values.firstIndex(of: "B end")].compactMap { $0 }
        #expect(starts.count == 2 && ends.count == 2)
        #expect(starts.max()! < ends.min()!, "both started before either ended: \(values)")
        #expect(delegate.statesAtFinish.value == [.finished, .finished])
    }

    @Test("A and B, then C: A and B concurrently, C only after both, with both results")
    func fanIn() async throws {
        let log = Recorder<String>()
        let aStarted = Gate()
        let bStarted = Gate()
        let workflow = Workflow(name: "Workflow AB+C")
        let a = recordingTask("A", log) {
            aStarted.open()
            return bStarted.wait(timeout: rendezvousTimeout)
        }
        let b = recordingTask("B", log) {
            bStarted.open()
            return aStarted.wait(timeout: rendezvousTimeout)
        }
        let inputs = WorkflowBox<[String]>([])
        let c = ClosureTask(name: "C") { run in
            log.record("C start")
            inputs.value = run.task.allPrerequisiteResults.compactMap { $0 as? String }.sorted()
            log.record("C end")
            run.finish(with: "C")
        }
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c, prerequisites: [a, b])
        let delegate = try #require(await run(workflow))
        #expect(a.state == .finished && b.state == .finished, "A and B were serialised")
        let cStart = try #require(log.position(of: "C start"))
        #expect(try #require(log.position(of: "A end")) < cStart)
        #expect(try #require(log.position(of: "B end")) < cStart)
        #expect(Array(log.values.suffix(2)) == ["C start", "C end"])
        #expect(inputs.value == ["A", "B"])
        #expect(delegate.statesAtFinish.value == [.finished, .finished, .finished])
    }

    @Test("A alone and B→C: C after B; A independent (it runs until C has started); the workflow finishes after A and C")
    func independentBranch() async throws {
        let log = Recorder<String>()
        let cStarted = Gate()
        let workflow = Workflow(name: "Workflow A(B+C)")
        let a = recordingTask("A", log) { cStarted.wait(timeout: rendezvousTimeout) }
        let b = recordingTask("B", log)
        let c = recordingTask("C", log) {
            cStarted.open()
            return true
        }
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c, prerequisites: [b])
        #expect(workflow.tasksWithNoDependents.map(\.name) == ["A", "C"])
        let delegate = try #require(await run(workflow))
        #expect(a.state == .finished, "A could not run alongside B→C")
        #expect(try #require(log.position(of: "B end")) < #require(log.position(of: "C start")))
        #expect(try #require(log.position(of: "C start")) < #require(log.position(of: "A end")))
        #expect(delegate.statesAtFinish.value == [.finished, .finished, .finished])
        #expect(delegate.finishCount == 1)
    }

    // MARK: Their ASCII drawings

    /// The README's graphs, built (not run).
    static func readmeGraph(_ index: Int) throws -> Workflow {
        func task(_ name: String) -> ClosureTask { ClosureTask(name: name) { $0.finish(with: nil) } }
        let (a, b, c) = (task("A"), task("B"), task("C"))
        let workflow = Workflow(name: "README \(index)")
        switch index {
        case 0:
            try workflow.add(a)
        case 1:
            try workflow.add(a)
            try workflow.add(b, prerequisites: [a])
        case 2:
            try workflow.add(a)
            try workflow.add(b)
        case 3:
            try workflow.add(a)
            try workflow.add(b)
            try workflow.add(c, prerequisites: [a, b])
        default:
            try workflow.add(a)
            try workflow.add(b)
            try workflow.add(c, prerequisites: [b])
        }
        return workflow
    }

    @Test("A→B is drawn like the README's second picture, with states")
    func chainDrawing() throws {
        let workflow = try Self.readmeGraph(1)
        #expect(workflow.asciiDiagram() == """
            ┌───────┐    ╔══════════╗    ╔════════════╗    ┌────────┐
            │ Start │───>║ A: ready ║───>║ B: pending ║───>│ Finish │
            └───────┘    ╚══════════╝    ╚════════════╝    └────────┘

            Prerequisites:
              A ───> B

            """)
    }

    @Test("A alone and B→C is drawn with no arrow from A to C; the edge B ───> C is listed")
    func independentBranchDrawing() throws {
        let workflow = try Self.readmeGraph(4)
        #expect(workflow.asciiDiagram() == """
            ┌───────┐    ╔══════════╗    ╔════════════╗    ┌────────┐
            │ Start │───>║ A: ready ║    ║ C: pending ║───>│ Finish │
            └───────┘    ╚══════════╝    ╚════════════╝    └────────┘
                         ╔══════════╗
                         ║ B: ready ║
                         ╚══════════╝

            Prerequisites:
              B ───> C

            """)
    }

    /// The arrows `X ───> Y` drawn between boxes on the first row of an ASCII diagram, by name.
    static func drawnArrows(_ diagram: String) -> [(String, String)] {
        let lines = diagram.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count > 1 else { return [] }
        let boxes = lines[1].split(separator: "───>").map { part in
            String(part.filter { !"│║ ".contains($0) }.split(separator: ":").first ?? "")
        }
        return zip(boxes, boxes.dropFirst()).map { ($0, $1) }
    }

    @Test("the ASCII drawing of each README graph draws an arrow only where there is an edge", arguments: 0..<5)
    func drawingShowsOnlyRealEdges(_ index: Int) throws {
        let workflow = try Self.readmeGraph(index)
        let tasks = workflow.allTasks
        let diagram = workflow.asciiDiagram()
        for (from, to) in Self.drawnArrows(diagram) {
            switch (from, to) {
            case ("Start", let name):
                let task = try #require(tasks.first { $0.name == name })
                #expect(workflow.prerequisites(of: task).isEmpty, "Start ───> \(name)")
            case (let name, "Finish"):
                let task = try #require(tasks.first { $0.name == name })
                #expect(workflow.dependents(of: task).isEmpty, "\(name) ───> Finish")
            default:
                let prerequisite = try #require(tasks.first { $0.name == from })
                let dependent = try #require(tasks.first { $0.name == to })
                #expect(workflow.prerequisites(of: dependent).contains { $0 === prerequisite },
                        "the drawing shows \(from) ───> \(to), but \(to) does not depend on \(from):\n\(diagram)")
            }
        }
    }
}
