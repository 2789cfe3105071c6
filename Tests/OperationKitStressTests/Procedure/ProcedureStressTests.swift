import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// `finish` and `cancel` of procedures racing from many threads, with conditions decided now,
    /// later, or failing, and an observer on every procedure that checks the observer contract.
    @Suite("Procedure finish and cancel races")
    struct ProcedureRaces {
        /// The procedure's condition.
        enum ConditionPlan: CaseIterable {
            case none, satisfied, deferredSatisfied, failing, deferredFailing

            var fails: Bool { self == .failing || self == .deferredFailing }
        }

        /// Who cancels the procedure, and when.
        enum CancelPlan {
            /// Nobody (until the final pass, after everything finished).
            case none
            /// The adding thread, just before it adds the procedure.
            case beforeEnqueue
            /// Two racing threads, one with an error and one without, at random points of the run:
            /// the procedure is then waiting, evaluating its condition, executing or finished.
            case racers
            /// A block the work dispatches, racing with the work's own finish.
            case duringWork
            /// Two threads that wait until the procedure reports `executing`, then both cancel it
            /// at once (one with an error).
            case onceExecuting
            /// Like `onceExecuting`, but they call `finish()` (stray finishes racing the work's).
            case strayFinishOnceExecuting
        }

        /// How the work finishes.
        enum FinishPlan {
            case inline, otherThread, otherThreadWithError
        }

        struct Plan {
            var condition: ConditionPlan
            var cancel: CancelPlan
            var finish: FinishPlan
            var finishesWhenCancelled: Bool
            /// Racer pacing: racers A and B act once this many procedures have begun finishing.
            var racerAAt: Int
            var racerBAt: Int

            init(index: Int, count: Int, using random: inout SplitMix64) {
                let conditionRoll = random.below(100)
                condition = switch conditionRoll {
                case ..<30: .none
                case ..<50: .satisfied
                case ..<75: .deferredSatisfied
                case ..<85: .failing
                default: .deferredFailing
                }
                let cancelRoll = random.below(100)
                cancel = switch cancelRoll {
                case ..<25: .none
                case ..<32: .beforeEnqueue
                case ..<62: .racers
                case ..<74: .duringWork
                case ..<88: .onceExecuting
                default: .strayFinishOnceExecuting
                }
                let finishRoll = random.below(100)
                finish = switch finishRoll {
                case ..<15: .inline
                case ..<80: .otherThread
                default: .otherThreadWithError
                }
                finishesWhenCancelled = random.chance(15)
                racerAAt = min(count - 1, max(0, index + random.below(121) - 60))
                racerBAt = min(count - 1, max(0, index + random.below(121) - 60))
            }
        }

        @Test(
            "finish and cancel race from many threads: every procedure keeps the observer contract",
            arguments: [3, 8, 32])
        func finishAndCancelRace(maxConcurrentOperationCount: Int) throws {
            let count = Stress.count(10_000)
            var random = SplitMix64(seed: 0x5EED_0001 &+ UInt64(maxConcurrentOperationCount))
            let plans = (0..<count).map { Plan(index: $0, count: count, using: &random) }
            let clock = RelaxedClock()
            let racers = DispatchGroup()
            let conditionQueue = DispatchQueue(label: "procedure-race.conditions", attributes: .concurrent)
            let finishedCount = Atomic<Int>(0)
            let allFinished = Latch(count: count)
            let traces = (0..<count).map { _ in EventTrace() }
            let tallies = (0..<count).map { _ in WorkTally() }
            let queue = try ConcurrentOperationQueue(
                name: "procedure-race", maxConcurrentOperationCount: maxConcurrentOperationCount)

            let procedures = try (0..<count).map { index -> ClosureProcedure<Int> in
                let plan = plans[index]
                let tally = tallies[index]
                let failure = StressFailure(origin: .condition, id: index)
                let condition: (any OperationCondition)? = switch plan.condition {
                case .none: nil
                case .satisfied: ClosureCondition { _ in .satisfied }
                case .deferredSatisfied: DeferredCondition(failure: nil, on: conditionQueue)
                case .failing: ClosureCondition { _ in .failed(failure) }
                case .deferredFailing: DeferredCondition(failure: failure, on: conditionQueue)
                }
                let observer = TracingObserver(trace: traces[index], clock: clock, willFinish: { _ in
                    finishedCount.add(1, ordering: .relaxed)
                }, didFinish: { allFinished.countDown() })
                // The odd ones are given their condition and observer at init, the even ones after.
                let atInit = index % 2 == 1
                let work: @Sendable (ClosureProcedure<Int>) -> Void = { procedure in
                    tally.recordStart(clock)
                    if plan.cancel == .duringWork {
                        racers.enter()
                        DispatchQueue.global().async {
                            procedure.cancel(with: StressFailure(origin: .cancel, id: index * 8 + 2))
                            racers.leave()
                        }
                    }
                    switch plan.finish {
                    case .inline:
                        tally.recordFinish(procedure.finish(withValue: index), byWork: true)
                    case .otherThread:
                        racers.enter()
                        DispatchQueue.global().async {
                            tally.recordFinish(procedure.finish(withValue: index), byWork: true)
                            racers.leave()
                        }
                    case .otherThreadWithError:
                        racers.enter()
                        DispatchQueue.global().async {
                            let won = procedure.finish(with: StressFailure(origin: .work, id: index))
                            tally.recordFinish(won, byWork: true)
                            racers.leave()
                        }
                    }
                }
                let procedure = ClosureProcedure<Int>(
                    name: "race\(index)", conditions: atInit ? condition.map { [$0] } ?? [] : [], observers: atInit ? [observer] : [],
                    asynchronous: work)
                procedure.completionBlock = { tally.recordCompletion(clock) }
                procedure.finishesWhenCancelled = plan.finishesWhenCancelled
                if !atInit {
                    if let condition { try procedure.addCondition(condition) }
                    try procedure.addObserver(observer)
                }
                return procedure
            }

            let deadline = stressDeadline()
            let reached: @Sendable (Int) -> Bool = { target in
                spin(until: deadline) { finishedCount.load(ordering: .relaxed) >= target }
            }
            let threadsFinished = onThreads(5, label: "procedure-race") { role in
                switch role {
                case 0:
                    // Adds in batches of 1 to 64, alone or together; cancels the planned ones
                    // just before.
                    var index = 0
                    while index < count {
                        let end = min(count, index + 1 + (index * 7) % 64)
                        for cancelled in index..<end where plans[cancelled].cancel == .beforeEnqueue {
                            if cancelled % 2 == 0 {
                                procedures[cancelled].cancel(with: StressFailure(origin: .cancel, id: cancelled * 8))
                            } else {
                                procedures[cancelled].cancel()
                            }
                        }
                        if (end - index) % 3 == 0 {
                            for procedure in procedures[index..<end] { try? queue.addOperation(procedure) }
                        } else {
                            try? queue.addOperations(Array(procedures[index..<end]), waitUntilFinished: false)
                        }
                        index = end
                    }
                case 1, 2:
                    // Racer A (with an error) and racer B (without), each at its own pace.
                    let targets = (0..<count).filter { plans[$0].cancel == .racers }
                        .map { (index: $0, at: role == 1 ? plans[$0].racerAAt : plans[$0].racerBAt) }
                        .sorted { $0.at < $1.at }
                    for target in targets {
                        guard reached(target.at) else { return }
                        if role == 1 {
                            procedures[target.index].cancel(with: StressFailure(origin: .cancel, id: target.index * 8 + 1))
                        } else {
                            procedures[target.index].cancel()
                        }
                    }
                default:
                    // Two threads wait for each target to execute, then both cancel it (one with an
                    // error) or finish it at once.
                    for index in 0..<count {
                        let plan = plans[index].cancel
                        guard plan == .onceExecuting || plan == .strayFinishOnceExecuting else { continue }
                        let procedure = procedures[index]
                        guard spin(until: deadline, { procedure.state >= .executing }) else { return }
                        if plan == .onceExecuting {
                            if role == 3 {
                                procedure.cancel(with: StressFailure(origin: .cancel, id: index * 8 + 3))
                            } else {
                                procedure.cancel()
                            }
                        } else {
                            tallies[index].recordFinish(procedure.finish())
                        }
                    }
                }
            }
            #expect(threadsFinished)
            try #require(allFinished.wait(timeout: Stress.timeout), "\(allFinished.count) procedures did not finish")
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            try #require(racers.wait(timeout: .now() + .seconds(60)) == .success)

            Self.checkOutcomes(procedures, plans, traces, tallies)
            Self.checkLateCancelChangesNothing(procedures, traces)
        }

        static func checkOutcomes(
            _ procedures: [ClosureProcedure<Int>], _ plans: [Plan], _ traces: [EventTrace], _ tallies: [WorkTally]
        ) {
            let count = procedures.count
            // A procedure finished once it is executing but before its work starts — by a stray
            // finish(), or by a cancel with finishesWhenCancelled — has entered executing: will and
            // did execute are told, and the work is skipped, since the procedure has finished.
            func strayFinishSkippedWork(_ index: Int) -> Bool {
                plans[index].cancel == .strayFinishOnceExecuting && tallies[index].executionCount == 0
                    && tallies[index].finishWinCount == 1
            }
            func finishedBeforeWork(_ index: Int) -> Bool {
                tallies[index].executionCount == 0 && traces[index].count(.willExecute) == 1
                    && (strayFinishSkippedWork(index) || (plans[index].finishesWhenCancelled && procedures[index].isCancelled))
            }
            let lifecycle = problems(count) { index in
                traces[index].lifecycleViolation(executed: tallies[index].executionCount > 0 || finishedBeforeWork(index))
            }
            #expect(lifecycle.count == 0, "observer contract broken: \(lifecycle)")

            let unfinished = problems(count) { index in
                let procedure = procedures[index]
                if !procedure.isFinished || procedure.state != .finished {
                    return "isFinished \(procedure.isFinished), state \(procedure.state)"
                }
                let completions = tallies[index].completionCount
                return completions == 1 ? nil : "completion block ran \(completions)×"
            }
            #expect(unfinished.count == 0, "not finished properly: \(unfinished)")

            let work = problems(count) { index in
                let plan = plans[index]
                let procedure = procedures[index]
                let executions = tallies[index].executionCount
                if executions > 1 { return "work ran \(executions)×" }
                if executions == 1 && plan.cancel == .beforeEnqueue { return "ran though cancelled before it was enqueued" }
                if executions == 1 && plan.condition.fails { return "ran though its condition failed" }
                if executions == 0 && !procedure.isCancelled && !plan.condition.fails && !strayFinishSkippedWork(index) {
                    return "did not run though neither cancelled nor failing its condition"
                }
                if plan.condition.fails && !procedure.isCancelled { return "condition failed, not cancelled" }
                let wins = tallies[index].finishWinCount
                if executions == 0 && wins != 0 && !strayFinishSkippedWork(index) {
                    return "finish() won \(wins)× without executing"
                }
                let finishedByCancel = plan.finishesWhenCancelled && procedure.isCancelled
                if executions == 1 && (wins > 1 || (wins == 0 && !finishedByCancel)) {
                    return "finish() won \(wins)× (finishesWhenCancelled \(plan.finishesWhenCancelled))"
                }
                return nil
            }
            #expect(work.count == 0, "wrong work outcome: \(work)")

            let errors = problems(count) { index in
                let plan = plans[index]
                let procedure = procedures[index]
                let trace = traces[index]
                let errors = procedure.errors
                let signature = StressFailure.signature(errors)
                if trace.willFinishErrors != signature || trace.didFinishErrors != signature {
                    return "errors told to will/did finish differ from errors: \(errors)"
                }
                let failures = errors.compactMap { $0 as? StressFailure }
                if failures.count != errors.count { return "unexpected errors: \(errors)" }
                // did-cancel carried the error of the cancel that took effect (or the condition's).
                let cancelCodes = failures.filter { $0.origin == .cancel || $0.origin == .condition }.map(\.code)
                switch trace.cancelErrorCode {
                case -1:
                    if procedure.isCancelled || !cancelCodes.isEmpty {
                        return "not told did-cancel, but isCancelled \(procedure.isCancelled), errors \(errors)"
                    }
                case 0:
                    if !cancelCodes.isEmpty { return "cancelled without an error, but errors \(errors)" }
                case let code:
                    if cancelCodes != [code] { return "did-cancel carried error \(code), errors \(errors)" }
                }
                if !procedure.isCancelled && trace.count(.didCancel) > 0 { return "told did-cancel, not cancelled" }
                let workWon = tallies[index].workFinishWinCount == 1
                let workFailures = failures.filter { $0.origin == .work }
                if plan.finish == .otherThreadWithError {
                    if workWon != (workFailures.count == 1) || procedure.output != nil {
                        return "work's failing finish won \(workWon), errors \(errors), output \(String(describing: procedure.output))"
                    }
                } else {
                    if !workFailures.isEmpty { return "work error without a failing finish: \(errors)" }
                    if workWon ? procedure.output != index : procedure.output != nil {
                        return "work's finish won \(workWon), output \(String(describing: procedure.output))"
                    }
                }
                if plan.condition.fails && trace.cancelErrorCode == StressFailure(origin: .condition, id: index).code {
                    if procedure.output != nil { return "output though its condition failed" }
                }
                return nil
            }
            #expect(errors.count == 0, "inconsistent errors: \(errors)")
        }

        /// Cancelling a finished procedure changes nothing: no event, no error, no flag.
        static func checkLateCancelChangesNothing(_ procedures: [ClosureProcedure<Int>], _ traces: [EventTrace]) {
            let before = procedures.indices.map { index in
                (traces[index].events, StressFailure.signature(procedures[index].errors), procedures[index].isCancelled)
            }
            for (index, procedure) in procedures.enumerated() {
                procedure.cancel(with: StressFailure(origin: .late, id: index))
                procedure.cancel()
            }
            let changed = problems(procedures.count) { index in
                let after = (traces[index].events, StressFailure.signature(procedures[index].errors),
                             procedures[index].isCancelled)
                return after == before[index] ? nil : "before \(before[index]), after \(after)"
            }
            #expect(changed.count == 0, "cancelling a finished procedure changed it: \(changed)")
        }
    }
}

