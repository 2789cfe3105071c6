import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section L: MutuallyExclusive — at most one procedure per category runs at a time, across
/// queues; the category is taken after the conditions are satisfied and given back on finish.
/// Every test uses categories of its own: the register is process-wide.
@Suite("L. Mutual exclusivity", .offThePool)
struct MutualExclusivityTests {
    /// A procedure that enters `meter` when it executes and leaves it (and finishes) a little
    /// later, from another thread: long enough for an overlap to show, without blocking a thread.
    func metered(_ name: String, _ meter: InFlightMeter, category: String) throws -> ClosureProcedure<Void> {
        let procedure = ClosureProcedure<Void>(name: name, asynchronous: { procedure in
            meter.enter()
            procedureTestLaterQueue.asyncAfter(deadline: .now() + .milliseconds(5)) {
                meter.leave()
                procedure.finish()
            }
        })
        try procedure.addCondition(MutuallyExclusive(category: category))
        return procedure
    }

    @Test("L88 two exclusive procedures on a queue with two slots: the second waits for the first to finish")
    func exclusivePair() async throws {
        let category = uniqueExclusivityCategory("L88")
        let queue = try ConcurrentOperationQueue(name: "L88", maxConcurrentOperationCount: 2)
        let first = ProcedureAwaitingFinish(name: "first")
        try first.addCondition(MutuallyExclusive(category: category))
        try queue.addOperation(first)
        #expect(await first.executing.opens())

        let firstFinishedWhenSecondRan = Recorder<Bool>()
        let second = ProcedureCountingHooks(name: "second") { procedure in
            firstFinishedWhenSecondRan.record(first.isFinished)
            procedure.finish()
        }
        try second.addCondition(MutuallyExclusive(category: category))
        let after = ManuallyFinishedOperation(name: "after")
        try queue.addOperations([second, after], waitUntilFinished: false)
        // The one free slot took `second` first, which could not take its category and left the
        // slot to `after`: by the time `after` runs, `second` is waiting.
        #expect(await after.executed.opens())
        #expect(second.willExecuteCalls.value == 0)
        #expect(second.state == .ready, "waiting for its category")
        #expect(!second.isExecuting && !second.isFinished)
        after.finish()

        first.finish()
        #expect(await second.finished.opens())
        #expect(second.willExecuteCalls.value == 1)
        #expect(firstFinishedWhenSecondRan.values == [true])
    }

    @Test("L88 exclusivity holds across queues")
    func acrossQueues() async throws {
        let category = uniqueExclusivityCategory("L88-queues")
        let queueA = ConcurrentOperationQueue(name: "L88-A")
        let queueB = try ConcurrentOperationQueue(name: "L88-B", maxConcurrentOperationCount: 1)
        let first = ProcedureAwaitingFinish(name: "first")
        try first.addCondition(MutuallyExclusive(category: category))
        try queueA.addOperation(first)
        #expect(await first.executing.opens())
        let second = ProcedureCountingHooks(name: "second")
        try second.addCondition(MutuallyExclusive(category: category))
        let after = ClosureOperation(name: "after") {}
        try queueB.addOperations([second, after], waitUntilFinished: false)
        #expect(await after.finishes())
        #expect(second.willExecuteCalls.value == 0 && !second.isFinished)
        first.finish()
        #expect(await second.finished.opens())
        #expect(second.willExecuteCalls.value == 1)
    }

    @Test("L88 many exclusive procedures on two queues never overlap")
    func neverOverlap() async throws {
        let category = uniqueExclusivityCategory("L88-many")
        let queues = try (0..<2).map {
            try ConcurrentOperationQueue(name: "L88-many-\($0)", maxConcurrentOperationCount: 4)
        }
        let meter = InFlightMeter()
        var procedures: [ClosureProcedure<Void>] = []
        for index in 0..<12 {
            let procedure = try metered("p\(index)", meter, category: category)
            procedures.append(procedure)
            try queues[index % 2].addOperation(procedure)
        }
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(meter.peak == 1)
    }

    @Test("L89 three exclusive procedures added at once from different threads: one at a time, all finish")
    func addedConcurrently() async throws {
        let category = uniqueExclusivityCategory("L89")
        let queue = try ConcurrentOperationQueue(name: "L89", maxConcurrentOperationCount: 3)
        let meter = InFlightMeter()
        let procedures = try (0..<3).map { try metered("p\($0)", meter, category: category) }
        let failures = AtomicCounter()
        DispatchQueue.concurrentPerform(iterations: 3) { index in
            do { try queue.addOperation(procedures[index]) } catch { failures.increment() }
        }
        #expect(failures.value == 0)
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(meter.peak == 1)
    }

    @Test("exclusive procedures that also depend on each other do not deadlock",
          arguments: [false, true], [false, true])
    func dependentExclusiveProcedures(addDependentFirst: Bool, secondDependsOnFirst: Bool) async throws {
        let category = uniqueExclusivityCategory("dependent")
        let queue = try ConcurrentOperationQueue(name: "dependent-exclusive", maxConcurrentOperationCount: 2)
        let order = Recorder<String>()
        let first = ClosureProcedure<Void>(name: "first") { order.record("first") }
        let second = ClosureProcedure<Void>(name: "second") { order.record("second") }
        for procedure in [first, second] { try procedure.addCondition(MutuallyExclusive(category: category)) }
        let (dependency, dependent) = secondDependsOnFirst ? (first, second) : (second, first)
        try dependent.addDependency(dependency)
        let operations = addDependentFirst ? [dependent, dependency] : [dependency, dependent]
        try queue.addOperations(operations, waitUntilFinished: false)
        #expect(await dependent.finishes(), "deadlock")
        #expect(order.values == [dependency.name!, dependent.name!])
    }

