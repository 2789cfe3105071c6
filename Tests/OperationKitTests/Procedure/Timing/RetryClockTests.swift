// RetryClockTests: a RetryOperation's waits on a virtual clock (given, or its queue's), the clock
// reaching its attempts' timeouts, and the retry one-liners `retrying(_:)` and `ClosureProcedure.retry(_:)`.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("RetryOperation clocks and one-liners", .offThePool)
struct RetryClockTests {
    /// Work that fails while `attempt < succeedsFrom`, else returns `attempt * 10`.
    static func attempt(_ attempt: Int, succeedsFrom: Int, runs: Recorder<Int>) -> ResultProcedure<Int> {
        ClosureProcedure<Int>(name: "attempt\(attempt)") {
            runs.record(attempt)
            if attempt < succeedsFrom { throw ProcedureTestError(attempt) }
            return attempt * 10
        }
    }

    @Test("a 30 s back-off on the queue's virtual clock: the next attempt starts only when time passes it")
    func backOffOnQueueClock() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "retry-queue-clock", clock: clock)
        let runs = Recorder<Int>()
        let retry = RetryOperation<Int>(maxAttempts: 3, wait: .fixed(.seconds(30))) {
            Self.attempt($0, succeedsFrom: 2, runs: runs)
        }
        try queue.addOperation(retry)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(29))
        #expect(runs.values == [1])
        clock.advance(by: .seconds(1))
        #expect(await retry.finishes())
        #expect(runs.values == [1, 2] && retry.output == 20)
    }

    @Test("the waits follow the strategy, on a given clock", arguments: [
        (WaitStrategy.exponential(initial: .seconds(1), maximum: .seconds(5)), [1, 2, 4, 5]),
        (.incrementing(initial: .seconds(2), increment: .seconds(2)), [2, 4, 6, 8]),
        (.fibonacci(period: .seconds(3)), [3, 3, 6, 9]),
        (.custom { .seconds($0 * $0) }, [1, 4, 9, 16]),
    ])
    func waitsFollowStrategy(_ wait: WaitStrategy, _ seconds: [Int]) async throws {
        let clock = RecordingClock()
        let queue = ConcurrentOperationQueue(name: "retry-waits")  // real time: not used
        let runs = Recorder<Int>()
        let retry = RetryOperation<Int>(maxAttempts: 5, wait: wait, clock: clock) {
            Self.attempt($0, succeedsFrom: 5, runs: runs)
        }
        try queue.addOperation(retry)
        for timer in 1...4 { #expect(await clock.advanceThroughTimer(timer)) }
        #expect(await retry.finishes())
        #expect(clock.waits.values == seconds.map { .seconds($0) })
        #expect(runs.values == [1, 2, 3, 4, 5] && retry.output == 50)
    }

    @Test("cancelled while waiting: the clock's timer is stopped")
    func cancelStopsTimer() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "retry-cancel-timer", clock: clock)
        let runs = Recorder<Int>()
        let retry = RetryOperation<Int>(maxAttempts: 3, wait: .fixed(.seconds(60))) {
            Self.attempt($0, succeedsFrom: 9, runs: runs)
        }
        try queue.addOperation(retry)
        #expect(await pendingTimers(clock, 1))
        retry.cancel()
        #expect(await retry.finishes())
        #expect(clock.pendingTimerCount == 0 && retry.isCancelled && runs.values == [1])
    }

    /// Regression: a cancel after the wait had begun and before its timer was kept found no
    /// timer to stop; the timer was then kept anyway and fired at the end of the wait, finishing
    /// the finished retry again. The clock's `schedule` runs in exactly that window.
    @Test("cancelled while the wait's timer is being scheduled: the timer is stopped all the same")
    func cancelWhileSchedulingStopsTimer() async throws {
        let clock = SchedulingHookClock()
        let queue = ConcurrentOperationQueue(name: "retry-cancel-scheduling")
        let runs = Recorder<Int>()
        let attempts = Recorder<ResultProcedure<Int>>()
        let retries = Recorder<RetryOperation<Int>>()
        clock.whenScheduling = { retries.values.first?.cancel() }
        let retry = RetryOperation<Int>(name: "cancel-scheduling", maxAttempts: 3, wait: .fixed(.seconds(60)), clock: clock) {
            let attempt = Self.attempt($0, succeedsFrom: 9, runs: runs)
            attempts.record(attempt)
            return attempt
        }
        retries.record(retry)
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(retry.isCancelled && runs.values == [1])
        // The first attempt's did-finish observer set up the wait: once the attempt has finished,
        // that is over.
        #expect(await attempts.values.first?.finishes() == true)
        #expect(clock.base.pendingTimerCount == 0, "the cancelled retry's timer still waits")
        clock.base.advance(by: .seconds(60))
        #expect(retry.diagnostics.isEmpty, "a late timer finished the finished retry again")
        #expect(runs.values == [1] && retry.attemptCount == 1)
    }

    /// Regression: the wait's timer fired and began the next attempt while the retry still
    /// counted as waiting; a cancel then (from `makeAttempt`, say) finished the retry as one that
    /// waits, and the attempt's start, seeing the cancel, finished it a second time (a "finish
    /// ignored" diagnostic).
    @Test("cancelled as the next attempt is made after a wait: finishes once, without that attempt")
    func cancelWhileMakingAfterWait() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "retry-cancel-making", clock: clock)
        let runs = Recorder<Int>()
        let retries = Recorder<RetryOperation<Int>>()
        let retry = RetryOperation<Int>(name: "cancel-making", maxAttempts: 3, wait: .fixed(.seconds(60))) { number in
            if number == 2 { retries.values.first?.cancel() }
            return Self.attempt(number, succeedsFrom: 9, runs: runs)
        }
        retries.record(retry)
        try queue.addOperation(retry)
        #expect(await pendingTimers(clock, 1))
        // Fires the wait's timer on this thread: attempt 2 is made, and cancels the retry.
        clock.advance(by: .seconds(60))
        #expect(await retry.finishes())
        #expect(retry.isCancelled && runs.values == [1])
        #expect(retry.diagnostics.isEmpty, "the cancelled retry was finished twice")
    }

    @Test("an attempt's TimeoutObserver follows the retry's clock: a lost reply times out, the next attempt succeeds")
    func attemptTimeoutFollowsClock() async throws {
        let clock = VirtualClock()
        let queue = ConcurrentOperationQueue(name: "retry-attempt-timeout", clock: clock)
        let retry = RetryOperation<Int>(maxAttempts: 2) { number in
            if number == 2 { return ClosureProcedure { 2 } }
            let lost = ClosureProcedure<Int>(name: "lost", asynchronous: { _ in })
            try? lost.addObserver(TimeoutObserver(timeout: .seconds(30)))
            return lost
        }
        try queue.addOperation(retry)
        #expect(await pendingTimers(clock, 1))
        clock.advance(by: .seconds(30))
        #expect(await retry.finishes())
        #expect(retry.output == 2 && retry.attemptCount == 2)
    }

    @Test("retrying(3): work failing 3 times succeeds on the 4th run; the value is delivered once")
    func retryingSucceeds() async throws {
        let queue = ConcurrentOperationQueue(name: "retrying-succeeds")
        let runs = Recorder<Int>()
        let counter = AtomicCounter()
        let finishes = AtomicCounter()
        let retry = RetryOperation.retrying(3) {
            let number = counter.increment()
            return Self.attempt(number, succeedsFrom: 4, runs: runs)
        }
        try retry.addObserver(ClosureObserver(didFinish: { _, _ in finishes.increment() }))
        #expect(retry.maxAttempts == 4)
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(runs.values == [1, 2, 3, 4] && retry.output == 40 && retry.errors.isEmpty)
        #expect(finishes.value == 1)
    }

    @Test("retrying(n): more failures than retries end with the last error; retrying(0) runs once")
    func retryingExhausted() async throws {
        let queue = ConcurrentOperationQueue(name: "retrying-exhausted")
        let runs = Recorder<Int>()
        let counter = AtomicCounter()
        let retry = RetryOperation.retrying(2) { Self.attempt(counter.increment(), succeedsFrom: 9, runs: runs) }
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(runs.values == [1, 2, 3] && errorIDs(retry.errors) == [3])
        #expect(RetryOperation.retrying(0) { ClosureProcedure { 1 } }.maxAttempts == 1)
        #expect(RetryOperation.retrying(-5) { ClosureProcedure { 1 } }.maxAttempts == 1)
    }

    @Test("ClosureProcedure { … }.retry(3): new procedures with the closure, up to 4 runs")
    func closureRetry() async throws {
        let queue = ConcurrentOperationQueue(name: "closure-retry")
        let runs = AtomicCounter()
        let retry = ClosureProcedure<Int>(name: "flaky") { () throws -> Int in
            let run = runs.increment()
            if run < 3 { throw ProcedureTestError(run) }
            return run
        }.retry(3)
        #expect(retry.name == "flaky" && retry.maxAttempts == 4)
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(retry.output == 3 && runs.value == 3)

        let voidRuns = AtomicCounter()
        let voidRetry = ClosureProcedure<Void> { if voidRuns.increment() < 2 { throw ProcedureTestError(1) } }.retry(1)
        let asyncRetry = ClosureProcedure<Int>(asynchronous: { $0.finish(withValue: 9) }).retry(1)
        try queue.addOperations([voidRetry, asyncRetry], waitUntilFinished: false)
        #expect(await voidRetry.finishes())
        #expect(await asyncRetry.finishes())
        #expect(voidRuns.value == 2 && voidRetry.errors.isEmpty)
        #expect(asyncRetry.output == 9)
    }

    @Test("retry(_:) of a ClosureProcedure that already ran fails with alreadyFinished, not a crash")
    func closureRetryAfterRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "closure-retry-ran")
        let template = ClosureProcedure<Int> { 1 }
        try queue.addOperation(template)
        #expect(await template.finishes())
        let retry = template.retry(2)
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(errorCodes(retry.errors) == [.alreadyFinished] && retry.attemptCount == 3)
    }
}