extension StressTests {
    /// The races of the storm above, each aimed at one narrow window so that it is hit every run:
    /// a cancel or finish from another thread just as the worker starts a procedure, while the
    /// worker delivers its will-execute, or just as `execute()` returns.
    @Suite("Procedure event order under targeted races")
    struct ProcedureTargetedRaces {
        /// What the racing thread does once the procedure reports `executing`.
        enum Action: CustomStringConvertible {
            case cancel, finish

            var description: String { self == .cancel ? "cancel" : "finish" }
        }

        /// One procedure's events, as positions in its own sequence (0: not told).
        final class Order: Sendable {
            enum Event: Int, CaseIterable, CustomStringConvertible {
                case willExecute, didExecute, didCancel, willFinish, didFinish

                var description: String {
                    ["willExecute", "didExecute", "didCancel", "willFinish", "didFinish"][rawValue]
                }
            }

            private let sequence = Atomic<Int>(0)
            private let slots = Event.allCases.map { _ in EventTrace.Slot() }
            /// Whether did-cancel observers saw `isCancelled == false`.
            let cancelNotVisible = Atomic<Int>(0)

            init() {}

            func mark(_ event: Event) {
                slots[event.rawValue].first.store(sequence.add(1, ordering: .relaxed).newValue, ordering: .relaxed)
            }

