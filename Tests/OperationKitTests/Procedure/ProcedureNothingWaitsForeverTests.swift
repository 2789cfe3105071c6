import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// Issue 13 ("Nothing waits forever"), items 5, 6 and 8: conditions decided as early as possible,
/// a timeout that ends callback work, and a condition added while the queue adds the procedure.
@Suite("Procedures: nothing waits forever", .offThePool)
struct ProcedureNothingWaitsForeverTests {
    /// How long these tests wait for what must happen (a hang becomes a failure).
    static let bound: Duration = .seconds(10)

    // MARK: Item 5

    @Test("issue 13 item 5: a failing condition ends the procedure while another condition's produced dependency never ends")
    func failingConditionDoesNotWaitForAnotherConditionsProducedDependency() async throws {
        let queue = ConcurrentOperationQueue(name: "item5")
        let evaluations = Recorder<String>()
        let produced = Recorder<ConcurrentOperation>()
        let procedure = ProcedureCountingHooks(name: "item5")
        // A: its dependency runs until it is cancelled.
        try procedure.addCondition(ProducingCondition("A", evaluations, produced: produced) {
            ProcedureAwaitingFinish(name: "never-ending", finishesWhenTold: true)
        })
        // B: fails at once.
        try procedure.addCondition(RecordingCondition("B", evaluations, .failed(ProcedureTestError(5))))
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens(within: Self.bound), "the procedure waited for A's produced dependency")
        // Made by the add, or, if a worker took the procedure first, by that worker before it
        // evaluated anything: made by now, not necessarily when the add returned.
        let neverEnding = try #require(produced.values.first as? ProcedureAwaitingFinish)
        #expect(procedure.isCancelled)
        #expect(errorIDs(procedure.errors) == [5])
        #expect(procedure.willExecuteCalls.value == 0)
        // A was never evaluated: its dependency had not finished when B decided.
        #expect(evaluations.values == ["B"])
        // The produced dependency still running was cancelled (and, told so, finished).
        #expect(await neverEnding.finishes(within: Self.bound))
        #expect(neverEnding.isCancelled)
        if !neverEnding.isFinished {
            neverEnding.cancel()
            neverEnding.finish()
        }
    }

    @Test("issue 13 item 5: on a queue limited to 1, a produced dependency that only a cancel ends does not take the slot the failing condition needs (fuzz seed 92)")
    func producedDependencyDoesNotStarveTheConditions() async throws {
        let queue = try ConcurrentOperationQueue(name: "item5-serial", maxConcurrentOperationCount: 1)
        let evaluations = Recorder<String>()
        let produced = Recorder<ConcurrentOperation>()
        let procedure = ProcedureCountingHooks(name: "item5-serial")
        try procedure.addCondition(ProducingCondition("A", evaluations, produced: produced) {
            ProcedureAwaitingFinish(name: "never-ending", finishesWhenTold: true)
        })
        try procedure.addCondition(RecordingCondition("B", evaluations, .failed(ProcedureTestError(92))))
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens(within: Self.bound), "the produced operation held the only slot")
        #expect(errorIDs(procedure.errors) == [92])
        #expect(await queue.empties(within: Self.bound))
        for operation in produced.values where !operation.isFinished {
            operation.cancel()
            (operation as? ProcedureAwaitingFinish)?.finish()
        }
    }

    @Test("issue 13 item 5: a produced dependency waits until its procedure has been taken, so it cannot take the slot the failing condition needs first (fuzz seeds 959 and 89)")
    func producedDependencyWaitsUntilItsProcedureIsTaken() async throws {
        let queue = try ConcurrentOperationQueue(name: "item5-held", maxConcurrentOperationCount: 1)
        let evaluations = Recorder<String>()
        let produced = Recorder<ConcurrentOperation>()
        // The procedure's own dependency, in no queue: it finishes when the test starts it.
        let dependency = ClosureOperation(name: "own dependency") {}
        let procedure = ProcedureCountingHooks(name: "item5-held")
        try procedure.addDependency(dependency)
        try queue.addOperation(procedure)
        // Added once the procedure is in its queue: the dependency is made and added at once. It
        // must not run before the procedure has been taken (its dependency has not finished), or
        // it holds the only slot forever.
        try procedure.addCondition(ProducingCondition("A", evaluations, produced: produced) {
            ProcedureAwaitingFinish(name: "never-ending", finishesWhenTold: true)
        })
        try procedure.addCondition(RecordingCondition("B", evaluations, .failed(ProcedureTestError(959))))
        let neverEnding = try #require(produced.values.first as? ProcedureAwaitingFinish)
        try dependency.start()
        #expect(await procedure.finished.opens(within: Self.bound), "the produced operation took the only slot before its procedure")
        #expect(errorIDs(procedure.errors) == [959])
        #expect(evaluations.values == ["B"])
        #expect(await neverEnding.finishes(within: Self.bound))
        #expect(neverEnding.isCancelled)
        #expect(neverEnding.executions.value == 0, "it ran before its procedure was taken")
        #expect(await queue.empties(within: Self.bound))
        if !neverEnding.isFinished {
            neverEnding.cancel()
            neverEnding.finish()
        }
    }

    @Test("issue 13 item 5: a produced dependency made after a barrier was added does not wait for that barrier (fuzz seed 4643)")
    func producedDependencyDoesNotWaitForALaterBarrier() async throws {
        let queue = suspendedProcedureQueue("item5-barrier")
        let evaluations = Recorder<String>()
        let procedure = ProcedureCountingHooks(name: "item5-barrier")
        try queue.addOperation(procedure)
        // The barrier waits for the procedure ...
        queue.addBarrierBlock {}
        // ... so the dependency this condition produces now must not wait for the barrier.
        try procedure.addCondition(ProducingCondition("late", evaluations) { ClosureOperation(name: "made") {} })
        queue.isSuspended = false
        #expect(await procedure.finished.opens(within: Self.bound), "the produced dependency waited for a barrier that waits for its procedure")
        #expect(evaluations.values == ["late"])
        #expect(await queue.empties(within: Self.bound))
    }

    @Test("issue 13 item 5: conditions start in the order they were added as each becomes evaluable; none after a failure")
    func evaluationOrderAndStopAfterFailure() async throws {
        let queue = ConcurrentOperationQueue(name: "item5-order")
        let evaluations = Recorder<String>()
        let gate = ProcedureAwaitingFinish(name: "slow-produced", finishesWhenTold: true)
        let procedure = ProcedureCountingHooks(name: "item5-order")
        // A waits for its dependency; B and C are evaluable at once, in this order; C fails, so D
        // (evaluable at once too) and A (once its dependency finished) are never evaluated.
        try procedure.addCondition(ProducingCondition("A", evaluations) { gate })
        try procedure.addCondition(RecordingCondition("B", evaluations))
        try procedure.addCondition(RecordingCondition("C", evaluations, .failed(ProcedureTestError(3))))
        try procedure.addCondition(RecordingCondition("D", evaluations))
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens(within: Self.bound))
        #expect(evaluations.values == ["B", "C"])
        #expect(errorIDs(procedure.errors) == [3])
        #expect(await gate.finishes(within: Self.bound))
        #expect(gate.isCancelled, "the produced dependency still running was cancelled")
        if !gate.isFinished {
            gate.cancel()
            gate.finish()
        }
    }

    @Test("issue 13 item 5: satisfied conditions still wait for every produced dependency")
    func satisfiedConditionsWaitForAllProducedDependencies() async throws {
        let queue = ConcurrentOperationQueue(name: "item5-satisfied")
        let order = Recorder<String>()
        let slow = ProcedureAwaitingFinish(name: "slow")
        let procedure = ClosureProcedure<Void>(name: "item5-satisfied") { order.record("work") }
        try procedure.addCondition(ProducingCondition("A", order) { slow })
        try procedure.addCondition(RecordingCondition("B", order))
        try queue.addOperation(procedure)
        #expect(await slow.executing.opens(within: Self.bound))
        #expect(await eventually(within: Self.bound) { order.values == ["B"] })
        #expect(!procedure.isFinished)
        order.record("slow finishes")
        slow.finish()
        #expect(await procedure.finishes(within: Self.bound))
        #expect(order.values == ["B", "slow finishes", "A", "work"])
    }

    @Test("issue 13 item 5: an ignored condition ends the procedure too, without an error, and cancels the produced dependency")
    func ignoredConditionDoesNotWaitEither() async throws {
        let queue = ConcurrentOperationQueue(name: "item5-ignored")
        let evaluations = Recorder<String>()
        let neverEnding = ProcedureAwaitingFinish(name: "never-ending", finishesWhenTold: true)
        let procedure = ProcedureCountingHooks(name: "item5-ignored")
        try procedure.addCondition(ProducingCondition("A", evaluations) { neverEnding })
        try procedure.addCondition(RecordingCondition("B", evaluations, .ignored))
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens(within: Self.bound))
        #expect(procedure.isCancelled && procedure.errors.isEmpty)
        #expect(evaluations.values == ["B"])
        #expect(await neverEnding.finishes(within: Self.bound))
        #expect(neverEnding.isCancelled)
    }

    @Test("issue 13 item 5: a procedure cancelled while a condition waits for its produced dependency cancels that dependency")
    func cancelWhileWaitingForProducedDependency() async throws {
        let queue = ConcurrentOperationQueue(name: "item5-cancel")
        let evaluations = Recorder<String>()
        let neverEnding = ProcedureAwaitingFinish(name: "never-ending", finishesWhenTold: true)
        let slow = ManualCondition()
        let procedure = ProcedureCountingHooks(name: "item5-cancel")
        try procedure.addCondition(ProducingCondition("A", evaluations) { neverEnding })
        try procedure.addCondition(slow)
        try queue.addOperation(procedure)
        #expect(await slow.evaluating.opens(within: Self.bound))
        #expect(await neverEnding.executing.opens(within: Self.bound))
        #expect(procedure.state == .evaluatingConditions)
        procedure.cancel()
        #expect(await procedure.finished.opens(within: Self.bound))
        #expect(await neverEnding.finishes(within: Self.bound))
        #expect(neverEnding.isCancelled)
        // Answers after the cancel change nothing; A was never evaluated.
        slow.complete(.failed(ProcedureTestError(9)))
        #expect(procedure.errors.isEmpty && procedure.willExecuteCalls.value == 0)
        #expect(evaluations.values.isEmpty)
    }

    // MARK: Item 6

    @Test("issue 13 item 6: a TimeoutObserver ends callback work that never calls back")
    func timeoutEndsCallbackWorkThatNeverCallsBack() async throws {
        let queue = ConcurrentOperationQueue(name: "item6")
        // Its work never finishes, not even when told it was cancelled (a lost network reply).
        let procedure = ProcedureAwaitingFinish(name: "lost-reply")
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try procedure.addObserver(TimeoutObserver(timeout: .milliseconds(20)))
        try queue.addOperation(procedure)
        #expect(await procedure.finishes(within: Self.bound), "the timeout did not end the procedure")
        #expect(await log.finishes(within: Self.bound))
        #expect(procedure.isCancelled)
        #expect(errorCodes(procedure.errors) == [.timedOut])
        #expect(log.errorsAtFinish.map { errorCodes($0) } == [[.timedOut], [.timedOut]])
        // The work's own finish, later, is ignored.
        #expect(!procedure.finish())
        #expect(errorCodes(procedure.errors) == [.timedOut])
        if !procedure.isFinished { procedure.finish() }
    }

    @Test("issue 13 item 6: a TimeoutObserver ends callback work that never calls back, also when it was cancelled first (fuzz seed 17)")
    func timeoutEndsCancelledCallbackWork() async throws {
        let queue = ConcurrentOperationQueue(name: "item6-cancelled")
        // Told it was cancelled, the work still never finishes (its callback is lost).
        let procedure = ProcedureAwaitingFinish(name: "lost-reply, cancelled")
        try procedure.addObserver(TimeoutObserver(timeout: .milliseconds(20)))
        try queue.addOperation(procedure)
        #expect(await waitingOffThePool { procedure.executing.wait(timeout: Self.bound) })
        procedure.cancel()
        #expect(await procedure.finishes(within: Self.bound), "a cancel before the timeout kept the timeout from ending it")
        #expect(errorCodes(procedure.errors) == [.timedOut])
        #expect(await queue.empties(within: Self.bound))
    }

    @Test("issue 13 item 6: TimeoutObserver with .cancelOnly only cancels; the work finishes itself")
    func timeoutCancelOnly() async throws {
        let queue = ConcurrentOperationQueue(name: "item6-cancel-only")
        let procedure = ProcedureAwaitingFinish(name: "cancel-only")
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try procedure.addObserver(TimeoutObserver(timeout: .milliseconds(20), action: .cancelOnly))
        try queue.addOperation(procedure)
        #expect(await log.cancelled.opens(within: Self.bound))
        #expect(procedure.isCancelled && !procedure.isFinished)
        #expect(procedure.state == .executing)
        #expect(procedure.finish(with: ProcedureTestError(6)))
        #expect(await log.finishes(within: Self.bound))
        #expect(errorCodes(procedure.errors) == [.timedOut, nil])
        #expect(errorIDs(procedure.errors) == [-1, 6])
    }

    @Test("issue 13 item 6: a zero or negative timeout is refused with invalidTimeout")
    func nonPositiveTimeoutIsRefused() {
        for timeout: Duration in [.zero, .milliseconds(-1), .seconds(-30)] {
            #expect(throws: OperationError.self) { try TimeoutObserver(timeout: timeout) }
            do {
                _ = try TimeoutObserver(timeout: timeout)
            } catch {
                #expect(error.code == .invalidTimeout)
            }
        }
        #expect((try? TimeoutObserver(timeout: .nanoseconds(1)))?.action == .cancelAndFinish)
    }

    @Test("issue 13 item 6: the work finishing from its did-cancel hook is not finished twice by the timeout")
    func timeoutWhenWorkFinishesOnCancel() async throws {
        let queue = ConcurrentOperationQueue(name: "item6-finishes-on-cancel")
        let procedure = ProcedureCountingHooks(name: "finishes-on-cancel") { _ in }
        try procedure.addObserver(ClosureObserver(didCancel: { procedure, _ in
            procedure.finish(with: ProcedureTestError(7))
        }))
        try procedure.addObserver(TimeoutObserver(timeout: .milliseconds(20)))
        try queue.addOperation(procedure)
        #expect(await procedure.finished.opens(within: Self.bound))
        #expect(errorCodes(procedure.errors) == [.timedOut, nil])
        #expect(errorIDs(procedure.errors) == [-1, 7])
        #expect(procedure.diagnostics.isEmpty, "\(procedure.diagnostics)")
    }

    // MARK: Item 8

    /// A condition that produces a dependency and records, when it is evaluated, whether that
    /// dependency had been made and had finished.
    struct DependencyProbeCondition: OperationCondition {
        let produced: Recorder<ConcurrentOperation>
        /// One entry per evaluation: `true` if the produced dependency had finished.
        let evaluations: Recorder<Bool>

        func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
            let operation = ClosureOperation(name: "probe-dependency") {}
            produced.record(operation)
            return operation
        }

        func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
            let made = produced.values
            evaluations.record(made.count == 1 && made[0].isFinished)
            completion(.satisfied)
        }
    }

    /// One race: `addCondition` on one thread against `addOperation` (or, with `queuedFirst`,
    /// the running queue's worker) on another. Returns a description of what went wrong, or `nil`.
    static func raceAddCondition(queuedFirst: Bool, queue: ConcurrentOperationQueue, iteration: Int) -> String? {
        let procedure = ClosureProcedure<Void>(name: "item8-\(iteration)") {}
        let produced = Recorder<ConcurrentOperation>()
        let evaluations = Recorder<Bool>()
        let start = Gate()
        let done = Latch(count: 2)
        let thrown = Recorder<OperationError>()
        let addFailure = Recorder<OperationError>()
        // A procedure with a condition already (the common case) in half of the runs.
        if iteration.isMultiple(of: 2) { try? procedure.addCondition(ClosureCondition { _ in .satisfied }) }
        if queuedFirst {
            do { try queue.addOperation(procedure) } catch { return "addOperation threw \(error)" }
        }
        DispatchQueue(label: "item8.adder").async {
            _ = start.wait(timeout: bound)
            if !queuedFirst {
                do throws(OperationError) { try queue.addOperation(procedure) } catch { addFailure.record(error) }
            }
            done.countDown()
        }
        DispatchQueue(label: "item8.conditioner").async {
            _ = start.wait(timeout: bound)
            do throws(OperationError) {
                try procedure.addCondition(DependencyProbeCondition(produced: produced, evaluations: evaluations))
            } catch {
                thrown.record(error)
            }
            done.countDown()
        }
        start.open()
        guard done.wait(timeout: bound) else { return "the racing threads did not return" }
        if let failure = addFailure.values.first { return "addOperation threw \(failure)" }
        guard procedure.waitUntilFinishedBlocking(timeout: bound) else { return "the procedure did not finish" }
        if let error = thrown.values.first {
            guard error.code == .tooLateToAddCondition else { return "addCondition threw \(error)" }
            return evaluations.values.isEmpty ? nil : "a refused condition was evaluated"
        }
        // Accepted: evaluated once, after its produced dependency finished.
        if evaluations.values != [true] {
            return "accepted condition evaluated \(evaluations.values) (produced: \(produced.values.count))"
        }
        return nil
    }

    @Test("issue 13 item 8: addCondition racing the queue's add takes full effect or throws tooLateToAddCondition", arguments: [false, true])
    func addConditionRacingTheQueue(queuedFirst: Bool) async throws {
        let queue = try ConcurrentOperationQueue(name: "item8-\(queuedFirst)", maxConcurrentOperationCount: 4)
        let failures = await waitingOffThePoolReturning { () -> [String] in
            var failures: [String] = []
            for iteration in 0..<600 {
                if let failure = Self.raceAddCondition(queuedFirst: queuedFirst, queue: queue, iteration: iteration) {
                    failures.append("iteration \(iteration): \(failure)")
                    if failures.count >= 5 { break }
                }
            }
            return failures
        }
        #expect(failures.isEmpty, "\(failures)")
        #expect(await queue.empties(within: Self.bound))
    }
}

/// Runs the blocking `body` on a thread outside the global pool and returns its result.
private func waitingOffThePoolReturning<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
    await withCheckedContinuation { continuation in
        DispatchQueue(label: "item8.driver").async { continuation.resume(returning: body()) }
    }
}
