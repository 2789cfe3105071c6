import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// Shared fixtures for the operation-layer tests (state machine, operations, dependencies, queue,
// misuse). Names are specific on purpose: other suites share this test target.

/// How long any test waits for something that must happen. Generous: a hang fails the test
/// instead of hanging CI, and no assertion depends on how fast anything is.
let operationTestTimeout: Duration = .seconds(30)

/// Runs `body` and returns the `OperationError` it threw, or `nil` if it threw nothing. Any other
/// error is recorded as a test failure.
func caughtOperationError(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) -> OperationError? {
    do {
        try body()
        return nil
    } catch let error as OperationError {
        return error
    } catch {
        Issue.record(error, "expected an OperationError", sourceLocation: sourceLocation)
        return nil
    }
}

/// A thread-safe counter.
final class AtomicCounter: Sendable {
    private let storage = Atomic<Int>(0)

    init() {}

    /// Adds one and returns the new value.
    @discardableResult
    func increment() -> Int { storage.add(1, ordering: .acquiringAndReleasing).newValue }

    var value: Int { storage.load(ordering: .acquiring) }
}

/// Counts operations in flight and remembers the highest count ever seen.
final class InFlightMeter: Sendable {
    private let current = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)

    init() {}

    /// Call first thing in an operation's work. Returns the number in flight, this one included.
    @discardableResult
    func enter() -> Int {
        let now = current.add(1, ordering: .acquiringAndReleasing).newValue
        var seen = highest.load(ordering: .acquiring)
        while now > seen {
            let (exchanged, original) = highest.compareExchange(
                expected: seen, desired: now, ordering: .acquiringAndReleasing)
            if exchanged { break }
            seen = original
        }
        return now
    }

    /// Call last thing in an operation's work, before it finishes.
    func leave() { current.subtract(1, ordering: .acquiringAndReleasing) }

    var peak: Int { highest.load(ordering: .acquiring) }
}

/// An operation whose `execute()` only records that it ran; the test calls `finish()` when it wants.
final class ManuallyFinishedOperation: ConcurrentOperation, @unchecked Sendable {
    // No mutable state of its own: the counter and latch are Sendable and synchronise themselves.
    let executions = AtomicCounter()
    let executed = Latch()

    override func execute() {
        executions.increment()
        executed.countDown()
    }
}

/// An operation that runs `work` and counts down a latch when it is deallocated, for leak checks.
final class DeallocationProbeOperation: ConcurrentOperation, @unchecked Sendable {
    // No mutable state of its own: `deallocated` and `work` are Sendable and set once in init.
    let deallocated: Latch
    private let work: @Sendable () -> Void

    init(name: String, deallocated: Latch, work: @escaping @Sendable () -> Void = {}) {
        self.deallocated = deallocated
        self.work = work
        super.init(name: name)
    }

    override func execute() {
        work()
        finish()
    }

    deinit { deallocated.countDown() }
}

/// Runs `body` in a new task and reports whether it returned within `timeout`. A wait that never
/// returns makes the test fail instead of hanging it (the stuck task is abandoned).
func completes(
    within timeout: Duration = operationTestTimeout, _ body: @escaping @Sendable () async -> Void
) async -> Bool {
    await outcome(within: timeout, of: body) != nil
}

/// A serial dispatch queue tagged so that code can check it runs on it.
final class TaggedDispatchQueue: @unchecked Sendable {
    // Immutable after init; DispatchQueue is thread-safe and the key is only read.
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<String>()
    private let tag: String

    init(_ tag: String, target: DispatchQueue? = nil) {
        self.tag = tag
        queue = DispatchQueue(label: tag, target: target)
        queue.setSpecific(key: key, value: tag)
    }

    /// Whether the calling code runs on this queue.
    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == tag }
}