            func position(_ event: Event) -> Int { slots[event.rawValue].first.load(ordering: .relaxed) }
        }

        /// A thread waits until each procedure of a serial queue reports `executing`, then cancels
        /// or finishes it at once — while the worker is between starting it and telling its
        /// observers, or delivering will-execute (whose observer waits a moment for the racer, so
        /// that its event must queue behind). Observers must still be told will-execute first,
        /// and did-cancel only once `isCancelled` is true.
        @Test("cancel or finish just as the worker starts a procedure: will-execute is told first",
              arguments: [Action.cancel, .finish])
        func raceWithStart(_ action: Action) throws {
            let count = Stress.count(10_000, minimum: 500)
            let queue = try ConcurrentOperationQueue(name: "race-with-start", maxConcurrentOperationCount: 1)
            let done = Latch(count: count)
            let orders = (0..<count).map { _ in Order() }
            /// Microseconds the will-execute observers may still wait for the racer.
            let waitBudget = Atomic<Int>(1_000_000)
            let procedures = try (0..<count).map { index -> ClosureProcedure<Void> in
                let order = orders[index]
                let procedure = ClosureProcedure<Void>(name: "start\(index)", asynchronous: { procedure in
                    procedure.finish()
                })
                try procedure.addObserver(ClosureObserver(
                    willExecute: { procedure in
                        order.mark(.willExecute)
                        // Give the racer a moment to act while this event is being delivered (at
                        // most 2 ms, and 1 s in all: a racer starved of processor time must not
                        // stretch the test).
                        guard waitBudget.load(ordering: .relaxed) > 0 else { return }
                        let start = ContinuousClock.now
                        while ContinuousClock.now - start < .milliseconds(2) {
                            if action == .cancel ? !procedure.errors.isEmpty : procedure.state >= .finishing { break }
                            yieldThread()
                        }
                        let waited = (ContinuousClock.now - start).components
                        waitBudget.subtract(
                            Int(waited.seconds) * 1_000_000 + Int(waited.attoseconds / 1_000_000_000_000), ordering: .relaxed)
                    },
                    didExecute: { _ in order.mark(.didExecute) },
                    didCancel: { procedure, _ in
                        if !procedure.isCancelled { order.cancelNotVisible.store(1, ordering: .relaxed) }
                        order.mark(.didCancel)
                    },
                    willFinish: { _, _ in order.mark(.willFinish) },
                    didFinish: { _, _ in
                        order.mark(.didFinish)
                        done.countDown()
                    }))
                return procedure
            }
            let deadline = stressDeadline()
            let threadsFinished = onThreads(2, label: "race-with-start") { role in
                if role == 0 {
                    try? queue.addOperations(procedures, waitUntilFinished: false)
                    return
                }
                for procedure in procedures {
                    guard spin(until: deadline, { procedure.state >= .executing }) else { return }
                    switch action {
                    case .cancel: procedure.cancel(with: StressFailure(origin: .cancel, id: 0))
                    case .finish: procedure.finish()
                    }
                }
            }
            #expect(threadsFinished)
            try #require(done.wait(timeout: Stress.timeout), "\(done.count) procedures did not finish")
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))

