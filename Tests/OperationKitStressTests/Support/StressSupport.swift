// The root stress suite, the Stress knobs, and the helpers every stress suite shares: seeded
// random numbers, clocks, tallies, threads released at once, waits and failure reports.

import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The root of every stress suite. `.serialized` applies to all nested suites (declared in
/// extensions in the other files), so only one stress test loads the machine at a time.
@Suite("OperationKit stress", .serialized)
enum StressTests {}

/// Knobs shared by the stress suites.
enum Stress {
    /// How long any wait may take before the test fails. Generous: only a hang reaches it, and no
    /// assertion depends on how fast anything is.
    static let timeout: Duration = .seconds(60)

    /// `OPERATIONKIT_STRESS_SCALE` (default 1). Scales the sizes that ``count(_:)`` returns, so a
    /// slow configuration (the thread sanitizer) can run fewer operations. Never above 1.
    static let scale: Double = {
        guard let raw = getenv("OPERATIONKIT_STRESS_SCALE"), let value = Double(String(cString: raw)) else {
            return 1
        }
        return min(1, max(0.01, value))
    }()

    /// `base` scaled by ``scale``, at least `minimum`.
    static func count(_ base: Int, minimum: Int = 1) -> Int {
        max(minimum, Int((Double(base) * scale).rounded()))
    }
}

/// SplitMix64: a tiny seeded generator, so every random graph can be rebuilt from its seed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in `0..<bound`.
    mutating func below(_ bound: Int) -> Int { Int.random(in: 0..<bound, using: &self) }

    /// `true` with probability `percent` / 100.
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}

/// A process-wide logical clock: each tick is unique and ticks are totally ordered consistently
/// with happens-before, so "started after that finished" is a comparison of ticks.
final class LogicalClock: Sendable {
    private let value = Atomic<Int>(0)

    init() {}

    func tick() -> Int { value.add(1, ordering: .sequentiallyConsistent).newValue }
}

/// What happened to one operation. All fields are atomics; 0 means "never".
final class Tally: Sendable {
    /// How many times the work ran.
    let executions = Atomic<Int>(0)
    /// How many of our `finish()` calls returned `true`.
    let finishWins = Atomic<Int>(0)
    /// How many times the completion block ran.
    let completions = Atomic<Int>(0)
    /// The clock tick when the work started (the last time, if it wrongly ran twice).
    let startedAt = Atomic<Int>(0)
    /// The clock tick when the completion block ran.
    let finishedAt = Atomic<Int>(0)

    init() {}

    func recordStart(_ clock: LogicalClock) {
        executions.add(1, ordering: .acquiringAndReleasing)
        startedAt.store(clock.tick(), ordering: .releasing)
    }

    func recordFinish(_ won: Bool) {
        if won { finishWins.add(1, ordering: .acquiringAndReleasing) }
    }

    func recordCompletion(_ clock: LogicalClock) {
        completions.add(1, ordering: .acquiringAndReleasing)
        finishedAt.store(clock.tick(), ordering: .releasing)
    }

    var executionCount: Int { executions.load(ordering: .acquiring) }
    var finishWinCount: Int { finishWins.load(ordering: .acquiring) }
    var completionCount: Int { completions.load(ordering: .acquiring) }
    var started: Int { startedAt.load(ordering: .acquiring) }
    var finished: Int { finishedAt.load(ordering: .acquiring) }
}

/// Counts operations in flight and remembers the highest count seen.
final class ConcurrencyMeter: Sendable {
    private let current = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)
    private let entries = Atomic<Int>(0)

    init() {}

    /// First thing in an operation's work.
    func enter() {
        let now = current.add(1, ordering: .acquiringAndReleasing).newValue
        highest.max(now, ordering: .acquiringAndReleasing)
        entries.add(1, ordering: .acquiringAndReleasing)
    }

    /// Last thing before the operation's `finish()`.
    func leave() { current.subtract(1, ordering: .acquiringAndReleasing) }

    var peak: Int { highest.load(ordering: .acquiring) }
    var inFlight: Int { current.load(ordering: .acquiring) }
    var entered: Int { entries.load(ordering: .acquiring) }
}

/// A weak reference that can be read from any thread.
final class WeakRef: @unchecked Sendable {  // `object` is written only in init; weak loads are thread-safe
    weak var object: AnyObject?

    init(_ object: AnyObject) { self.object = object }

    var isReleased: Bool { object == nil }
}

/// Holds an operation so that a closure can capture "itself": closure → box → operation.
final class OperationBox: @unchecked Sendable {  // `operation` is set once before the operation is shared
    var operation: ConcurrentOperation?

    init() {}
}

/// Runs `body(index)` on `count` threads of their own, all released at once, and waits for all
/// of them. Each runs on a private serial (overcommitting) dispatch queue, so they truly overlap
/// even when the pool is small. Returns `false` if they did not all finish within the timeout.
func onThreads(_ count: Int, label: String, _ body: @escaping @Sendable (Int) -> Void) -> Bool {
    let start = Gate()
    let done = Latch(count: count)
    for index in 0..<count {
        DispatchQueue(label: "\(label).\(index)").async {
            if start.wait(timeout: Stress.timeout) { body(index) }
            done.countDown()
        }
    }
    start.open()
    return done.wait(timeout: Stress.timeout)
}

/// Waits until every block submitted so far to each of `queues` (custom concurrent queues) has
/// returned, so whatever those blocks captured has been released.
func quiesce(_ queues: DispatchQueue...) -> Bool {
    let done = Latch(count: queues.count)
    for queue in queues {
        queue.async(flags: .barrier) { done.countDown() }
    }
    return done.wait(timeout: Stress.timeout)
}

/// The indices in `0..<count` for which `isBad` holds, at most `limit` of them (for messages).
func offenders(_ count: Int, limit: Int = 10, _ isBad: (Int) -> Bool) -> (count: Int, first: [Int]) {
    var total = 0
    var first: [Int] = []
    for index in 0..<count where isBad(index) {
        total += 1
        if first.count < limit { first.append(index) }
    }
    return (total, first)
}

/// Runs `body`, which must throw an `OperationError`, and returns it (`nil`, recorded as an
/// issue, if it threw nothing or another error).
func expectOperationError(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) -> OperationError? {
    do {
        try body()
        Issue.record("expected an OperationError", sourceLocation: sourceLocation)
    } catch let error as OperationError {
        return error
    } catch {
        Issue.record(error, "expected an OperationError", sourceLocation: sourceLocation)
    }
    return nil
}

/// Waits, yielding the processor, until `done()` or `deadline`. Returns `done()`.
func spin(until deadline: ContinuousClock.Instant, _ done: () -> Bool) -> Bool {
    while !done() {
        if ContinuousClock.now >= deadline { return false }
        sched_yield()
    }
    return true
}

/// Lets another thread run.
func yieldThread() { sched_yield() }

/// The deadline of a wait that starts now.
func stressDeadline() -> ContinuousClock.Instant { ContinuousClock.now + Stress.timeout }

/// Every index in `0..<count` whose `problem` is not `nil`, with the first few problems, for a message.
func problems(_ count: Int, limit: Int = 5, _ problem: (Int) -> String?) -> (count: Int, first: [String]) {
    var total = 0
    var first: [String] = []
    for index in 0..<count {
        guard let found = problem(index) else { continue }
        total += 1
        if first.count < limit { first.append("#\(index): \(found)") }
    }
    return (total, first)
}
