// The test kit's synchronisation primitives: a count-down latch, a one-shot gate and a
// thread-safe recorder, each with bounded waits (blocking, or async without holding a pool thread).
import Dispatch
import OperationKit
import Synchronization

/// A count-down latch for tests: threads call ``countDown()``; a waiter blocks until the count
/// reaches zero or a timeout passes. Waiting never stands in for synchronisation by sleeping.
public final class Latch: Sendable {
    private let remaining: Atomic<Int>
    private let semaphore = DispatchSemaphore(value: 0)

    /// Creates a latch that opens after `count` calls to ``countDown()``.
    public init(count: Int = 1) {
        remaining = Atomic(count)
        if count <= 0 { semaphore.signal() }
    }

    /// Counts down once; the call that reaches zero opens the latch.
    public func countDown() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            semaphore.signal()
        }
    }

    /// The number of count-downs still missing (never below zero).
    public var count: Int { max(0, remaining.load(ordering: .acquiring)) }

    /// Blocks until the latch opens or `timeout` passes.
    ///
    /// - Returns: `true` if the latch opened, `false` on timeout.
    public func wait(timeout: Duration = .seconds(30)) -> Bool {
        let (seconds, attoseconds) = timeout.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        guard semaphore.wait(timeout: .now() + .nanoseconds(nanoseconds)) == .success else { return false }
        semaphore.signal()  // stay open for later waiters
        return true
    }

    /// Suspends the calling task until the latch opens or `timeout` passes, without blocking a
    /// thread of Swift's cooperative pool or of Dispatch's global pool (the blocking wait runs
    /// on a serial dispatch queue of its own, which gets a thread of its own: the queues under
    /// test keep every pool thread).
    ///
    /// - Parameter timeout: The longest wait.
    /// - Returns: `true` if the latch opened, `false` on timeout.
    public func opened(within timeout: Duration = .seconds(30)) async -> Bool {
        await blockingWaitOffThePools { self.wait(timeout: timeout) }
    }
}

/// A gate that blocks threads until it is opened once.
public final class Gate: Sendable {
    private let latch = Latch(count: 1)

    /// Creates a closed gate.
    public init() {}

    /// Opens the gate; every current and future ``wait(timeout:)`` returns `true`.
    public func open() { if latch.count > 0 { latch.countDown() } }

    /// Whether the gate has been opened.
    public var isOpen: Bool { latch.count == 0 }

    /// Blocks until the gate opens or `timeout` passes; `false` on timeout.
    public func wait(timeout: Duration = .seconds(30)) -> Bool { latch.wait(timeout: timeout) }

    /// Suspends the calling task until the gate opens or `timeout` passes, as
    /// ``Latch/opened(within:)`` does.
    ///
    /// - Parameter timeout: The longest wait.
    /// - Returns: `true` if the gate opened, `false` on timeout.
    public func opened(within timeout: Duration = .seconds(30)) async -> Bool {
        await latch.opened(within: timeout)
    }
}

/// Runs the blocking `wait` on a serial dispatch queue of its own and returns its result to the
/// suspended task.
func blockingWaitOffThePools(_ wait: @escaping @Sendable () -> Bool) async -> Bool {
    await withCheckedContinuation { continuation in
        DispatchQueue(label: "OperationKitTestSupport.wait").async { continuation.resume(returning: wait()) }
    }
}

/// A thread-safe log of values, in the order they were recorded.
///
/// ```swift
/// let order = Recorder<String>()
/// let first = ClosureOperation { order.record("first") }
/// ```
public final class Recorder<Value: Sendable>: @unchecked Sendable {  // `storage` is confined to `queue`
    private let queue = DispatchQueue(label: "OperationKitTestSupport.Recorder")
    private var storage: [Value] = []

    /// Creates an empty recorder.
    public init() {}

    /// Appends `value`.
    ///
    /// - Parameter value: The value to keep.
    public func record(_ value: Value) { queue.sync { storage.append(value) } }

    /// The values recorded so far.
    public var values: [Value] { queue.sync { storage } }
}
