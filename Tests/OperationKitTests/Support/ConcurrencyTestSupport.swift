import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// The error of ``awaitWithin(_:sourceLocation:_:)`` when `body` did not finish in time.
struct AwaitTimedOut: Error, CustomStringConvertible {
    let timeout: Duration
    var description: String { "did not finish within \(timeout): a continuation was leaked or a wait hangs" }
}

/// Runs `body` in a new task and returns what it returns, or records an issue and throws
/// ``AwaitTimedOut`` if it has not returned within `timeout`: an await that would hang fails the
/// test instead (the stuck task is abandoned). `body`'s own errors are rethrown.
@discardableResult
func awaitWithin<Value: Sendable>(
    _ timeout: Duration = operationTestTimeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async throws -> Value
) async throws -> Value {
    guard let outcome = await outcome(within: timeout, of: body) else {
        Issue.record("timed out after \(timeout)", sourceLocation: sourceLocation)
        throw AwaitTimedOut(timeout: timeout)
    }
    return try outcome.get()
}

/// Waits, without blocking a thread, until `condition` holds; records an issue and throws
/// ``AwaitTimedOut`` if it has not within `timeout`. For a state another thread reaches with no
/// event to wait for (polls with a `PollPause`; no assertion depends on how long it takes).
@discardableResult
func untilTrue(
    _ timeout: Duration = operationTestTimeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: @escaping @Sendable () -> Bool
) async throws -> Bool {
    try await awaitWithin(timeout, sourceLocation: sourceLocation) {
        var pause = PollPause()
        while !condition() { await pause.next() }
        return true
    }
}

/// The pause between two checks of a polled condition: a yield first, then sleeps that double
/// from 50 µs up to 5 ms. A poll that only yields keeps a thread busy for as long as it lasts;
/// a few of them at once on a 2-core machine (the more so under TSan, or on a loaded CI runner)
/// take the CPU from the very work they wait for. The pause is a polling interval, not a
/// stand-in for an ordering: the condition is checked again after it, until the deadline.
struct PollPause {
    private var pause: Duration = .zero

    mutating func next() async {
        if pause == .zero {
            await Task.yield()
            pause = .microseconds(50)
            return
        }
        try? await Task.sleep(for: pause)
        pause = min(pause * 2, .milliseconds(5))
    }
}

/// Blocks (off the cooperative pool) until `latch` opens; `false` on timeout.
func opened(_ latch: Latch, within timeout: Duration = operationTestTimeout) async -> Bool {
    await latch.opened(within: timeout)
}

/// Blocks (off the cooperative pool) until `gate` opens; `false` on timeout.
func opened(_ gate: Gate, within timeout: Duration = operationTestTimeout) async -> Bool {
    await gate.opened(within: timeout)
}

/// Where blocking test waits run, so that they never hold a thread of Swift's cooperative pool
/// nor of Dispatch's global pool (whose workers run the queues under test: with both threads of
/// a 2-core machine blocked in waits, libdispatch adds a thread only after about a second). A
/// serial queue of its own gets a thread of its own.
enum BlockingWaits {
    static func run(_ body: @escaping @Sendable () -> Void) {
        DispatchQueue(label: "OperationKitTests.blockingWait").async(execute: body)
    }
}

/// The number of waiters an operation holds (tasks and threads waiting for it to finish).
func waiterCount(of operation: ConcurrentOperation) -> Int {
    operation.lock.withLock { operation.waiters.count }
}

/// The number of waiters a queue holds.
func waiterCount(of queue: ConcurrentOperationQueue) -> Int {
    queue.lock.withLock { queue.waiters.count }
}

/// An operation the test finishes by hand: `execute()` counts down `started` and returns.
final class HeldOperation: ConcurrentOperation, @unchecked Sendable {
    // Sendable, self-synchronising members only.
    let started = Latch()

    override func execute() { started.countDown() }
}