            let wrongOrder = problems(count) { index in
                let order = orders[index]
                let willExecute = order.position(.willExecute)
                if willExecute == 0 { return "never told willExecute, though it executed" }
                let before = Order.Event.allCases.filter { event in
                    let position = order.position(event)
                    return position != 0 && position < willExecute
                }
                return before.isEmpty ? nil : "\(before) told before willExecute"
            }
            #expect(wrongOrder.count == 0, "\(action) raced with the start: \(wrongOrder)")
            if action == .cancel {
                let invisible = problems(count) { index in
                    let order = orders[index]
                    if order.cancelNotVisible.load(ordering: .relaxed) != 0 { return "isCancelled false during didCancel" }
                    if order.position(.didCancel) != 0 && !procedures[index].isCancelled {
                        return "told didCancel, but isCancelled is false after finishing"
                    }
                    return nil
                }
                #expect(invisible.count == 0, "did-cancel told before the cancellation shows: \(invisible)")
            }
        }

        /// A thread spins until each procedure's `execute()` is about to return, then finishes it:
        /// its finish races with the worker telling did-execute. Did-execute must still come
        /// before will-finish.
        @Test("finish from another thread as execute() returns: did-execute comes before will-finish")
        func finishAsExecuteReturns() throws {
            let count = Stress.count(20_000, minimum: 500)
            let queue = try ConcurrentOperationQueue(name: "finish-as-execute-returns", maxConcurrentOperationCount: 1)
            let done = Latch(count: count)
            let orders = (0..<count).map { _ in Order() }
            let returning = Atomic<Int>(-1)
            let procedures = try (0..<count).map { index -> ClosureProcedure<Void> in
                let order = orders[index]
                let procedure = ClosureProcedure<Void>(name: "returning\(index)", asynchronous: { _ in
                    returning.store(index, ordering: .relaxed)
                })
                try procedure.addObserver(ClosureObserver(
                    willExecute: { _ in order.mark(.willExecute) },
                    didExecute: { _ in order.mark(.didExecute) },
                    willFinish: { _, _ in order.mark(.willFinish) },
                    didFinish: { _, _ in
                        order.mark(.didFinish)
                        done.countDown()
                    }))
                return procedure
            }
            let deadline = stressDeadline()
            let threadsFinished = onThreads(2, label: "finish-as-execute-returns") { role in
                if role == 0 {
                    try? queue.addOperations(procedures, waitUntilFinished: false)
                    return
                }
                for (index, procedure) in procedures.enumerated() {
                    // A tight spin: the finish must follow the store as closely as possible.
                    var spins = 0
                    while returning.load(ordering: .relaxed) < index {
                        spins += 1
                        if spins % 4096 == 0 && ContinuousClock.now >= deadline { return }
                    }
                    procedure.finish()
                }
            }
            #expect(threadsFinished)
            try #require(done.wait(timeout: Stress.timeout), "\(done.count) procedures did not finish")
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))

            let wrongOrder = problems(count) { index in
                let order = orders[index]
                let positions = [Order.Event.willExecute, .didExecute, .willFinish, .didFinish].map { order.position($0) }
                return positions == [1, 2, 3, 4] ? nil : "willExecute, didExecute, willFinish, didFinish at \(positions)"
            }
            #expect(wrongOrder.count == 0, "did-execute raced with a finish: \(wrongOrder)")
        }
    }
}
