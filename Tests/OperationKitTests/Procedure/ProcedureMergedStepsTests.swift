import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// The usual procedure — no condition or one synchronous condition, observers of did finish only —
/// takes shorter paths: without a condition (or cancelled, which skips them) it passes its
/// dependencies in the base operation's start step, a condition's answer is recorded in that
/// step, and its finish makes the base operation's finish step in its own critical section,
/// taking there what did finish needs. These tests pin what those paths must keep: the order of
/// the lifecycle, cancellation between the steps, and what the did-finish observers and the
/// completion block see.
@Suite("Procedure merged steps", .offThePool)
struct ProcedureMergedStepsTests {
    @Test("a synchronous condition that cancels its procedure, then answers satisfied: it never executes and finishes once")
    func cancelInsideSatisfiedCondition() async throws {
        let queue = ConcurrentOperationQueue(name: "merged-cancel")
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Void>(name: "merged-cancel") { ran.increment() }
        let seen = Recorder<String>()
        try procedure.addCondition(ClosureCondition { procedure in
            seen.record("\(procedure.state)")
            procedure.cancel()
            return .satisfied
        })
        let log = ProcedureEventLog()
        try procedure.addObserver(log.observer)
        try queue.addOperation(procedure)
        #expect(await log.finishes())
        #expect(await queue.empties())
        #expect(ran.value == 0)
        #expect(procedure.isCancelled && !procedure.isFailed)
        #expect(procedure.state == .finished)
        #expect(seen.values == ["evaluatingConditions"])
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
    }

    /// A single `ClosureCondition` is asked through the procedure's field, lent without a retain
    /// (issue 17, `prepareSingleClosureCondition`). Here the condition cancels its procedure, which
    /// puts it back in its queue, and answers only once another worker has finished it: that
    /// finish must not let go of the condition while it runs, and the worker that asked it must
    /// let go of it once it answered — while the procedure itself is still held (its `deinit` would
    /// free it too, and hide a condition kept for ever).
    @Test("a condition that answers after another worker finished its cancelled procedure: let go of once it answered", arguments: [true, false])
    func conditionAnsweringAfterFinish(satisfied: Bool) async throws {
        final class Tracked: Sendable {}
        let queue = ConcurrentOperationQueue(name: "merged-lent")
        let ran = AtomicCounter()
        let procedure = ClosureProcedure<Void>(name: "merged-lent") { ran.increment() }
        let seen = Recorder<String>()
        weak var captured: Tracked?
        do {
            let tracked = Tracked()
            captured = tracked
            try procedure.addCondition(ClosureCondition { procedure in
                procedure.cancel()
                // Another worker takes it from the queue and finishes it without executing.
                let finished = procedure.waitUntilFinishedBlocking(timeout: procedureTimeout)
                seen.record("finished while asked: \(finished) \(procedure.state)")
                return withExtendedLifetime(tracked) { satisfied ? .satisfied : .failed(ProcedureTestError(1)) }
            })
        }
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(await queue.empties())
        #expect(await eventually { captured == nil })
        #expect(seen.values == ["finished while asked: true finished"])
        #expect(ran.value == 0)
        #expect(procedure.isCancelled && !procedure.isFailed && procedure.state == .finished)
        withExtendedLifetime(procedure) {}
    }

