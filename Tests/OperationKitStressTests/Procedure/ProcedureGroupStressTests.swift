import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// Many `GroupOperation`s whose children produce operations and finish from other threads,
    /// while other threads cancel groups and children and add more children.
    @Suite("GroupOperation storm")
    struct GroupStorm {
        /// One child of a group, and the operation it may produce.
        final class ChildRecord: Sendable {
            let trace = EventTrace()
            let tally = WorkTally()
            let producedTally = WorkTally()
            /// 0: did not try to produce; 1: `produce` succeeded; 2: it threw.
            let produceOutcome = Atomic<Int>(0)
            /// For `produceRacingFinish`: 1 once the finishing thread runs, 2 once the worker produces.
            let handshake = Atomic<Int>(0)

            init() {}
        }

        /// One group: its children, its optional extra child (added by another thread at a random
        /// time) and what its observer saw.
        final class GroupRecord: Sendable {
            let trace = EventTrace()
            let tally = WorkTally()
            let children: [ChildRecord]
            let extra = WorkTally()
            /// 0: not tried; 1: `addChild` succeeded; 2: it threw.
            let extraOutcome = Atomic<Int>(0)

            init(childCount: Int) {
                children = (0..<childCount).map { _ in ChildRecord() }
            }
        }

        enum ChildPlan {
            /// Finishes in `execute()`.
            case inline
            /// Finishes from another thread.
            case later
            /// Finishes from another thread with an error.
            case laterWithError
            /// Produces an operation, then finishes from another thread.
            case produceThenFinish
            /// Produces while another thread finishes it: `produce` may then throw.
            case produceRacingFinish
            /// Never finishes by itself: it has `finishesWhenCancelled` and waits to be cancelled
            /// (the only child of its group, which a thread cancels once the child executes).
            case untilCancelled
        }

        @Test("each group finishes once, after all its children and what they produced; none runs later")
        func groupStorm() throws {
            let groupCount = Stress.count(600, minimum: 20)
            var random = SplitMix64(seed: 0x5EED_0003)
            let clock = RelaxedClock()
            let racers = DispatchGroup()
            let finishedGroups = Atomic<Int>(0)
            let allFinished = Latch(count: groupCount)
            let queue = try ConcurrentOperationQueue(name: "group-storm", maxConcurrentOperationCount: 6)

            var records: [GroupRecord] = []
            var groups: [GroupOperation] = []
            var children: [[ClosureProcedure<Void>]] = []
            var childPlans: [[ChildPlan]] = []
            var extras: [ClosureProcedure<Void>?] = []
            for groupIndex in 0..<groupCount {
                // One group in eight has a single child that runs until the group is cancelled.
                let stopped = groupIndex % 8 == 3
                let record = GroupRecord(childCount: stopped ? 1 : 2 + random.below(6))
                var groupChildren: [ClosureProcedure<Void>] = []
                var plans: [ChildPlan] = []
                for (childIndex, child) in record.children.enumerated() {
                    let roll = random.below(100)
                    let plan: ChildPlan = if stopped {
                        .untilCancelled
                    } else {
                        switch roll {
                        case ..<15: .inline
                        case ..<45: .later
                        case ..<55: .laterWithError
                        case ..<85: .produceThenFinish
                        default: .produceRacingFinish
                        }
                    }
                    plans.append(plan)
                    let failure = StressFailure(origin: .work, id: groupIndex * 16 + childIndex)
                    let procedure = ClosureProcedure<Void>(
                        name: "group\(groupIndex).child\(childIndex)",
                        asynchronous: { procedure in
                            child.tally.recordStart(clock)
                            let produced = ClosureOperation(name: "group\(groupIndex).produced\(childIndex)") {
                                child.producedTally.recordStart(clock)
                            }
                            produced.completionBlock = { child.producedTally.recordCompletion(clock) }
                            let produce: @Sendable () -> Void = {
                                // Counted with the racers: a finish that raced with this call
                                // completes inside it, so the group may finish before it returns.
                                racers.enter()
                                defer { racers.leave() }
                                do {
                                    try procedure.produce(produced)
                                    child.produceOutcome.store(1, ordering: .relaxed)
                                } catch {
                                    child.produceOutcome.store(2, ordering: .relaxed)
                                }
                            }
                            let finish: @Sendable () -> Void = {
                                if plan == .laterWithError {
                                    child.tally.recordFinish(procedure.finish(with: failure), byWork: true)
                                } else {
                                    child.tally.recordFinish(procedure.finish(), byWork: true)
                                }
                            }
                            switch plan {
                            case .inline:
                                finish()
                            case .later, .laterWithError:
                                racers.enter()
                                DispatchQueue.global().async { finish(); racers.leave() }
                            case .produceThenFinish:
                                produce()
                                racers.enter()
                                DispatchQueue.global().async { finish(); racers.leave() }
                            case .produceRacingFinish:
                                // A thread of its own (a serial queue's, overcommitting: the
                                // global pool may be busy), spinning once it has started,
                                // finishes the child the moment the worker begins to produce.
                                racers.enter()
                                DispatchQueue(label: "group-storm.racing-finish").async {
                                    child.handshake.store(1, ordering: .releasing)
                                    let deadline = ContinuousClock.now + .milliseconds(2)
                                    while child.handshake.load(ordering: .acquiring) != 2 && ContinuousClock.now < deadline {
                                        yieldThread()
                                    }
                                    finish()
                                    racers.leave()
                                }
                                let deadline = ContinuousClock.now + .milliseconds(2)
                                while child.handshake.load(ordering: .acquiring) != 1 && ContinuousClock.now < deadline {
                                    yieldThread()
                                }
                                child.handshake.store(2, ordering: .releasing)
                                produce()
                            case .untilCancelled:
                                break
                            }
                        })
                    procedure.completionBlock = { child.tally.recordCompletion(clock) }
                    procedure.finishesWhenCancelled = stopped || random.chance(30)
                    try procedure.addObserver(TracingObserver(trace: child.trace, clock: clock))
                    groupChildren.append(procedure)
                }
                let group = try GroupOperation(name: "group\(groupIndex)", operations: groupChildren)
                try group.setMaxConcurrentOperationCount(1 + random.below(4))
                group.completionBlock = { record.tally.recordCompletion(clock) }
                try group.addObserver(TracingObserver(trace: record.trace, clock: clock, willFinish: { _ in
                    finishedGroups.add(1, ordering: .relaxed)
                }, didFinish: { allFinished.countDown() }))
                if random.chance(35) {
                    let extra = ClosureProcedure<Void>(name: "group\(groupIndex).extra") {
                        record.extra.recordStart(clock)
                    }
                    extra.completionBlock = { record.extra.recordCompletion(clock) }
                    extras.append(extra)
                } else {
                    extras.append(nil)
                }
                records.append(record)
                groups.append(group)
                children.append(groupChildren)
                childPlans.append(plans)
            }

            // Paced by the number of groups that finished, so that each action lands around the
            // time its group runs: before, during or after.
            func schedule(_ percent: Int, lag: Int) -> [(index: Int, at: Int)] {
                (0..<groupCount).filter { _ in random.chance(percent) }
                    .map { (index: $0, at: min(groupCount - 1, max(0, $0 + random.below(2 * lag + 1) - lag))) }
                    .sorted { $0.at < $1.at }
            }
            let groupCancels = schedule(25, lag: 8)
            let childCancels = schedule(20, lag: 8).map { target in
                (index: target.index, child: random.below(children[target.index].count), at: target.at)
            }
            // Every fourth cancelled group that has an extra child is given it by the cancelling
            // thread right after the cancel; the others get theirs from a thread of their own.
            let addedOnCancel = Set(groupCancels.map(\.index).filter { $0 % 4 == 0 && extras[$0] != nil })
            let extraAdds = (0..<groupCount).filter { extras[$0] != nil && !addedOnCancel.contains($0) }
                .map { (index: $0, at: min(groupCount - 1, max(0, $0 + random.below(17) - 8))) }
                .sorted { $0.at < $1.at }
            let deadline = stressDeadline()
            let reached: @Sendable (Int) -> Bool = { target in
                spin(until: deadline) { finishedGroups.load(ordering: .relaxed) >= target }
            }

            let addExtra: @Sendable (Int) -> Void = { [groups, extras, records] index in
                guard let extra = extras[index] else { return }
                do {
                    try groups[index].addChild(extra)
                    records[index].extraOutcome.store(1, ordering: .relaxed)
                } catch {
                    records[index].extraOutcome.store(2, ordering: .relaxed)
                }
            }
            let stoppedGroups = (0..<groupCount).filter { childPlans[$0] == [.untilCancelled] }
            let threadsFinished = onThreads(5, label: "group-storm") { [groups, children] role in
                switch role {
                case 0:
                    for (index, group) in groups.enumerated() {
                        try? queue.addOperation(group)
                        if index % 50 == 49 { yieldThread() }
                    }
                case 1:
                    for target in groupCancels {
                        guard reached(target.at) else { return }
                        if target.index % 2 == 0 {
                            groups[target.index].cancel()
                        } else {
                            groups[target.index].cancel(with: StressFailure(origin: .cancel, id: target.index))
                        }
                        if addedOnCancel.contains(target.index) { addExtra(target.index) }
                    }
                case 2:
                    for target in childCancels {
                        guard reached(target.at) else { return }
                        children[target.index][target.child].cancel()
                    }
                case 3:
                    // Cancels each group whose only child runs until cancelled, once that child
                    // executes: the child then finishes within the group's own did-cancel.
                    for index in stoppedGroups {
                        let group = groups[index]
                        let child = children[index][0]
                        guard spin(until: deadline, {
                            child.state >= .executing || group.isCancelled || group.isFinished
                        }) else { return }
                        group.cancel(with: StressFailure(origin: .cancel, id: index))
                    }
                default:
                    for target in extraAdds {
                        guard reached(target.at) else { return }
                        addExtra(target.index)
                    }
                }
            }
            #expect(threadsFinished)
            try #require(allFinished.wait(timeout: Stress.timeout), "\(allFinished.count) groups did not finish")
            try #require(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout))
            try #require(racers.wait(timeout: .now() + .seconds(60)) == .success)
            // Children of groups cancelled before they executed may finish after their group.
            let childrenDeadline = stressDeadline()
            let childrenFinished = spin(until: childrenDeadline) {
                children.allSatisfy { $0.allSatisfy(\.isFinished) }
                    && extras.enumerated().allSatisfy { index, extra in
                        records[index].extraOutcome.load(ordering: .relaxed) != 1 || extra?.isFinished == true
                    }
            }
            #expect(childrenFinished, "children of finished groups never finished")

            let groupProblems = problems(groupCount) { index in
                let record = records[index]
                let group = groups[index]
                let executed = record.trace.count(.willExecute) > 0
                if !group.isFinished || record.tally.completionCount != 1 {
                    return "group finished \(group.isFinished), completion block ran \(record.tally.completionCount)×"
                }
                let groupFinished = record.trace.tick(.willFinish)
                let plans = childPlans[index]
                var failures: Set<Int> = []
                for (childIndex, child) in record.children.enumerated() {
                    let name = "child\(childIndex)"
                    let ran = child.tally.executionCount
                    if ran > 1 { return "\(name) ran \(ran)×" }
                    if ran == 1 && !executed { return "\(name) ran, though its group never executed" }
                    if ran == 1 && child.tally.started > groupFinished { return "\(name) started after its group finished" }
                    if child.tally.completionCount != 1 { return "\(name): completion block ran \(child.tally.completionCount)×" }
                    if executed && child.tally.completed > groupFinished { return "\(name) finished after its group" }
                    let produced = child.producedTally
                    switch child.produceOutcome.load(ordering: .relaxed) {
                    case 1:
                        if child.trace.count(.didProduce) != 1 { return "\(name): produced, told \(child.trace.count(.didProduce))×" }
                        if produced.completionCount != 1 { return "\(name): produced operation did not finish" }
                        if produced.completed > groupFinished { return "\(name): produced operation finished after the group" }
                        if produced.executionCount == 1 && produced.started > groupFinished {
                            return "\(name): produced operation ran after the group finished"
                        }
                    default:
                        if produced.executionCount != 0 { return "\(name): produced operation ran, though produce failed" }
                    }
                    if plans[childIndex] == .laterWithError && child.tally.workFinishWinCount == 1 {
                        failures.insert(StressFailure(origin: .work, id: index * 16 + childIndex).code)
                    }
                }
                switch record.extraOutcome.load(ordering: .relaxed) {
                case 1:
                    if record.extra.completionCount != 1 { return "extra child did not finish" }
                    if record.extra.executionCount == 1 && !executed { return "extra child ran, though its group never executed" }
                    if record.extra.executionCount == 1 && record.extra.started > groupFinished {
                        return "extra child ran after its group finished"
                    }
                    if executed && record.extra.completed > groupFinished { return "extra child finished after its group" }
                default:
                    if record.extra.executionCount != 0 { return "extra child ran, though addChild threw" }
                }
                // An executed group finishes with its children's errors (their work failures).
                let reported = Set(group.errors.compactMap { $0 as? StressFailure }.filter { $0.origin == .work }.map(\.code))
                if executed && reported != failures { return "group errors \(reported.sorted()), children failed \(failures.sorted())" }
                return nil
            }
            #expect(groupProblems.count == 0, "group contract broken: \(groupProblems)")

            // The children's observers too (a child's did-produce included).
            let allChildren = records.enumerated().flatMap { index, record in
                record.children.enumerated().map { (group: index, child: $0.offset, record: $0.element) }
            }
            let childEvents = problems(allChildren.count) { position in
                let (group, child, record) = allChildren[position]
                // A child with finishesWhenCancelled, cancelled once executing but before its work
                // began, finishes then: will and did execute are told, and the work is skipped.
                let trace = record.trace
                let finishedBeforeWork = record.tally.executionCount == 0 && trace.count(.willExecute) == 1
                    && trace.count(.didCancel) == 1
                return trace.lifecycleViolation(executed: record.tally.executionCount > 0 || finishedBeforeWork)
                    .map { "group\(group).child\(child): \($0)" }
            }
            #expect(childEvents.count == 0, "child observer contract broken: \(childEvents)")

            // The groups' own observers were told their events in order, each in its state.
            let groupEvents = problems(groupCount) { index in
                let trace = records[index].trace
                return trace.lifecycleViolation(executed: trace.count(.willExecute) > 0)
            }
            #expect(groupEvents.count == 0, "group observer contract broken: \(groupEvents)")

            // "Finishes when they — and every operation they produced — have finished" holds for a
            // group cancelled before it executed too: its cancelled children (and an extra child
            // added meanwhile) finish before it does.
            let finishedBeforeChildren = problems(groupCount) { index in
                let record = records[index]
                guard record.trace.count(.willExecute) == 0 else { return nil }
                let groupFinished = record.trace.tick(.willFinish)
                let late = record.children.indices.filter { record.children[$0].tally.completed > groupFinished }
                if !late.isEmpty { return "children \(late) finished after the group" }
                if record.extraOutcome.load(ordering: .relaxed) == 1 && record.extra.completed > groupFinished {
                    return "extra child finished after the group"
                }
                return nil
            }
            #expect(
                finishedBeforeChildren.count == 0,
                "groups cancelled before executing finished before their children: \(finishedBeforeChildren)")
        }
    }
}
