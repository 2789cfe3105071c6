// A workflow's runs are taken, in the order they were started, by runners: operations on the
// workflow's queue that each hold one slot. What the queue's settings do to them: the limit, a
// suspension, a cancel of its operations, and sharing the underlying dispatch queue.

import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Workflow runners: the queue's limit, suspension and cancel reach the runs", .offThePool)
struct WorkflowRunnerTests {
    static let tasks = 300

    @Test("with a limit of 1, runs execute one at a time, in the order they were started")
    func limitOfOneRunsInOrder() async throws {
        let queue = try ConcurrentOperationQueue(name: "runners.serial", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "in order", queue: queue)
        let meter = InFlightMeter()
        let order = Recorder<Int>()
        for index in 0..<Self.tasks {
            try workflow.add(ClosureTask(name: "t\(index)") { run in
                meter.enter()
                order.record(index)
                meter.leave()
                run.finish(with: nil)
            })
        }
        workflow.start()
        #expect(await drained(queue))
        #expect(workflow.isFinished)
        #expect(meter.peak == 1)
        #expect(order.values == Array(0..<Self.tasks))
    }

    static let backlog = 5_000

    /// Runs a backlog of `backlog` short runs on a queue with a limit of 1 over a serial dispatch
    /// queue, with the given turn time; the first run queues other work on that dispatch queue.
    /// Returns how many runs had run when the other work ran (one value), and how many ran in all.
    private func backlog(turnTime: Duration, label: String) async throws -> (seenByOther: [Int], ran: Int) {
        let shared = DispatchQueue(label: label)
        let queue = try ConcurrentOperationQueue(
            name: label, maxConcurrentOperationCount: 1, underlyingQueue: shared)
        queue.workerTurnTime = turnTime
        let workflow = Workflow(name: "backlog", queue: queue)
        let ran = AtomicCounter()
        let seenByOther = Recorder<Int>()
        for index in 0..<Self.backlog {
            try workflow.add(ClosureTask(name: "b\(index)") { run in
                // The first run queues other work on the same (serial) dispatch queue.
                if index == 0 { shared.async { seenByOther.record(ran.value) } }
                ran.increment()
                run.finish(with: nil)
            })
        }
        workflow.start()
        #expect(await drained(queue))
        return (shared.sync { seenByOther.values }, ran.value)
    }

    @Test("work queued on the underlying queue runs after the first turn of 64 runs, not after the backlog")
    func runnersMakeWay() async throws {
        // A turn of no time: over after 64 runs, however fast they ran (see `WorkerTurn`).
        let (seenByOther, ran) = try await backlog(turnTime: .zero, label: "runners.fairness")
        #expect(ran == Self.backlog)
        #expect(seenByOther.count == 1)
        let seen = try #require(seenByOther.first)
        // A runner takes 64 runs, then stops and another is queued; the worker that ran it makes
        // way at once (as after 64 operations), so the other work comes next. A worker that went
        // on with the next runner would have run 64 runners' turns first (4,096 runs); a runner
        // that never stopped, all 5,000.
        #expect(seen <= 64, "the other work waited for \(seen) runs")
    }

    @Test("a runner's turn lasts the queue's turn time: with an hour, a backlog of 5,000 short runs does not make way")
    func runnersTurnLastsItsTime() async throws {
        let (seenByOther, _) = try await backlog(turnTime: .seconds(3600), label: "runners.turn-time")
        #expect(seenByOther.count == 1)
        // One runner and one worker took every run in one turn: the other work came after them.
        #expect(seenByOther.first == Self.backlog)
    }

    @Test("a queue suspended by a run: the runner takes no other run until the queue is resumed")
    func suspensionStopsTheRunner() async throws {
        let queue = try ConcurrentOperationQueue(name: "runners.suspend", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "suspend from a run", queue: queue)
        let bRan = AtomicCounter()
        let a = ClosureTask(name: "A") { run in
            queue.isSuspended = true
            run.finish(with: nil)
        }
        let b = ClosureTask(name: "B") { run in
            bRan.increment()
            run.finish(with: nil)
        }
        try workflow.add(a)
        try workflow.add(b)
        workflow.start()
        // B's run waits for a runner held by the suspended queue.
        try await untilTrue {
            workflow.snapshot().operations.first { $0.name == "B" }?.blockers.contains(.queueSuspended(queue.displayName)) == true
        }
        #expect(a.state == .finished)
        #expect(b.state == .executing)
        #expect(bRan.value == 0)
        queue.isSuspended = false
        #expect(await drained(queue))
        #expect(bRan.value == 1)
        #expect(b.state == .finished)
    }

