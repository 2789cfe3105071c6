// The retry machinery keeps its owner while it handles an attempt's finish: a cancel that lands
// while the wait before the next attempt is being scheduled finishes the owner, and the owner may
// then be let go by everyone else before that handling ends.
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// A clock whose `schedule` holds the calling thread until the test opens `proceed`, and keeps
/// the actions for the test to fire.
private final class HoldingClock: OperationClock {
    let scheduling = Latch()
    let proceed = Gate()
    private let actions = Locked<[@Sendable () -> Void]>([])

    var now: ContinuousClock.Instant { ContinuousClock.now }

    func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> OperationTimer {
        actions.withLock { $0.append(action) }
        scheduling.countDown()
        _ = proceed.wait(timeout: procedureTimeout)
        return OperationTimer()
    }

    /// Calls every action kept so far.
    func fireAll() {
        for action in actions.withLock({ $0 }) { action() }
    }
}

@Suite("Retry machinery: the owner's lifetime", .offThePool)
struct AttemptEngineLifetimeTests {
    @Test("cancelled while its wait is being scheduled: finishes cancelled, the handling still has it, the late timer does nothing")
    func cancelWhileSchedulingTheWait() async throws {
        let clock = HoldingClock()
        let runs = Recorder<Int>()
        let queue = ConcurrentOperationQueue(name: "retry-lifetime")
        weak var weakRetry: RetryOperation<Int>?
        do {
            let retry = RetryOperation<Int>(name: "retry-lifetime", maxAttempts: 3, wait: .fixed(.seconds(30)), clock: clock) {
                RetryClockTests.attempt($0, succeedsFrom: 2, runs: runs)
            }
            weakRetry = retry
            try queue.addOperation(retry)
            // Attempt 1 failed; the thread that finished it is in the clock, scheduling the wait.
            #expect(await clock.scheduling.opens())
            retry.cancel()
            #expect(await retry.finishes())
            #expect(retry.isCancelled && retry.output == nil)
        }
        // Only the handling of attempt 1's finish (held in the clock) may hold the retry now.
        #expect(weakRetry != nil, "the retry machinery lets go of its owner while it still uses it")
        clock.proceed.open()
        #expect(await eventually { weakRetry == nil }, "the owner is let go once the handling ends")
        clock.fireAll()
        #expect(runs.values == [1], "no attempt after the cancel")
    }
}
