// WaitStrategyTests: the sequence of waits of each strategy shared by retries and repeats,
// their bounds, and the RetryOperation.WaitStrategy name kept for source compatibility.
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("WaitStrategy", .offThePool)
struct WaitStrategyTests {
    static func waits(_ strategy: WaitStrategy, _ count: Int = 6) -> [Duration] {
        (1...count).map { strategy.delay(after: $0) }
    }

    @Test("constant is fixed under another name; immediate is zero")
    func constant() {
        #expect(Self.waits(.constant(.seconds(1))) == Array(repeating: .seconds(1), count: 6))
        #expect(Self.waits(.immediate) == Array(repeating: .zero, count: 6))
        #expect(WaitStrategy.fixed(.seconds(-1)).delay(after: 1) == .zero, "never negative")
    }

    @Test("incrementing: initial, then one increment more each time, at most the maximum")
    func incrementing() {
        #expect(Self.waits(.incrementing(initial: .zero, increment: .seconds(3))) == [0, 3, 6, 9, 12, 15].map { .seconds($0) })
        #expect(Self.waits(.incrementing(initial: .seconds(1), increment: .seconds(2), maximum: .seconds(6)))
            == [1, 3, 5, 6, 6, 6].map { .seconds($0) })
        #expect(Self.waits(.incrementing(initial: .seconds(2), increment: .seconds(-1)), 4) == [2, 1, 0, 0].map { .seconds($0) })
    }

    @Test("fibonacci: period × 1, 1, 2, 3, 5 …, at most the maximum")
    func fibonacci() {
        #expect(Self.waits(.fibonacci(period: .seconds(1), maximum: .seconds(30)), 10)
            == [1, 1, 2, 3, 5, 8, 13, 21, 30, 30].map { .seconds($0) })
        #expect(WaitStrategy.fibonacci(period: .milliseconds(10)).delay(after: 0) == .milliseconds(10))
        #expect(WaitStrategy.fibonacci(period: .seconds(1)).delay(after: 10_000) > .seconds(1_000_000), "clamped, no trap")
    }

    @Test("exponential: initial × multiplier^(n−1), at most the maximum")
    func exponential() {
        #expect(Self.waits(.exponential(initial: .seconds(1), multiplier: 2, maximum: .seconds(20)))
            == [1, 2, 4, 8, 16, 20].map { .seconds($0) })
    }

    @Test("random: within its range, varying; a maximum below the minimum means the minimum")
    func random() {
        let strategy = WaitStrategy.random(minimum: .seconds(1), maximum: .seconds(2))
        let samples = (1...200).map { strategy.delay(after: $0) }
        #expect(samples.allSatisfy { $0 >= .seconds(1) && $0 <= .seconds(2) })
        #expect(Set(samples).count > 1)
        #expect(WaitStrategy.random(minimum: .seconds(3), maximum: .seconds(1)).delay(after: 1) == .seconds(3))
    }

    @Test("custom: the closure's wait for each attempt, negative waits clamped to zero")
    func custom() {
        let asked = Recorder<Int>()
        let strategy = WaitStrategy.custom { attempt in
            asked.record(attempt)
            return .milliseconds(attempt * 100 - 250)
        }
        #expect(Self.waits(strategy, 4) == [0, 0, 50, 150].map { .milliseconds($0) })
        #expect(asked.values == [1, 2, 3, 4])
        #expect(strategy.description == "custom(…)")
    }

    @Test("RetryOperation.WaitStrategy is the shared WaitStrategy; a retry takes a custom strategy")
    func sharedWithRetry() async throws {
        let wait: RetryOperation<Int>.WaitStrategy = .custom { _ in .zero }
        let shared: WaitStrategy = wait
        #expect(shared.delay(after: 1) == .zero)
        let retry = RetryOperation<Int>(maxAttempts: 3, wait: shared) { _ in ClosureProcedure { 1 } }
        let queue = ConcurrentOperationQueue(name: "shared-wait")
        try queue.addOperation(retry)
        #expect(await retry.finishes())
        #expect(retry.output == 1)
    }
}
