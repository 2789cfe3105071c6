import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// AsyncClosureTask: an async closure as a workflow task.
@Suite("Workflow concurrency: AsyncClosureTask", .offThePool)
struct WorkflowAsyncClosureTaskTests {
    @Test("the closure's return value finishes the run, a thrown error fails it; keyed results reach it")
    func finishAndFail() async throws {
        let user = AsyncClosureTask(name: "user") { _ in "ada" }
        let greet = AsyncClosureTask(name: "greet", requiredPrerequisiteKeys: ["user"]) { run in
            guard let name = run.task.prerequisiteResult(forKey: "user", as: String.self) else {
                throw WorkflowTestError(0)
            }
            return "hello \(name)"
        }
        let broken = AsyncClosureTask(name: "broken") { _ in throw WorkflowTestError(5) }
        let workflow = Workflow(name: "closures")
        try workflow.add(user)
        try workflow.add(greet, keyedPrerequisites: ["user": user])
        try workflow.add(broken)
        let result = await awaitResult { try await workflow.run() }
        #expect((result?.failureValue as? OperationError)?.operationNames == ["broken"])
        #expect(greet.result as? String == "hello ada")
        #expect(broken.error as? WorkflowTestError == WorkflowTestError(5))
        #expect(broken.state == .failed)
    }

    @Test("cancelling the workflow task cancels the Swift task running its closure")
    func cancelCancelsSwiftTask() async throws {
        let started = Latch()
        let sawCancellation = Latch()
        let task = AsyncClosureTask(name: "A") { _ in
            started.countDown()
            await withTaskCancellationHandler {
                await neverResumedUnlessCancelled()
            } onCancel: {
                sawCancellation.countDown()
            }
            return "late"
        }
        let workflow = Workflow(name: "cancel")
        try workflow.add(task)
        workflow.start()
        #expect(await reached(started))
        task.cancel()
        #expect(await reached(sawCancellation))
        #expect(task.state == .cancelled)
        #expect(await drained(workflow.queue))
        #expect(task.result == nil, "the cancelled run's late return is ignored")
        #expect(task.withTaskLock { task.swiftTasks.count } == 0)
    }

    @Test("a reset of an executing task cancels the Swift task too")
    func resetCancelsSwiftTask() async throws {
        let started = Latch()
        let sawCancellation = Latch()
        let task = AsyncClosureTask(name: "A") { _ in
            started.countDown()
            await withTaskCancellationHandler {
                await neverResumedUnlessCancelled()
            } onCancel: {
                sawCancellation.countDown()
            }
            return "late"
        }
        let workflow = Workflow(name: "reset")
        try workflow.add(task)
        workflow.start()
        #expect(await reached(started))
        task.reset()
        #expect(await reached(sawCancellation))
        #expect(task.state == .ready)
    }

    @Test("a stale run (cancelled, then retried) cannot finish the new run")
    func staleRunCannotFinish() async throws {
        let gates = [Gate(), Gate()]
        let started = [Latch(), Latch()]
        let cancelledFlags = Recorder<String>()
        let task = AsyncClosureTask(name: "A") { run in
            let index = run.number - 1
            started[index].countDown()
            // Ignores cancellation: waits for its gate whatever happens.
            _ = await reached(gates[index])
            cancelledFlags.record("\(run.number): \(Task.isCancelled)")
            return "run \(run.number)"
        }
        let workflow = Workflow(name: "stale")
        try workflow.add(task)
        let outcome = Task { await task.outcome }
        workflow.start()
        #expect(await reached(started[0]))
        task.cancel()
        #expect(describeOutcome(await outcome.value) == "cancelled")
        task.retry()
        #expect(await reached(started[1]))
        #expect(task.state == .executing)

        let secondWait = Task { try await task.value(as: String.self) }
        #expect(await awaitEventually { awaiterCount(task) == 1 })
        gates[0].open()  // the first run's closure returns "run 1": ignored
        #expect(await awaitEventually { !cancelledFlags.values.isEmpty })
        #expect(cancelledFlags.values == ["1: true"], "the first run's Swift task was cancelled")
        #expect(task.state == .executing)
        #expect(awaiterCount(task) == 1)

        gates[1].open()
        #expect(await awaitEnd(of: secondWait)?.successValue == "run 2")
        #expect(cancelledFlags.values == ["1: true", "2: false"])
    }

    @Test("a run holds its place on the queue until the closure ends")
    func holdsQueueSlot() async throws {
        let queue = ConcurrentOperationQueue(name: "one at a time")
        try queue.setMaxConcurrentOperationCount(1)
        let inFlight = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        let workflow = Workflow(name: "slots", queue: queue)
        for index in 0..<8 {
            try workflow.add(AsyncClosureTask(name: "T\(index)") { _ in
                let now = inFlight.add(1, ordering: .relaxed).newValue
                most.max(now, ordering: .relaxed)
                await Task.yield()
                inFlight.subtract(1, ordering: .relaxed)
                return index
            })
        }
        #expect(await awaitResult { try await workflow.run() }?.successValue != nil)
        #expect(most.load(ordering: .relaxed) == 1)
    }
}

/// Suspends until the calling Swift task is cancelled.
private func neverResumedUnlessCancelled() async {
    let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
    for await _ in stream {}  // ends when the task is cancelled
    continuation.finish()
}
