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
/// event to wait for (polls, with ``pollPause()`` between two looks; no assertion depends on how
/// long it takes).
@discardableResult
func untilTrue(
    _ timeout: Duration = operationTestTimeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: @escaping @Sendable () -> Bool
) async throws -> Bool {
    try await awaitWithin(timeout, sourceLocation: sourceLocation) {
        while !condition() { await pollPause() }
        return true
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

// MARK: - Blocking calls, off the pool

/// Runs the blocking `body` on a thread of its own (a serial dispatch queue: neither a thread of
/// Swift's cooperative pool nor of Dispatch's global pool) and returns what it returns, or `nil`
/// if it has not returned within `timeout`: a blocking call that hangs makes the test fail
/// instead of hanging it (the blocked thread is abandoned). For the tests of blocking API
/// (`waitUntilFinishedBlocking()`, `addOperations(_:waitUntilFinished: true)`, …) and for
/// scenarios that must block a thread.
func waitingOffThePoolReturning<Value: Sendable>(
    within timeout: Duration = operationTestTimeout, _ body: @escaping @Sendable () -> Value
) async -> Value? {
    let resumed = Locked(false)
    let claim: @Sendable () -> Bool = {
        resumed.withLock { done in
            defer { done = true }
            return !done
        }
    }
    return await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
        // The block lets go of `body` (and what it captured) before the test goes on.
        let work = Locked<(@Sendable () -> Value)?>(body)
        DispatchQueue(label: "OperationKitTests.offThePool").async {
            var run = work.withLock { work in
                defer { work = nil }
                return work
            }
            guard let value = run?() else { return }
            run = nil
            if claim() { continuation.resume(returning: value) }
        }
        DispatchQueue(label: "OperationKitTests.offThePool.deadline")
            .asyncAfter(deadline: .now() + timeout.testDispatchInterval) {
                if claim() { continuation.resume(returning: nil) }
            }
    }
}

/// Whether the blocking `wait`, run as ``waitingOffThePoolReturning(within:_:)`` runs it,
/// returned `true` within `timeout` (`false` if it returned `false` or did not return).
func offThePool(within timeout: Duration = operationTestTimeout, _ wait: @escaping @Sendable () -> Bool) async -> Bool {
    await waitingOffThePoolReturning(within: timeout, wait) ?? false
}

/// Whether the blocking `body`, run as ``waitingOffThePoolReturning(within:_:)`` runs it,
/// returned within `timeout`.
func returnsOffThePool(within timeout: Duration = operationTestTimeout, _ body: @escaping @Sendable () -> Void) async -> Bool {
    await waitingOffThePoolReturning(within: timeout) { body(); return true } ?? false
}

/// Like ``returnsOffThePool(within:_:)`` for a throwing `body`: its error is rethrown; a
/// `body` that has not returned within `timeout` records an issue and throws ``AwaitTimedOut``.
func throwingOffThePool<Value: Sendable>(
    within timeout: Duration = operationTestTimeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () throws -> Value
) async throws -> Value {
    guard let result = await waitingOffThePoolReturning(within: timeout, { Result { try body() } }) else {
        Issue.record("a blocking call did not return within \(timeout)", sourceLocation: sourceLocation)
        throw AwaitTimedOut(timeout: timeout)
    }
    return try result.get()
}

extension Duration {
    /// The duration for a dispatch deadline, in nanoseconds.
    var testDispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }
}

/// ``caughtOperationError(sourceLocation:_:)`` for an async `body` (a blocking call run off the
/// pool, say): the `OperationError` it throws, or `nil` if it throws nothing; any other error
/// (a ``AwaitTimedOut`` for one) is recorded as an issue.
func awaitedOperationError(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async -> OperationError? {
    do {
        try await body()
        return nil
    } catch let error as OperationError {
        return error
    } catch {
        Issue.record(error, "expected an OperationError", sourceLocation: sourceLocation)
        return nil
    }
}

/// What a poll for a state does between two looks: lets its thread go for a moment. A poll that
/// only yields (`Task.yield()`) keeps its thread of the cooperative pool busy; on a 2-core
/// machine two such polls hold both of the threads that Dispatch's global queues share with the
/// pool, and the operations the polls wait for never get one (a test then fails at its bound).
/// Not synchronisation: the poll still ends on the state it waits for, or at its bound.
func pollPause() async {
    try? await Task.sleep(for: .milliseconds(1))
}
