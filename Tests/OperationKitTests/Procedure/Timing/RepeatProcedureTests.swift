// RepeatProcedureTests: a repeat runs attempts from a closure or an iterator one at a time, with
// waits on a virtual clock, until its maximum, a failure, its predicate or the iterator stops it.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("RepeatProcedure", .offThePool)
struct RepeatProcedureTests {
    /// Attempt `number`: returns `number * 10`, or fails with error `number` if it is in `failing`.
    static func attempt(_ number: Int, failing: Set<Int> = [], runs: Recorder<Int>) -> ResultProcedure<Int> {
        ClosureProcedure<Int>(name: "attempt\(number)") {
            runs.record(number)
            if failing.contains(number) { throw ProcedureTestError(number) }
            return number * 10
        }
    }

    @Test("max 2 with a body: two attempts run; the repeat's output is the last one's")
    func maxAndBody() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-max")
        let runs = Recorder<Int>()
        let repeated = RepeatProcedure<Int>(max: 2) { Self.attempt($0, runs: runs) }
        let log = ProcedureEventLog()
        try repeated.addObserver(log.observer)
        try queue.addOperation(repeated)
        #expect(await log.finishes())
        #expect(runs.values == [1, 2])
        #expect(repeated.attemptCount == 2 && repeated.maxCount == 2)
        #expect(repeated.output == 20 && repeated.errors.isEmpty && !repeated.isCancelled)
        // One lifecycle, however many attempts.
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("an iterator: one attempt per element, ending with the iterator")
    func iteratorEnds() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-iterator")
        let runs = Recorder<Int>()
        let procedures = (1...3).map { Self.attempt($0, runs: runs) }
        let repeated = RepeatProcedure<Int>(iterator: procedures.makeIterator())
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(runs.values == [1, 2, 3])
        #expect(repeated.attemptCount == 3 && repeated.output == 30)
    }

    @Test("an iterator with a maximum below its length stops at the maximum; max below 1 means 1")
    func iteratorWithMax() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-iterator-max")
        let runs = Recorder<Int>()
        let numbers = (1...100).lazy.map { Self.attempt($0, runs: runs) }
        let repeated = RepeatProcedure<Int>(max: 4, iterator: numbers.makeIterator())
        let one = RepeatProcedure<Int>(max: 0) { Self.attempt($0 + 100, runs: runs) }
        #expect(one.maxCount == 1)
        try queue.addOperations([repeated, one], waitUntilFinished: false)
        #expect(await repeated.finishes())
        #expect(await one.finishes())
        #expect(runs.values.filter { $0 < 100 } == [1, 2, 3, 4])
        #expect(runs.values.filter { $0 > 100 } == [101])
        #expect(repeated.output == 40 && one.output == 1010)
    }

    @Test("a body returning nil at once: the repeat finishes without a value or error, no attempt made")
    func emptyBody() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-empty")
        let repeated = RepeatProcedure<Int> { _ in nil }
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(repeated.attemptCount == 0)
        #expect(repeated.output == nil && repeated.errors.isEmpty && !repeated.isCancelled)
    }

    @Test("without a maximum, a failing attempt stops the repeat with its errors (stopsOnFailure)")
    func stopsOnFailure() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-failure")
        let runs = Recorder<Int>()
        let repeated = RepeatProcedure<Int> { Self.attempt($0, failing: [2], runs: runs) }
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(runs.values == [1, 2])
        #expect(repeated.attemptCount == 2)
        #expect(errorIDs(repeated.errors) == [2] && repeated.output == nil)
    }

    @Test("stopsOnFailure false: failures are followed by more attempts; the result is the last attempt's")
    func continuesAfterFailure() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-continue")
        let runs = Recorder<Int>()
        let succeeding = RepeatProcedure<Int>(max: 3, stopsOnFailure: false) { Self.attempt($0, failing: [1, 2], runs: runs) }
        try queue.addOperation(succeeding)
        #expect(await succeeding.finishes())
        #expect(succeeding.output == 30 && succeeding.errors.isEmpty)

        let failingLast = RepeatProcedure<Int>(max: 3, stopsOnFailure: false) { Self.attempt($0 + 10, failing: [13], runs: runs) }
        try queue.addOperation(failingLast)
        #expect(await failingLast.finishes())
        #expect(failingLast.output == nil && errorIDs(failingLast.errors) == [13])
        #expect(runs.values == [1, 2, 3, 11, 12, 13])
    }

    @Test("the while predicate is asked with each value and count; false stops with that attempt's value")
    func predicateStops() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-predicate")
        let runs = Recorder<Int>()
        let asked = Recorder<String>()
        let repeated = RepeatProcedure<Int>(while: { output, count in
            asked.record("\(output.map(String.init) ?? "nil") \(count)")
            return (output ?? 0) < 30
        }) { Self.attempt($0, runs: runs) }
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(runs.values == [1, 2, 3])
        #expect(asked.values == ["10 1", "20 2", "30 3"])
        #expect(repeated.output == 30)
    }

    @Test("waits come from the strategy, on the queue's clock: no attempt before time moves past the wait")
    func waitsOnQueueClock() async throws {
        let clock = RecordingClock()
        let queue = ConcurrentOperationQueue(name: "repeat-waits", clock: clock)
        let runs = Recorder<Int>()
        let repeated = RepeatProcedure<Int>(max: 5, wait: .fibonacci(period: .seconds(10))) { Self.attempt($0, runs: runs) }
        try queue.addOperation(repeated)
        for timer in 1...4 {
            #expect(await clock.scheduled(timer))
            #expect(runs.values.count == timer, "no attempt before the wait has passed")
            #expect(await clock.advanceThroughTimer(timer))
        }
        #expect(await repeated.finishes())
        #expect(runs.values == [1, 2, 3, 4, 5])
        #expect(clock.waits.values == [10, 10, 20, 30].map { .seconds($0) })
        #expect(repeated.output == 50)
    }

    @Test("a given clock wins over the queue's")
    func givenClock() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "repeat-given-clock")  // real time: not used
        let runs = Recorder<Int>()
        let repeated = RepeatProcedure<Int>(max: 2, wait: .fixed(.seconds(3_600)), clock: clock) { Self.attempt($0, runs: runs) }
        try queue.addOperation(repeated)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(3_600))
        #expect(await repeated.finishes())
        #expect(runs.values == [1, 2])
    }

    @Test("cancelled before it runs: no attempt is made")
    func cancelledBeforeRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-cancel-before")
        let made = AtomicCounter()
        let repeated = RepeatProcedure<Int> { number in
            made.increment()
            return ClosureProcedure { number }
        }
        repeated.cancel()
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(repeated.isCancelled && made.value == 0 && repeated.output == nil)
    }

    /// An attempt that executes until it is cancelled, then finishes from another thread.
    final class CancellableAttempt: ResultProcedure<Int>, @unchecked Sendable {
        // No mutable state of its own.
        let executing = Latch()
        override func execute() { executing.countDown() }
        override func procedureDidCancel(with error: (any Error)?) {
            if isExecuting { onThreadOfItsOwn { self.finish() } }
        }
    }

    @Test("cancelled while an attempt runs: that attempt is cancelled, no other starts")
    func cancelledDuringAttempt() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-cancel-during")
        let attempts = Recorder<CancellableAttempt>()
        let repeated = RepeatProcedure<Int>(max: 5) { number in
            let attempt = CancellableAttempt(name: "attempt\(number)")
            attempts.record(attempt)
            return attempt
        }
        try queue.addOperation(repeated)
        #expect(await eventually { !attempts.values.isEmpty })
        let first = try #require(attempts.values.first)
        #expect(await opened(first.executing))
        repeated.cancel()
        #expect(await repeated.finishes())
        #expect(first.isCancelled && repeated.isCancelled)
        #expect(attempts.values.count == 1 && repeated.attemptCount == 1)
    }

    @Test("cancelled while waiting between attempts: finishes at once, the timer stopped, no further attempt")
    func cancelledDuringWait() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "repeat-cancel-wait", clock: clock)
        let runs = Recorder<Int>()
        let finishes = AtomicCounter()
        let repeated = RepeatProcedure<Int>(max: 3, wait: .fixed(.seconds(60))) { Self.attempt($0, runs: runs) }
        try repeated.addObserver(ClosureObserver(didFinish: { _, _ in finishes.increment() }))
        try queue.addOperation(repeated)
        #expect(await pendingTimers(clock, 1))
        repeated.cancel()
        #expect(await repeated.finishes())
        #expect(repeated.isCancelled && runs.values == [1])
        #expect(clock.pendingTimerCount == 0)
        clock.advance(by: .seconds(600))
        #expect(runs.values == [1] && finishes.value == 1)
    }

    /// Regression: a cancel after the repeat had looked for one and before its wait began was
    /// lost (the repeat then sat out the wait); the `while` predicate runs in that window.
    @Test("cancelled while deciding on another attempt (from its predicate): finishes at once, no timer, no further attempt")
    func cancelledWhileDeciding() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "repeat-cancel-deciding", clock: clock)
        let runs = Recorder<Int>()
        let repeats = Recorder<RepeatProcedure<Int>>()
        let repeated = RepeatProcedure<Int>(max: 3, wait: .fixed(.seconds(60)), while: { _, _ in
            repeats.values.first?.cancel()
            return true
        }) { Self.attempt($0, runs: runs) }
        repeats.record(repeated)
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(repeated.isCancelled && runs.values == [1])
        #expect(clock.pendingTimerCount == 0)
    }

    /// Regression: a cancel after the wait's timer had fired and before the next attempt was
    /// started finished the repeat twice (once as waiting, once from the attempt's start); its
    /// body runs in that window.
    @Test("cancelled from its body as the next attempt is made after a wait: finishes once, without that attempt")
    func cancelledWhileMakingAfterWait() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "repeat-cancel-making", clock: clock)
        let runs = Recorder<Int>()
        let repeats = Recorder<RepeatProcedure<Int>>()
        let repeated = RepeatProcedure<Int>(max: 3, wait: .fixed(.seconds(60))) { number in
            if number == 2 { repeats.values.first?.cancel() }
            return Self.attempt(number, runs: runs)
        }
        repeats.record(repeated)
        try queue.addOperation(repeated)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(60))
        #expect(await repeated.finishes())
        #expect(repeated.isCancelled && runs.values == [1])
        #expect(repeated.diagnostics.isEmpty, "the cancelled repeat was finished twice")
    }

    @Test("an attempt cancelled by someone else without an error ends the repeat, cancelled")
    func attemptCancelledElsewhere() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-attempt-cancelled")
        let made = AtomicCounter()
        let repeated = RepeatProcedure<Int>(max: 5) { _ in
            made.increment()
            return ClosureProcedure<Int>(asynchronous: { procedure in
                procedure.cancel()
                procedure.finish()
            })
        }
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(repeated.isCancelled && repeated.errors.isEmpty && made.value == 1)
    }

    @Test("a waiting repeat holds no concurrency slot, and a snapshot shows the wait and what remains of it")
    func waitingHoldsNoSlot() async throws {
        let clock = VirtualClock()
        let queue = try ConcurrentOperationQueue(name: "repeat-slot", maxConcurrentOperationCount: 1, clock: clock)
        let runs = Recorder<Int>()
        let repeated = RepeatProcedure<Int>(name: "poll", max: 2, wait: .fixed(.seconds(100))) { Self.attempt($0, runs: runs) }
        try queue.addOperation(repeated)
        #expect(await pendingTimers(clock, 1))
        let other = ClosureOperation(name: "other") {}
        try queue.addOperation(other)
        #expect(await other.finishes())
        clock.advance(by: .seconds(40))
        let blocker = queue.snapshot().operation(named: "poll")?.blockers.first
        guard case .retryDelay(let next, let delay, let remaining)? = blocker else {
            Issue.record("expected the wait, got \(String(describing: blocker))")
            return
        }
        #expect(next == 2 && delay == .seconds(100) && remaining == .seconds(60))
        clock.advance(by: .seconds(60))
        #expect(await repeated.finishes())
        #expect(repeated.output == 20)
    }

    @Test("an instrument of the repeat's queue is told retrying(n) before each further attempt, with its wait", .exclusiveInstrumentation)
    func instrumentTold() async throws {
        let queue = ConcurrentOperationQueue(name: "repeat-instrument")
        let instrument = RecordingInstrument()
        queue.instrument = instrument
        let repeated = RepeatProcedure<Int>(max: 3, wait: .incrementing(initial: .zero, increment: .zero)) { number in
            ClosureProcedure { number }
        }
        try queue.addOperation(repeated)
        #expect(await repeated.finishes())
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(instrument.kinds(of: repeated) == ["added", "ready", "started", "retrying(2)", "retrying(3)", "finished(succeeded)"])
    }
}
