import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// E50: RetryOperation — new attempts until one succeeds, within a maximum, with a wait between
/// them; shouldRetry, cancellation, and the wait strategies.
@Suite("E50 RetryOperation", .offThePool)
struct RetryOperationTests {
    /// An attempt that fails with error `id` while `attempt < succeedsFrom`, else returns `attempt * 10`.
    static func attempt(_ attempt: Int, succeedsFrom: Int, runs: Recorder<Int>) -> ResultProcedure<Int> {
        ClosureProcedure<Int>(name: "attempt\(attempt)") {
            runs.record(attempt)
            if attempt < succeedsFrom { throw ProcedureTestError(attempt) }
            return attempt * 10
        }
    }

    @Test("E50 at most 2 attempts around work that fails 4 times: exactly 2 run; it finishes with the last error")
    func attemptsAreBounded() async throws {
        let queue = ConcurrentOperationQueue(name: "E50-bounded")
        let runs = Recorder<Int>()
        let retry = RetryOperation<Int>(name: "bounded", maxAttempts: 2) {
            Self.attempt($0, succeedsFrom: 5, runs: runs)
        }
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(runs.values == [1, 2])
        #expect(retry.attemptCount == 2)
        #expect(errorIDs(retry.errors) == [2])
        #expect(retry.output == nil && retry.isFailed && !retry.isCancelled)
    }

    @Test("E50 with a wait between attempts, work failing twice succeeds on attempt 3", arguments: [
        RetryOperation<Int>.WaitStrategy.immediate,
        .fixed(.milliseconds(5)),
        .exponential(initial: .milliseconds(2), multiplier: 2, maximum: .milliseconds(10), jitter: 0.5),
    ])
    func succeedsOnThirdAttempt(_ wait: RetryOperation<Int>.WaitStrategy) async throws {
        let queue = ConcurrentOperationQueue(name: "E50-third")
        let runs = Recorder<Int>()
        let retry = RetryOperation<Int>(name: "third", maxAttempts: 5, wait: wait) {
            Self.attempt($0, succeedsFrom: 3, runs: runs)
        }
        let log = ProcedureEventLog()
        try retry.addObserver(log.observer)
        try queue.addOperation(retry)
        #expect(await log.finishes())
        #expect(runs.values == [1, 2, 3])
        #expect(retry.output == 30)
        #expect(retry.errors.isEmpty)
        // One lifecycle for the retry, however many attempts it took.
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("shouldRetry is asked with the error and the attempt; false stops at once")
    func shouldRetryStops() async throws {
        let queue = ConcurrentOperationQueue(name: "should-retry")
        let runs = Recorder<Int>()
        let asked = Recorder<String>()
        let retry = RetryOperation<Int>(name: "should-retry", maxAttempts: 5, shouldRetry: { error, attempt in
            asked.record("\(error) \(attempt)")
            return attempt < 2
        }) { Self.attempt($0, succeedsFrom: 9, runs: runs) }
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(runs.values == [1, 2])
        #expect(asked.values == ["E1 1", "E2 2"])
        #expect(errorIDs(retry.errors) == [2])
    }

    @Test("a successful attempt without a value ends the retry without a value or error")
    func successWithoutValue() async throws {
        let queue = ConcurrentOperationQueue(name: "no-value")
        let retry = RetryOperation<Int>(name: "no-value", maxAttempts: 3) { attempt in
            let procedure = ClosureProcedure<Int>(name: "attempt\(attempt)", asynchronous: { $0.finish() })
            return procedure
        }
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(retry.attemptCount == 1)
        #expect(retry.output == nil && retry.errors.isEmpty && !retry.isCancelled)
    }

    @Test("maxAttempts below 1 means one attempt")
    func atLeastOneAttempt() async throws {
        let queue = ConcurrentOperationQueue(name: "one-attempt")
        let runs = Recorder<Int>()
        let retry = RetryOperation<Int>(name: "one", maxAttempts: 0) { Self.attempt($0, succeedsFrom: 9, runs: runs) }
        #expect(retry.maxAttempts == 1)
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(runs.values == [1])
    }

    /// An attempt that executes until it is cancelled, then finishes (from another thread).
    final class CancellableAttempt: ResultProcedure<Int>, @unchecked Sendable {
        // No mutable state of its own.
        let executing = Latch()
        override func execute() { executing.countDown() }
        override func procedureDidCancel(with error: (any Error)?) {
            if isExecuting { onThreadOfItsOwn { self.finish() } }
        }
    }

    @Test("cancelling the retry cancels the running attempt and starts no other")
    func cancelStopsAttempts() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-retry")
        let made = Recorder<Int>()
        let attempts = Recorder<CancellableAttempt>()
        let retry = RetryOperation<Int>(name: "cancel-retry", maxAttempts: 5) { number in
            made.record(number)
            let attempt = CancellableAttempt(name: "attempt\(number)")
            attempts.record(attempt)
            return attempt
        }
        try queue.addOperation(retry)
        let first = try #require(await eventually { !attempts.values.isEmpty } ? attempts.values.first : nil)
        #expect(await first.executing.opens())
        retry.cancel()
        #expect(await retry.finishes())
        #expect(first.isCancelled)
        #expect(retry.isCancelled)
        #expect(made.values == [1])
        #expect(retry.attemptCount == 1)
    }