    @Test("a satisfied synchronous condition, a did-finish observer: each step sees its state, in order", arguments: [1, 64])
    func satisfiedThenFinished(count: Int) async throws {
        let queue = ConcurrentOperationQueue(name: "merged-finish")
        var procedures: [ClosureProcedure<Void>] = []
        var logs: [Recorder<String>] = []
        for index in 0..<count {
            let log = Recorder<String>()
            let holder = ProcedureHolder()
            let procedure = ClosureProcedure<Void>(name: "merged-\(index)") {
                log.record("work \(holder.procedure.map { "\($0.state)" } ?? "?")")
            }
            holder.procedure = procedure
            try procedure.addCondition(ClosureCondition { procedure in
                log.record("condition \(procedure.state)")
                return .satisfied
            })
            try procedure.addObserver(ClosureObserver(didFinish: { procedure, errors in
                log.record("didFinish \(procedure.state) \(procedure.isFinished) \(errors.count)")
            }))
            procedure.completionBlock = { log.record("completion \(holder.procedure.map { "\($0.state)" } ?? "?")") }
            procedures.append(procedure)
            logs.append(log)
        }
        try queue.addOperations(procedures, waitUntilFinished: false)
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(await queue.empties())
        for (procedure, log) in zip(procedures, logs) {
            #expect(procedure.state == .finished && !procedure.isCancelled && procedure.errors.isEmpty)
            #expect(log.values == [
                "condition evaluatingConditions", "work executing", "completion finished", "didFinish finished true 0",
            ])
        }
    }

    @Test(
        "cancelled before executing, nobody to tell did cancel or will finish: it never runs, keeps a cancel's or a finish's errors, and an observer still sees did finish",
        arguments: [1, 64]
    )
    func quickFinishWithoutExecuting(count: Int) async throws {
        let queue = ConcurrentOperationQueue(name: "merged-cancelled")
        queue.isSuspended = true
        let ran = AtomicCounter()
        var bare: [ClosureProcedure<Int>] = []
        var observed: [ClosureProcedure<Void>] = []
        var logs: [Recorder<String>] = []
        var observedLogs: [Recorder<String>] = []
        for index in 0..<count {
            let log = Recorder<String>()
            let observedLog = Recorder<String>()
            let holder = ProcedureHolder()
            let procedure = ClosureProcedure<Int>(name: "cancelled-\(index)") {
                ran.increment()
                return index
            }
            holder.procedure = procedure
            procedure.completionBlock = { log.record("completion \(holder.procedure.map { "\($0.state)" } ?? "?")") }
            bare.append(procedure)
            logs.append(log)
            // With a condition and a did-finish observer: the finish goes through did finish.
            observed.append(ClosureProcedure<Void>(
                name: "cancelled-observed-\(index)",
                conditions: [ClosureCondition { _ in .satisfied }],
                observers: [ClosureObserver(didFinish: { procedure, errors in
                    observedLog.record("didFinish \(procedure.state) \(procedure.isFinished) \(errors.count)")
                })]
            ) { ran.increment() })
            observedLogs.append(observedLog)
        }
        try queue.addOperations(bare + observed, waitUntilFinished: false)
        for (index, procedure) in bare.enumerated() {
            if index.isMultiple(of: 2) {
                procedure.cancel()
                // The first finish after a cancel counts: its errors are kept for the finish without executing.
                #expect(procedure.finish(with: ProcedureTestError(index)))
            } else {
                // A cancel with an error records it (the procedure failed); a second cancel changes nothing.
                procedure.cancel(with: ProcedureTestError(1000 + index))
                procedure.cancel(with: ProcedureTestError(2000 + index))
            }
        }
        for procedure in observed { procedure.cancel() }
        queue.isSuspended = false
        for procedure in bare + observed { #expect(await procedure.finishes()) }
        #expect(await queue.empties())
        #expect(ran.value == 0)
        for (index, (procedure, log)) in zip(bare, logs).enumerated() {
            #expect(procedure.state == .finished && procedure.isCancelled && procedure.output == nil)
            #expect(errorIDs(procedure.errors) == (index.isMultiple(of: 2) ? [index] : [1000 + index]))
            #expect(procedure.isFailed)
            #expect(log.values == ["completion finished"])
        }
        for (procedure, log) in zip(observed, observedLogs) {
            #expect(procedure.state == .finished && procedure.isCancelled && procedure.errors.isEmpty)
            #expect(log.values == ["didFinish finished true 0"])
        }
    }

    @Test(
        "nothing attached (the plain start and finish): each step sees its state; the value, a cancel while executing and a thrown error are kept",
        arguments: [1, 64]
    )
    func plainStartAndFinish(count: Int) async throws {
        let queue = ConcurrentOperationQueue(name: "merged-plain")
        var procedures: [ClosureProcedure<Int>] = []
        var voids: [ClosureProcedure<Void>] = []
        var logs: [Recorder<String>] = []
        for index in 0..<count {
            let log = Recorder<String>()
            let holder = ProcedureHolder()
            let procedure = ClosureProcedure<Int>(name: "plain-\(index)") {
                log.record("work \(holder.procedure.map { "\($0.state)" } ?? "?")")
                // A cancel while executing: the procedure is told (nobody listens) and still
                // finishes with its value.
                if index.isMultiple(of: 2) { holder.procedure?.cancel() }
                return index
            }
            holder.procedure = procedure
            procedure.completionBlock = { log.record("completion \(holder.procedure.map { "\($0.state)" } ?? "?")") }
            procedures.append(procedure)
            logs.append(log)
            // A Void body that throws on odd indices: the error goes the general way.
            voids.append(ClosureProcedure<Void>(name: "plain-void-\(index)") {
                if !index.isMultiple(of: 2) { throw ProcedureTestError(index) }
            })
        }
        try queue.addOperations(procedures + voids, waitUntilFinished: false)
        for procedure in procedures { #expect(await procedure.finishes()) }
        for procedure in voids { #expect(await procedure.finishes()) }
        #expect(await queue.empties())
        for (index, (procedure, log)) in zip(procedures, logs).enumerated() {
            #expect(procedure.state == .finished && procedure.isFinished && procedure.errors.isEmpty)
            #expect(procedure.output == index)
            #expect(procedure.isCancelled == index.isMultiple(of: 2))
            #expect(log.values == ["work executing", "completion finished"])
        }
        for (index, procedure) in voids.enumerated() {
            #expect(procedure.state == .finished)
            if index.isMultiple(of: 2) {
                #expect(procedure.output != nil && procedure.errors.isEmpty)
            } else {
                #expect(procedure.output == nil && errorIDs(procedure.errors) == [index])
            }
        }
    }
}

extension ProcedureMergedStepsTests {
    @Test(
        "cancelled with conditions before a worker takes it: no condition is asked, it passes its dependencies in its start step and finishes without executing",
        arguments: [1, 64]
    )
    func cancelledWithConditions(count: Int) async throws {
        let queue = suspendedProcedureQueue("merged-cancelled-conditions")
        let ran = AtomicCounter()
        let asked = Recorder<String>()
        // A dependency that never runs (its queue stays suspended): a cancelled procedure does
        // not wait for it.
        let elsewhere = suspendedProcedureQueue("merged-cancelled-conditions.elsewhere")
        let neverRuns = ClosureOperation(name: "never-runs") {}
        try elsewhere.addOperation(neverRuns)
        var procedures: [ProcedureOperation] = []
        var logs: [Recorder<String>] = []
        var producing: [TestCondition] = []
        for index in 0..<count {
            let log = Recorder<String>()
            let holder = ProcedureHolder()
            // The usual one: a ClosureCondition and a did-finish observer, given at init.
            let usual = ClosureProcedure<Void>(
                name: "usual-\(index)",
                conditions: [ClosureCondition { procedure in
                    asked.record("usual \(procedure.state)")
                    return .satisfied
                }],
                observers: [ClosureObserver(didFinish: { procedure, errors in
                    log.record("didFinish \(procedure.state) \(procedure.isFinished) \(errors.count)")
                })]
            ) { ran.increment() }
            holder.procedure = usual
            usual.completionBlock = { log.record("completion \(holder.procedure.map { "\($0.state)" } ?? "?")") }
            // A condition that produces a dependency (made when the queue adds the procedure),
            // and one that waits for a dependency that never finishes.
            let condition = TestCondition(name: "producing-\(index)", produces: { ClosureOperation(name: "produced") {} })
            let general = ClosureProcedure<Void>(name: "general-\(index)") { ran.increment() }
            try general.addCondition(condition)
            try general.addCondition(ClosureCondition { procedure in
                asked.record("general \(procedure.state)")
                return .satisfied
            })
            try general.addDependency(neverRuns)
            procedures += [usual, general]
            logs.append(log)
            producing.append(condition)
        }
        try queue.addOperations(procedures, waitUntilFinished: false)
        for procedure in procedures { procedure.cancel() }
        #expect(procedures.allSatisfy { $0.state == .pending && $0.isCancelled })
        queue.isSuspended = false
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(await queue.empties())
        #expect(ran.value == 0)
        #expect(asked.values.isEmpty, "conditions asked: \(asked.values)")
        #expect(producing.allSatisfy { $0.evaluationCount == 0 })
        for procedure in procedures {
            #expect(procedure.state == .finished && procedure.isCancelled && procedure.errors.isEmpty)
        }
        for log in logs { #expect(log.values == ["completion finished", "didFinish finished true 0"]) }
        // The produced dependencies were cancelled with their procedure (none ran its work).
        for condition in producing {
            #expect(condition.producedDependencies.allSatisfy { $0.isCancelled })
        }
        #expect(!neverRuns.isFinished)
        neverRuns.cancel()
        elsewhere.isSuspended = false
        #expect(await elsewhere.empties())
    }

    /// One race: a cancel on another thread while a worker takes a procedure with a condition
    /// (the worker looks for the cancel without the lock, the start step again under it).
    /// Returns what went wrong, or `nil`.
    static func raceCancelAgainstConditions(queue: ConcurrentOperationQueue, iteration: Int) -> String? {
        let bound = Duration.seconds(10)
        let log = Recorder<String>()
        let finishes = AtomicCounter()
        let procedure = ClosureProcedure<Void>(
            name: "merged-cancel-race-\(iteration)",
            conditions: [ClosureCondition { procedure in
                log.record("condition \(procedure.state)")
                return .satisfied
            }],
            observers: [ClosureObserver(didFinish: { procedure, _ in
                finishes.increment()
                log.record("didFinish \(procedure.state)")
            })]
        ) { log.record("work") }
        let start = Gate()
        let returned = Latch(count: 1)
        DispatchQueue(label: "merged-cancel-race.canceller").async {
            _ = start.wait(timeout: bound)
            // A different head start in each iteration (not a synchronisation: any interleaving
            // must pass).
            var spin = 0
            for step in 0..<(iteration % 64) * 40 { spin &+= step }
            keep(spin)
            procedure.cancel()
            returned.countDown()
        }
        start.open()
        do { try queue.addOperation(procedure) } catch { return "addOperation threw \(error)" }
        guard returned.wait(timeout: bound) else { return "cancel did not return" }
        guard procedure.waitUntilFinishedBlocking(timeout: bound) else { return "the procedure did not finish" }
        guard procedure.state == .finished else { return "state \(procedure.state)" }
        // The condition is asked at most once, once the procedure evaluates its conditions (a
        // cancel meanwhile stops the procedure waiting for it: it may finish, on another worker,
        // while the condition still runs, which then reads a later state); the work runs only
        // after it, and did finish after the work. (A cancel after the finish changes nothing.)
        let events = log.values
        let asked = events.filter { $0.hasPrefix("condition ") }
        if asked.count > 1 { return "condition asked \(asked.count) times: \(events)" }
        if let state = asked.first?.dropFirst("condition ".count),
            !["evaluatingConditions", "ready", "finishing", "finished"].contains(String(state))
        {
            return "condition asked in state \(state): \(events)"
        }
        let executed = ["condition evaluatingConditions", "work", "didFinish finished"]
        if events.contains("work") || !procedure.isCancelled {
            if events != executed { return "events \(events) (cancelled: \(procedure.isCancelled))" }
        } else if events.filter({ $0 == "didFinish finished" }).count != 1 || events.count != asked.count + 1 {
            return "events \(events) (cancelled)"
        }
        if finishes.value != 1 { return "did finish told \(finishes.value) times" }
        return nil
    }

    @Test("a cancel racing the worker that takes a procedure with a condition: the condition is asked at most once, before any work, and it finishes once")
    func cancelRacingConditions() async throws {
        let queue = try ConcurrentOperationQueue(name: "merged-cancel-race", maxConcurrentOperationCount: 4)
        let failures = Self.failures(of: 500) { Self.raceCancelAgainstConditions(queue: queue, iteration: $0) }
        #expect(failures.isEmpty, "\(failures)")
        #expect(await queue.empties())
    }

    @Test("a finish taken in its own critical section: the category is given back and the counts read 0 before did finish, which comes after the completion block")
    func quickFinishWithCategory() async throws {
        let queue = try ConcurrentOperationQueue(name: "merged-category", maxConcurrentOperationCount: 2)
        let category = uniqueExclusivityCategory("merged")
        let log = Recorder<String>()
        let secondExecuting = Latch()
        let second = ClosureProcedure<Void>(name: "second", conditions: [MutuallyExclusive(category: category)]) {
            secondExecuting.countDown()
        }
        let first = ClosureProcedure<Void>(
            name: "first",
            conditions: [ClosureCondition { _ in .satisfied }, MutuallyExclusive(category: category)],
            observers: [ClosureObserver(didFinish: { procedure, _ in
                log.record("didFinish \(procedure.state) \(procedure.conditionCount) \(procedure.observerCount)")
                // The category was given back before did finish: the second procedure, waiting
                // for it, executes meanwhile (on the other worker).
                log.record(secondExecuting.wait(timeout: .seconds(10)) ? "second executing" : "second still waiting")
            })]
        ) {
            log.record("first work")
            // Added while the first holds the category: it waits for it.
            do { try queue.addOperation(second) } catch { log.record("add threw \(error)") }
        }
        first.completionBlock = { log.record("completion") }
        try queue.addOperation(first)
        #expect(await first.finishes())
        #expect(await second.finishes())
        #expect(await queue.empties())
        #expect(log.values == ["first work", "completion", "didFinish finished 0 0", "second executing"])
    }

    /// One race: a condition added on another thread while the queue adds a procedure without
    /// conditions and a worker takes it (the worker looks for conditions without the lock, the
    /// start step again under it). Returns what went wrong, or `nil`.
    static func raceConditionAgainstStart(queue: ConcurrentOperationQueue, iteration: Int) -> String? {
        let bound = Duration.seconds(10)
        let log = Recorder<String>()
        let procedure = ClosureProcedure<Void>(name: "merged-race-\(iteration)") { log.record("work") }
        let fails = iteration.isMultiple(of: 2)
        let start = Gate()
        let returned = Latch(count: 1)
        let refusal = Recorder<OperationError>()
        DispatchQueue(label: "merged-race.conditioner").async {
            _ = start.wait(timeout: bound)
            // A different head start in each iteration, to meet the worker at different points
            // (not a synchronisation: any interleaving must pass).
            var spin = 0
            for step in 0..<(iteration % 64) * 40 { spin &+= step }
            keep(spin)
            do throws(OperationError) {
                try procedure.addCondition(ClosureCondition { _ in
                    log.record("condition")
                    return fails ? .failed(TestError(iteration)) : .satisfied
                })
            } catch {
                refusal.record(error)
            }
            returned.countDown()
        }
        start.open()
        do { try queue.addOperation(procedure) } catch { return "addOperation threw \(error)" }
        guard returned.wait(timeout: bound) else { return "addCondition did not return" }
        guard procedure.waitUntilFinishedBlocking(timeout: bound) else { return "the procedure did not finish" }
        if let error = refusal.values.first {
            // Refused: the work ran, the condition never did.
            guard error.code == .tooLateToAddCondition else { return "addCondition threw \(error)" }
            return log.values == ["work"] ? nil : "refused condition, then \(log.values)"
        }
        // Accepted: evaluated once, before the work, which a failure keeps from running.
        let expected = fails ? ["condition"] : ["condition", "work"]
        if log.values != expected { return "accepted condition (fails: \(fails)), then \(log.values)" }
        if fails != procedure.isCancelled { return "accepted condition (fails: \(fails)), cancelled: \(procedure.isCancelled)" }
        return nil
    }

    /// Runs `iteration` for 0..<count and returns the failures it reported, each with its
    /// iteration, stopping at the fifth.
    private static func failures(of count: Int, _ iteration: (Int) -> String?) -> [String] {
        var failures: [String] = []
        for index in 0..<count {
            if let failure = iteration(index) {
                failures.append("iteration \(index): \(failure)")
                if failures.count >= 5 { break }
            }
        }
        return failures
    }

    @Test("a procedure without conditions: a condition added while a worker takes it is evaluated before the work, or refused")
    func conditionRacingTheStartWithoutConditions() async throws {
        let queue = try ConcurrentOperationQueue(name: "merged-race", maxConcurrentOperationCount: 4)
        let failures = Self.failures(of: 500) { Self.raceConditionAgainstStart(queue: queue, iteration: $0) }
        #expect(failures.isEmpty, "\(failures)")
        #expect(await queue.empties())
    }
}

/// Keeps a value from being optimised away.
@inline(never)
private func keep(_ value: Int) { _ = value }

/// The procedure a closure of that procedure reads (set before it is added to a queue, which
/// publishes it to the worker).
private final class ProcedureHolder: @unchecked Sendable {
    var procedure: ProcedureOperation?
}