    @Test("a lowered limit stops the runners above it: the remaining runs execute one at a time")
    func loweredLimitStopsExtraRunners() async throws {
        let queue = try ConcurrentOperationQueue(name: "runners.limit", maxConcurrentOperationCount: 2)
        let workflow = Workflow(name: "lowered limit", queue: queue)
        let held = HeldRuns()
        let first = ClosureTask(name: "first") { run in held.hold(run) }
        let second = ClosureTask(name: "second") { run in held.hold(run) }
        let meter = InFlightMeter()
        try workflow.add(first)
        try workflow.add(second)
        for index in 0..<Self.tasks {
            try workflow.add(ClosureTask(name: "t\(index)") { run in
                meter.enter()
                meter.leave()
                run.finish(with: nil)
            }, prerequisites: [first, second])
        }
        workflow.start()
        #expect(await held.started(2))
        try queue.setMaxConcurrentOperationCount(1)
        // Both runs end on this thread; the runners held by them go on (their main() returned
        // without ending the run, so they keep the runs until now).
        held.run(1)?.finish(with: nil)
        held.run(2)?.finish(with: nil)
        #expect(await drained(queue))
        #expect(workflow.isFinished)
        #expect(meter.peak == 1)
    }

    @Test("raising the limit starts a waiting run at once, while the only runner is held by a run that waits for it")
    func raisedLimitStartsAWaitingRun() async throws {
        let queue = try ConcurrentOperationQueue(name: "runners.raise", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "raised limit", queue: queue)
        let firstEntered = Latch()
        // Opens only once both runs have begun: with one place, the first waits for the second.
        let both = Latch(count: 2)
        let met = AtomicCounter()
        func meeting(_ name: String) -> ClosureTask {
            ClosureTask(name: name) { run in
                if name == "A" { firstEntered.countDown() }
                both.countDown()
                if both.wait(timeout: rendezvousTimeout) { met.increment() }
                run.finish(with: nil)
            }
        }
        let a = meeting("A")
        let b = meeting("B")
        try workflow.add(a)
        try workflow.add(b)
        workflow.start()
        #expect(await firstEntered.opened(within: workflowTimeout))
        try queue.setMaxConcurrentOperationCount(2)
        #expect(await drained(queue))
        #expect(met.value == 2, "the two runs never executed at once")
        #expect(workflow.isFinished)
    }

    @Test("cancelling the queue's operations cancels the runs waiting for a runner; the executing run goes on, later runs run")
    func cancelAllCancelsWaitingRuns() async throws {
        let queue = try ConcurrentOperationQueue(name: "runners.cancel", maxConcurrentOperationCount: 1)
        let workflow = Workflow(name: "cancel waiting runs", queue: queue)
        let entered = Latch()
        let release = Gate()
        let a = ClosureTask(name: "A") { run in
            entered.countDown()
            _ = release.wait()
            run.finish(with: "a")
        }
        let bRan = AtomicCounter()
        let b = ClosureTask(name: "B") { run in
            bRan.increment()
            run.finish(with: nil)
        }
        let c = ClosureTask(name: "C") { run in run.finish(with: nil) }
        let d = ClosureTask(name: "D") { run in run.finish(with: "d") }
        try workflow.add(a)
        try workflow.add(b)
        try workflow.add(c, prerequisites: [b])
        try workflow.add(d, prerequisites: [a])
        workflow.start()
        #expect(await entered.opened(within: workflowTimeout))
        queue.cancelAllOperations()
        // B waited for the runner executing A: cancelled at once, and its dependent with it.
        #expect(b.state == .cancelled)
        #expect(c.state == .cancelled)
        #expect(a.state == .executing)
        release.open()
        #expect(await drained(queue))
        #expect(a.result as? String == "a")
        // D started after the cancel: another runner runs it.
        #expect(d.result as? String == "d")
        #expect(bRan.value == 0)
    }
}
