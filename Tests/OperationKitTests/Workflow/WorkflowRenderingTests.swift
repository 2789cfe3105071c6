import OperationKit
import OperationKitTestSupport
import Testing

/// Mermaid, Graphviz DOT and ASCII renderings, compared with exact text, showing states.
@Suite("Workflow rendering: Mermaid, DOT, ASCII", .offThePool)
struct WorkflowRenderingTests {
    /// A, B; C after A and (keyed "b") B; D alone.
    private func smallWorkflow() throws -> (Workflow, [WorkflowTask]) {
        let workflow = Workflow(name: "render")
        let a = ClosureTask(name: "A") { $0.finish(with: 1) }
        let b = ClosureTask(name: "B") { $0.fail(with: WorkflowTestError(2)) }
        let c = ClosureTask(name: "C") { $0.finish(with: 3) }
        let d = ClosureTask(name: "D") { $0.finish(with: 4) }
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c, prerequisites: [a], keyedPrerequisites: ["b": b])
        try workflow.add(d)
        return (workflow, [a, b, c, d])
    }

    /// The small workflow after a run: A finished, B failed, C pending, D cancelled.
    private func ranSmallWorkflow() async throws -> Workflow {
        let (workflow, tasks) = try smallWorkflow()
        tasks[3].cancel()
        let aDelegate = RecordingTaskDelegate()
        tasks[0].delegate = aDelegate
        let delegate = RecordingWorkflowDelegate(expecting: 1)  // fail(B)
        workflow.delegate = delegate
        workflow.start()
        #expect(await reached(aDelegate.messages))
        #expect(await reached(delegate.messages))
        #expect(tasks.map(\.state) == [.finished, .failed, .pending, .cancelled])
        withExtendedLifetime((aDelegate, delegate)) {}
        return workflow
    }

    @Test("ASCII before a run: ready and pending; after: finished, failed, pending, cancelled")
    func ascii() async throws {
        let (workflow, _) = try smallWorkflow()
        #expect(workflow.asciiDiagram() == """
            ┌───────┐    ╔══════════╗    ╔════════════╗    ┌────────┐
            │ Start │───>║ A: ready ║───>║ C: pending ║───>│ Finish │
            └───────┘    ╚══════════╝    ╚════════════╝    └────────┘
                         ╔══════════╗
                         ║ B: ready ║
                         ╚══════════╝
                         ╔══════════╗
                         ║ D: ready ║
                         ╚══════════╝

            Prerequisites:
              A ───> C
              B ───> C [b]

            """)
        let ran = try await ranSmallWorkflow()
        #expect(ran.asciiDiagram() == """
            ┌───────┐    ╔══════════════╗    ╔════════════╗    ┌────────┐
            │ Start │───>║ A: finished  ║───>║ C: pending ║───>│ Finish │
            └───────┘    ╚══════════════╝    ╚════════════╝    └────────┘
                         ╔══════════════╗
                         ║ B: failed    ║
                         ╚══════════════╝
                         ╔══════════════╗
                         ║ D: cancelled ║
                         ╚══════════════╝

            Prerequisites:
              A ───> C
              B ───> C [b]

            """)
    }

    @Test("Mermaid: a node per task with name, state and class; keyed edges labelled; Start and Finish")
    func mermaid() async throws {
        let workflow = try await ranSmallWorkflow()
        #expect(workflow.mermaidDiagram() == """
            flowchart LR
                start([Start])
                finish([Finish])
                t0["A: finished"]:::finished
                t1["B: failed"]:::failed
                t2["C: pending"]:::pending
                t3["D: cancelled"]:::cancelled
                start --> t0
                start --> t1
                t0 --> t2
                t1 -- b --> t2
                t2 --> finish
                start --> t3
                t3 --> finish
                classDef pending fill:#eeeeee
                classDef ready fill:#dde8ff
                classDef executing fill:#fff2b3
                classDef finished fill:#c8f0c8
                classDef failed fill:#ffc8c8
                classDef cancelled fill:#dddddd,stroke-dasharray:4

            """)
    }

    @Test("DOT: a node per task labelled name and state, coloured by state; keyed edges labelled")
    func dot() async throws {
        let workflow = try await ranSmallWorkflow()
        #expect(workflow.graphvizDOT() == #"""
            digraph "render" {
                rankdir=LR;
                node [shape=box, style=filled];
                "__start" [label="Start", shape=oval, style=solid];
                "__finish" [label="Finish", shape=oval, style=solid];
                "t0" [label="A\nfinished", fillcolor=palegreen];
                "t1" [label="B\nfailed", fillcolor=salmon];
                "t2" [label="C\npending", fillcolor=gray90];
                "t3" [label="D\ncancelled", fillcolor=gray70];
                "__start" -> "t0";
                "__start" -> "t1";
                "t0" -> "t2";
                "t1" -> "t2" [label="b"];
                "t2" -> "__finish";
                "__start" -> "t3";
                "t3" -> "__finish";
            }

            """#)
    }

    @Test("an executing task is drawn executing in all three")
    func executing() async throws {
        let workflow = Workflow(name: "exec")
        let held = HeldRuns()
        let task = held.task("T")
        try workflow.add(task)
        workflow.start()
        #expect(await held.started())
        #expect(workflow.mermaidDiagram().contains(#"    t0["T: executing"]:::executing"#))
        #expect(workflow.graphvizDOT().contains(#"    "t0" [label="T\nexecuting", fillcolor=khaki1];"#))
        #expect(workflow.asciiDiagram().contains("║ T: executing ║"))
        held.run()?.finish(with: nil)
        #expect(workflow.asciiDiagram().contains("║ T: finished ║"))
    }

    @Test("an empty workflow: Start straight to Finish")
    func empty() {
        let workflow = Workflow(name: "empty")
        #expect(workflow.asciiDiagram() == """
            ┌───────┐    ┌────────┐
            │ Start │───>│ Finish │
            └───────┘    └────────┘

            """)
        #expect(workflow.mermaidDiagram().hasPrefix("flowchart LR\n    start([Start])\n    finish([Finish])\n    start --> finish\n"))
        #expect(workflow.graphvizDOT().contains(#"    "__start" -> "__finish";"#))
    }

    @Test("quotes in names: Mermaid turns them into apostrophes, DOT escapes them")
    func quotes() throws {
        let workflow = Workflow(name: #"say "hi""#)
        let task = ClosureTask(name: #"read "x""#) { $0.finish(with: nil) }
        try workflow.add(task)
        #expect(workflow.mermaidDiagram().contains(#"    t0["read 'x': ready"]:::ready"#))
        let dot = workflow.graphvizDOT()
        #expect(dot.hasPrefix(#"digraph "say \"hi\"" {"#))
        #expect(dot.contains(#"    "t0" [label="read \"x\"\nready", fillcolor=lightblue];"#))
    }

    @Test("DOT escapes backslashes in task names (a name's \\n or \\\" must not become a line break or end the label)")
    func dotBackslashes() throws {
        let workflow = Workflow(name: #"C:\dir"#)
        try workflow.add(ClosureTask(name: #"C:\new"#) { $0.finish(with: nil) })
        try workflow.add(ClosureTask(name: #"end\"#) { $0.finish(with: nil) })
        try workflow.add(ClosureTask(name: #"a\"b"#) { $0.finish(with: nil) })
        let dot = workflow.graphvizDOT()
        #expect(dot.hasPrefix(#"digraph "C:\\dir" {"#), "the graph name is escaped")
        #expect(dot.contains(#"    "t0" [label="C:\\new\nready", fillcolor=lightblue];"#), "\(dot)")
        #expect(dot.contains(#"    "t1" [label="end\\\nready", fillcolor=lightblue];"#), "\(dot)")
        #expect(dot.contains(#"    "t2" [label="a\\\"b\nready", fillcolor=lightblue];"#), "\(dot)")
    }
}
