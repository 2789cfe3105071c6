// The stress tests' waits without a blocked pool thread: the stress tests run beside the unit
// tests, and a stress test that blocks a thread of Swift's 2-thread cooperative pool (on a
// 2-core machine) for a long time, under the thread sanitizer above all, starves the bounded
// async waits of the tests running beside it. So every stress test is `async`, and each blocking
// wait runs on a thread of its own (a serial dispatch queue: neither a cooperative-pool thread
// nor one of Dispatch's global pool), awaited with a bound.

import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Runs the blocking `body` on a thread of its own and returns what it returns, or `nil` if it
/// has not returned within `timeout` (the blocked thread is abandoned: a hang fails the test
/// instead of hanging the run).
func waitingOffThePoolReturning<Value: Sendable>(
    within timeout: Duration = Stress.timeout, _ body: @escaping @Sendable () -> Value
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
        DispatchQueue(label: "OperationKitStressTests.offThePool").async {
            var run = work.withLock { work in
                defer { work = nil }
                return work
            }
            guard let value = run?() else { return }
            run = nil
            if claim() { continuation.resume(returning: value) }
        }
        let (seconds, attoseconds) = timeout.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        DispatchQueue(label: "OperationKitStressTests.offThePool.deadline")
            .asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) {
                if claim() { continuation.resume(returning: nil) }
            }
    }
}

/// Whether the blocking `wait`, run as ``waitingOffThePoolReturning(within:_:)`` runs it,
/// returned `true` within `timeout`.
func offThePool(within timeout: Duration = Stress.timeout, _ wait: @escaping @Sendable () -> Bool) async -> Bool {
    await waitingOffThePoolReturning(within: timeout, wait) ?? false
}

/// Runs the blocking, throwing `body` as ``waitingOffThePoolReturning(within:_:)`` runs it and
/// rethrows its error; records an issue and throws ``StressTimedOut`` if it has not returned
/// within `timeout`.
func throwingOffThePool<Value: Sendable>(
    within timeout: Duration = Stress.timeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () throws -> Value
) async throws -> Value {
    guard let result = await waitingOffThePoolReturning(within: timeout, { Result { try body() } }) else {
        Issue.record("a blocking call did not return within \(timeout)", sourceLocation: sourceLocation)
        throw StressTimedOut(timeout: timeout)
    }
    return try result.get()
}

/// The error of ``throwingOffThePool(within:sourceLocation:_:)`` when the call did not return.
struct StressTimedOut: Error, CustomStringConvertible {
    let timeout: Duration
    var description: String { "a blocking call did not return within \(timeout)" }
}

extension Latch {
    /// Whether the latch opens within `timeout` (waiting off the pool).
    func opens(within timeout: Duration = Stress.timeout) async -> Bool { await opened(within: timeout) }
}

extension Gate {
    /// Whether the gate opens within `timeout` (waiting off the pool).
    func opens(within timeout: Duration = Stress.timeout) async -> Bool { await opened(within: timeout) }
}

extension ConcurrentOperation {
    /// Whether the operation finishes (and its completion block has run) within `timeout`.
    func finishes(within timeout: Duration = Stress.timeout) async -> Bool {
        await offThePool(within: timeout + .seconds(1)) { self.waitUntilFinishedBlocking(timeout: timeout) }
    }
}

extension ConcurrentOperationQueue {
    /// Whether the queue has released all its operations within `timeout`.
    func empties(within timeout: Duration = Stress.timeout) async -> Bool {
        await offThePool(within: timeout + .seconds(1)) { self.waitUntilAllOperationsAreFinishedBlocking(timeout: timeout) }
    }
}

/// ``onThreads(_:label:_:)``, its wait for the threads off the pool.
func onThreads(_ count: Int, label: String, _ body: @escaping @Sendable (Int) -> Void) async -> Bool {
    await offThePool(within: Stress.timeout + .seconds(1)) { onThreads(count, label: label, body) }
}

/// ``quiesce(_:)``, its wait off the pool.
func quiesce(_ queues: DispatchQueue...) async -> Bool {
    let done = Latch(count: queues.count)
    for queue in queues {
        queue.async(flags: .barrier) { done.countDown() }
    }
    return await done.opens()
}

/// ``spin(until:_:)`` for an async test: polls `done()`, letting the thread go between looks (not
/// blocking it), until it holds or `deadline` passes. Returns `done()`.
func spin(until deadline: ContinuousClock.Instant, _ done: () -> Bool) async -> Bool {
    while !done() {
        if ContinuousClock.now >= deadline { return false }
        // Lets the thread go for a moment: a poll that only yields keeps a thread of the
        // cooperative pool busy, and two of them starve Dispatch's global queues (which share
        // those threads on a 2-core machine) of the work the polls wait for.
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}
