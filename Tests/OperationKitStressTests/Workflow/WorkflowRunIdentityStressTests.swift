import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// The race the storms hit now and then, made deterministic: the operation of run 1 has
    /// passed its "is my run still current?" check and entered `main()`, but before the body
    /// reads its run, run 1 is reset and run 2 started. Run 1's body must still act for run 1
    /// (its finish ignored), and run 2's body must be the only one executing for run 2.
    @Suite("Workflow run identity")
    struct WorkflowRunIdentity {
        /// Its first body stops at the top of `main()` until the test lets it go on; later bodies
        /// park their run for the test to finish.
        final class HeldTask: WorkflowTask, @unchecked Sendable {  // all mutable state is synchronised
            /// Finish the first body through the task's own `finish(with:)` instead of its run.
            let viaTask: Bool
            let firstEntered = Latch()
            let proceed = Gate()
            let firstDone = Latch()
            let secondParked = Latch()
            private let first = Atomic<Bool>(true)
            let executions = WorkflowGuarded<[Int: Int]>([:])
            let parked = WorkflowGuarded<[WorkflowTaskRun]>([])

            init(viaTask: Bool) {
                self.viaTask = viaTask
                super.init(name: "held")
            }

            override func main() {
                let isFirst = first.exchange(false, ordering: .acquiringAndReleasing)
                if isFirst {
                    // Anything a body does before reading its run widens the window; the window
                    // itself is there even when `currentRun` is the first thing read (and inside
                    // `ClosureTask`, before the body is called at all).
                    firstEntered.countDown()
                    _ = proceed.wait(timeout: Stress.timeout)
                }
                let run = currentRun
                executions.withLock { $0[run.number, default: 0] += 1 }
                if isFirst {
                    if viaTask { finish(with: "late") } else { run.finish(with: "late") }
                    firstDone.countDown()
                } else {
                    parked.withLock { $0.append(run) }
                    secondParked.countDown()
                }
            }
        }

        @Test(
            "a body whose run was replaced as it began acts for its own run only",
            arguments: [false, true])
        func replacedRun(finishingThroughTheTask viaTask: Bool) throws {
            let workflow = Workflow(name: "identity")
            let task = HeldTask(viaTask: viaTask)
            try workflow.add(task)
            defer { task.proceed.open() }  // never leave a worker blocked, even when a requirement fails
            workflow.start()
            try #require(task.firstEntered.wait(timeout: Stress.timeout), "run 1 did not execute")
            #expect(task.currentRun.number == 1)

            // Run 1 is over; run 2 executes.
            task.reset()
            #expect(task.state == .ready)
            task.start()
            try #require(task.secondParked.wait(timeout: Stress.timeout), "run 2 did not execute")
            #expect(task.currentRun.number == 2)
            #expect(task.state == .executing)

            // Run 1's body goes on: its finish must be ignored.
            task.proceed.open()
            try #require(task.firstDone.wait(timeout: Stress.timeout))
            #expect(task.state == .executing, "run 1's late body finished run 2")

            for run in task.parked.current { run.finish(with: "run 2") }
            #expect(task.state == .finished)
            #expect(task.result as? String == "run 2", "run 2 finished with \(String(describing: task.result))")
            #expect(task.executions.current == [1: 1, 2: 1], "bodies executed by run number")
            #expect(workflow.queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
        }
    }
}
