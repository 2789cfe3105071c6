// A run that ends inside its main(), on its runner's thread, hands its runner the next waiting run
// in the same critical section: the runner goes on without taking the workflow's lock again, and
// no other runner is made for a run its finish started. A run handed over but cancelled before it
// began never executes, and its cancel does not free the runner's place.

import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Workflow runners: a run ended in its main() hands its runner the next run", .offThePool)
struct WorkflowHandOverTests {
    @Test("a handed-over run cancelled on the runner's thread before it began never executes")
    func cancelledOnTheRunnerThread() async throws {
        let queue = try ConcurrentOperationQueue(name: "handover.own", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "hand over, cancel here", queue: queue)
        let bRan = AtomicCounter()
        let cRan = AtomicCounter()
        let b = Self.counting("B", bRan)
        let a = ClosureTask(name: "A") { run in
            // B, started with A and waiting, becomes this runner's next run here…
            run.finish(with: nil)
            // …and ends before it began.
            b.cancel()
        }
        let c = Self.counting("C", cRan)
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c)
        workflow.start()
        #expect(await drained(queue))
        #expect(bRan.value == 0)
        #expect(b.state == .cancelled)
        #expect(cRan.value == 1)
        #expect(c.state == .finished)
    }

    @Test("a handed-over run cancelled from another thread never executes, and the runner keeps its place")
    func cancelledElsewhere() async throws {
        let queue = try ConcurrentOperationQueue(name: "handover.elsewhere", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "hand over, cancel there", queue: queue)
        let finished = Latch()
        let release = Gate()
        let bRan = AtomicCounter()
        let cRan = AtomicCounter()
        let a = ClosureTask(name: "A") { run in
            run.finish(with: nil)
            finished.countDown()
            _ = release.wait()
        }
        let b = Self.counting("B", bRan)
        let c = Self.counting("C", cRan)
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c)
        workflow.start()
        #expect(await finished.opened(within: workflowTimeout))
        // B was handed to A's runner, whose main() has not returned.
        #expect(b.state == .executing)
        let runner = try #require(queue.operations.first { $0.isExecuting })
        b.cancel()
        #expect(b.state == .cancelled)
        // The cancel ended a run that had not begun: the runner is not finished (a run ended on
        // another thread finishes its runner before the change returns), so its place stays taken
        // while A's main() runs, and C still waits.
        #expect(runner.isExecuting && !runner.isFinished)
        #expect(c.state == .executing)
        #expect(cRan.value == 0)
        release.open()
        #expect(await drained(queue))
        #expect(bRan.value == 0)
        #expect(cRan.value == 1)
        #expect(workflow.allTasks.map(\.state) == [.finished, .cancelled, .finished])
    }

    /// A task whose runs count themselves in `ran` and finish at once.
    static func counting(_ name: String, _ ran: AtomicCounter) -> ClosureTask {
        ClosureTask(name: name) { run in
            ran.increment()
            run.finish(with: nil)
        }
    }

    static let chain = 200

    @Test("a chain's runs go to the runner their prerequisite's finish freed, not to a new runner each")
    func chainKeepsItsRunner() async throws {
        let queue = try ConcurrentOperationQueue(name: "handover.chain", maxConcurrentOperationCount: 2)
        let recorder = RecordingQueueDelegate()
        queue.delegate = recorder
        let workflow = Workflow(name: "chain", queue: queue)
        let order = Recorder<Int>()
        var previous: WorkflowTask?
        for index in 0..<Self.chain {
            let task = ClosureTask(name: "t\(index)") { run in
                order.record(index)
                run.finish(with: nil)
            }
            try workflow.add(task, prerequisites: previous.map { [$0] } ?? [])
            previous = task
        }
        workflow.start()
        #expect(await drained(queue))
        #expect(workflow.isFinished)
        #expect(order.values == Array(0..<Self.chain))
        // One runner per turn of 64 runs (four here), where a runner made for each run started
        // (and finding it already taken) would add about one per run.
        let runners = recorder.events(of: "runs of chain").filter { $0.hasPrefix("didAdd") }.count
        #expect(runners <= 2 * (Self.chain / 64 + 1), "\(runners) runners for a chain of \(Self.chain)")
    }
}