    @Test("overlapping category sets: no deadlock, and no two procedures sharing a category overlap")
    func overlappingCategories() async throws {
        let x = uniqueExclusivityCategory("x")
        let y = uniqueExclusivityCategory("y")
        let queue = try ConcurrentOperationQueue(name: "overlapping", maxConcurrentOperationCount: 4)
        let meterX = InFlightMeter()
        let meterY = InFlightMeter()
        var procedures: [ClosureProcedure<Void>] = []
        for index in 0..<9 {
            let categories: [String] = [[x], [x, y], [y]][index % 3]
            let procedure = ClosureProcedure<Void>(name: "p\(index)", asynchronous: { procedure in
                if categories.contains(x) { meterX.enter() }
                if categories.contains(y) { meterY.enter() }
                procedureTestLaterQueue.asyncAfter(deadline: .now() + .milliseconds(2)) {
                    if categories.contains(x) { meterX.leave() }
                    if categories.contains(y) { meterY.leave() }
                    procedure.finish()
                }
            })
            for category in categories { try procedure.addCondition(MutuallyExclusive(category: category)) }
            if let previous = procedures.last, index % 4 == 3 { try procedure.addDependency(previous) }
            procedures.append(procedure)
        }
        try queue.addOperations(procedures.reversed(), waitUntilFinished: false)
        for procedure in procedures { #expect(await procedure.finishes(), "deadlock") }
        #expect(meterX.peak == 1 && meterY.peak == 1)
    }

    @Test("L88/L91 a finished procedure gives its category back: a later one runs")
    func releasedAfterFinish() async throws {
        let category = uniqueExclusivityCategory("L91")
        let queue = ConcurrentOperationQueue(name: "L91")
        for name in ["first", "failing", "second"] {
            let procedure = ProcedureCountingHooks(name: name) { procedure in
                procedure.finish(with: name == "failing" ? ProcedureTestError(1) : nil)
            }
            try procedure.addCondition(MutuallyExclusive(category: category))
            try queue.addOperation(procedure)
            #expect(await procedure.finished.opens(), "\(name)")
            #expect(procedure.willExecuteCalls.value == 1)
        }
    }

    @Test("a procedure whose conditions fail never takes its category")
    func failedConditionsTakeNothing() async throws {
        let category = uniqueExclusivityCategory("failed-conditions")
        let queue = ConcurrentOperationQueue(name: "failed-conditions")
        let refused = ProcedureCountingHooks(name: "refused")
        try refused.addCondition(MutuallyExclusive(category: category))
        try refused.addCondition(ClosureCondition { _ in .failed(ProcedureTestError(1)) })
        let cancelled = ProcedureCountingHooks(name: "cancelled")
        try cancelled.addCondition(MutuallyExclusive(category: category))
        cancelled.cancel()
        try queue.addOperations([refused, cancelled], waitUntilFinished: false)
        #expect(await refused.finished.opens())
        #expect(await cancelled.finished.opens())
        let later = ProcedureCountingHooks(name: "later")
        try later.addCondition(MutuallyExclusive(category: category))
        try queue.addOperation(later)
        #expect(await later.finished.opens())
        #expect(later.willExecuteCalls.value == 1)
    }

    @Test("a procedure cancelled while waiting for its category finishes at once, holding nothing")
    func cancelWhileWaiting() async throws {
        let category = uniqueExclusivityCategory("cancel-waiting")
        let queue = try ConcurrentOperationQueue(name: "cancel-waiting", maxConcurrentOperationCount: 2)
        let holder = ProcedureAwaitingFinish(name: "holder")
        try holder.addCondition(MutuallyExclusive(category: category))
        try queue.addOperation(holder)
        #expect(await holder.executing.opens())
        let waiting = ProcedureCountingHooks(name: "waiting")
        try waiting.addCondition(MutuallyExclusive(category: category))
        let after = ClosureOperation(name: "after") {}
        try queue.addOperations([waiting, after], waitUntilFinished: false)
        #expect(await after.finishes())
        #expect(waiting.state == .ready)
        waiting.cancel()
        #expect(await waiting.finished.opens(), "does not wait for the holder")
        #expect(!holder.isFinished)
        #expect(waiting.willExecuteCalls.value == 0)
        let next = ProcedureCountingHooks(name: "next")
        try next.addCondition(MutuallyExclusive(category: category))
        try queue.addOperation(next)
        holder.finish()
        #expect(await next.finished.opens())
        #expect(next.willExecuteCalls.value == 1)
    }

    @Test("MutuallyExclusive's category and name; compound and silent conditions keep the categories")
    func categories() {
        struct Alert {}
        #expect(MutuallyExclusive(Alert.self).category == "Alert")
        #expect(MutuallyExclusive(category: "c").mutuallyExclusiveCategories == ["c"])
        #expect(MutuallyExclusive(category: "c").name == "MutuallyExclusive<c>")
        let all = AllConditions([MutuallyExclusive(category: "a"), MutuallyExclusive(category: "b")])
        #expect(all.mutuallyExclusiveCategories == ["a", "b"])
        #expect(SilentCondition(MutuallyExclusive(category: "s")).mutuallyExclusiveCategories == ["s"])
        #expect(ClosureCondition { _ in .satisfied }.mutuallyExclusiveCategories.isEmpty)
    }
}
