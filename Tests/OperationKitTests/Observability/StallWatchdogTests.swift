import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 15 §2: the stall watchdog, with small thresholds injected; every wait is bounded and
/// nothing asserts how fast anything is.
@Suite("Stall watchdog", .offThePool)
struct StallWatchdogTests {
    @Test("an operation executing longer than the limit is reported once, with the snapshot")
    func executionLimit() async throws {
        let queue = ConcurrentOperationQueue(name: "watchdog.long")
        let reports = Recorder<StallReport>()
        let reported = Latch(count: 1)
        let slow = HeldOperation(name: "slow")
        try queue.addOperation(slow)
        #expect(await opened(slow.started))
        let configuration = StallWatchdogConfiguration(executionLimit: .milliseconds(5), reportsWaitForCycles: false)
        queue.startStallWatchdog(configuration) {
            reports.record($0)
            reported.countDown()
        }
        #expect(queue.isStallWatchdogOn)
        #expect(await opened(reported))
        let report = try #require(reports.values.first)
        #expect(report.reason == .executingTooLong([OperationReference(id: ObjectIdentifier(slow), name: "slow")]))
        #expect(report.snapshot.operation(named: "slow")?.state == .executing)
        #expect(report.description.hasPrefix("stall: executing too long: slow\n"))

        queue.stopStallWatchdog()
        #expect(!queue.isStallWatchdogOn)
        slow.finish()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(reports.values.count == 1)
    }

    @Test("a queue holding work where nothing starts or finishes is reported")
    func noProgress() async throws {
        let queue = ConcurrentOperationQueue(name: "watchdog.idle")
        queue.isSuspended = true
        try queue.addOperation(ClosureOperation(name: "held back") {})
        let reasons = Recorder<StallReport.Reason>()
        let reported = Latch(count: 1)
        let configuration = StallWatchdogConfiguration(progressTimeout: .milliseconds(10), reportsWaitForCycles: false)
        queue.startStallWatchdog(configuration) {
            reasons.record($0.reason)
            reported.countDown()
        }
        #expect(await opened(reported))
        guard case .noProgress? = reasons.values.first else {
            Issue.record("expected no progress, got \(reasons.values)")
            return
        }
        queue.stopStallWatchdog()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a wait-for cycle is reported")
    func cycle() async throws {
        let queue = ConcurrentOperationQueue(name: "watchdog.cycle")
        let node = ClosureOperation(name: "node") {}
        let child = ClosureOperation(name: "child") {}
        try child.addDependency(node)
        try queue.addOperation(try GroupOperation(name: "group", operations: [child]))
        queue.addBarrierBlock {}
        try queue.addOperation(node)
        let reasons = Recorder<StallReport.Reason>()
        let reported = Latch(count: 1)
        queue.startStallWatchdog(StallWatchdogConfiguration(checkInterval: .milliseconds(2))) {
            reasons.record($0.reason)
            reported.countDown()
        }
        #expect(await opened(reported))
        guard case .waitForCycle(let found)? = reasons.values.first else {
            Issue.record("expected a cycle, got \(reasons.values)")
            return
        }
        #expect(found.steps.count == 4)
        queue.stopStallWatchdog()
        node.cancel()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a workflow's watchdog reports a task run executing too long")
    func workflow() async throws {
        let workflow = Workflow(name: "watchdog.workflow")
        let held = HeldRuns()
        try workflow.add(held.task("stuck"))
        let reported = Latch(count: 1)
        let reasons = Recorder<StallReport.Reason>()
        workflow.startStallWatchdog(StallWatchdogConfiguration(executionLimit: .milliseconds(5))) {
            reasons.record($0.reason)
            reported.countDown()
        }
        workflow.start()
        #expect(await held.started())
        #expect(await opened(reported))
        guard case .executingTooLong(let tasks)? = reasons.values.first else {
            Issue.record("expected executing too long, got \(reasons.values)")
            return
        }
        #expect(tasks.map(\.name) == ["stuck"])
        #expect(workflow.isStallWatchdogOn)
        workflow.stopStallWatchdog()
        #expect(!workflow.isStallWatchdogOn)
        held.run()?.finish(with: nil)
        #expect(await drained(workflow.queue))
    }

    @Test("the default check interval is a quarter of the smallest limit, within bounds")
    func defaults() {
        #expect(StallWatchdogConfiguration(executionLimit: .seconds(2)).checkInterval == .milliseconds(500))
        #expect(StallWatchdogConfiguration(progressTimeout: .seconds(60)).checkInterval == .seconds(1))
        #expect(StallWatchdogConfiguration(executionLimit: .microseconds(100)).checkInterval == .milliseconds(1))
        #expect(StallWatchdogConfiguration().checkInterval == .seconds(1))
    }
}