    @Test("cancelling the retry while it waits between attempts finishes it promptly, with no further attempt")
    func cancelDuringWait() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-wait")
        let runs = Recorder<Int>()
        let firstFinished = Latch()
        let retry = RetryOperation<Int>(name: "cancel-wait", maxAttempts: 3, wait: .fixed(.seconds(60))) { number in
            let attempt = Self.attempt(number, succeedsFrom: 9, runs: runs)
            try? attempt.addObserver(ClosureObserver(didFinish: { _, _ in firstFinished.countDown() }))
            return attempt
        }
        try queue.addOperation(retry)
        #expect(await firstFinished.opens())
        // The retry tells its snapshot it waits once the wait has been set up (the test's
        // did-finish observer above runs before the retry's own, so it is too early to cancel).
        #expect(await eventually {
            if case .retryDelay? = queue.snapshot().operation(named: "cancel-wait")?.blockers.first { return true }
            return false
        })
        retry.cancel()
        #expect(await retry.finishes(within: .seconds(2)), "a cancelled retry should not sit out its 60 s wait")
        #expect(retry.isCancelled)
        #expect(runs.values == [1])
    }

    /// Regression (a CI run under TSan): a cancel that came after the retry had looked for one and
    /// before it marked itself waiting was lost — the retry then sat out the whole wait. A cancel
    /// from `shouldRetry` lands in exactly that window.
    @Test("a cancel while the retry decides on another attempt finishes it promptly, without the wait or another attempt")
    func cancelWhileDeciding() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-deciding")
        let runs = Recorder<Int>()
        let retries = Recorder<RetryOperation<Int>>()
        let retry = RetryOperation<Int>(
            name: "cancel-deciding", maxAttempts: 3, wait: .fixed(.seconds(60)),
            shouldRetry: { _, _ in
                retries.values.first?.cancel()
                return true
            },
            makeAttempt: { number in Self.attempt(number, succeedsFrom: 9, runs: runs) })
        retries.record(retry)
        try queue.addOperation(retry)
        #expect(await retry.finishes(within: .seconds(2)), "a retry cancelled before its wait should not sit it out")
        #expect(retry.isCancelled)
        #expect(runs.values == [1])
        #expect(errorIDs(retry.errors) == [1], "it finishes with the attempt's errors")
    }

    @Test("an attempt cancelled by someone else ends the retry, cancelled, without another attempt")
    func attemptCancelledElsewhere() async throws {
        let queue = ConcurrentOperationQueue(name: "attempt-cancelled")
        let made = Recorder<Int>()
        let retry = RetryOperation<Int>(name: "attempt-cancelled", maxAttempts: 5) { number in
            made.record(number)
            return ClosureProcedure<Int>(name: "attempt\(number)", asynchronous: { procedure in
                procedure.cancel()
                procedure.finish()
            })
        }
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(retry.isCancelled)
        #expect(retry.errors.isEmpty)
        #expect(made.values == [1])
    }

    // MARK: WaitStrategy

    @Test("WaitStrategy.immediate and .fixed")
    func immediateAndFixed() {
        for attempt in 1...5 {
            #expect(RetryOperation<Int>.WaitStrategy.immediate.delay(after: attempt) == .zero)
            let fixed = RetryOperation<Int>.WaitStrategy.fixed(.milliseconds(250))
            #expect(fixed.delay(after: attempt) == .milliseconds(250))
        }
    }

    @Test("WaitStrategy.exponential grows by its multiplier up to its maximum")
    func exponential() {
        typealias Wait = RetryOperation<Int>.WaitStrategy
        let doubling = Wait.exponential(initial: .milliseconds(100))
        #expect((1...5).map { doubling.delay(after: $0) } == [100, 200, 400, 800, 1600].map { .milliseconds($0) })
        #expect(doubling.delay(after: 0) == .milliseconds(100), "before the first attempt: the initial wait")
        let tripling = Wait.exponential(initial: .milliseconds(10), multiplier: 3, maximum: .milliseconds(200))
        #expect((1...5).map { tripling.delay(after: $0) } == [10, 30, 90, 200, 200].map { .milliseconds($0) })
        #expect(tripling.delay(after: 1000) == .milliseconds(200))
    }

    @Test("WaitStrategy.exponential's jitter stays within 1 ± jitter of the wait")
    func jitter() {
        let wait = RetryOperation<Int>.WaitStrategy.exponential(
            initial: .milliseconds(100), multiplier: 2, maximum: .milliseconds(300), jitter: 0.2)
        for attempt in [1, 2, 3] {
            let base = [100.0, 200.0, 300.0][attempt - 1]
            let samples = (0..<200).map { _ in wait.delay(after: attempt) }
            let milliseconds = samples.map {
                Double($0.components.attoseconds) / 1e15 + Double($0.components.seconds) * 1000
            }
            let (low, high) = (base * 0.8 - 0.001, base * 1.2 + 0.001)
            #expect(milliseconds.allSatisfy { $0 >= low && $0 <= high }, "attempt \(attempt)")
            #expect(Set(samples).count > 1, "the jitter varies the wait")
        }
        // A jitter above 1 never makes a negative wait.
        let wide = RetryOperation<Int>.WaitStrategy.exponential(initial: .milliseconds(10), jitter: 3)
        #expect((0..<200).allSatisfy { _ in wide.delay(after: 1) >= .zero })
    }

    @Test("WaitStrategy.exponential without a maximum does not trap for a late attempt")
    func exponentialOverflow() async {
        // maxAttempts is unbounded: a retry of 100 attempts asks for the wait after attempt 64.
        await #expect(processExitsWith: .success) {
            let wait = RetryOperation<Int>.WaitStrategy.exponential(initial: .seconds(1))
            _ = wait.delay(after: 64)
        }
    }
}
