// Tests of the library's own locks (Support/Lock.swift): on Linux `Lock` is a futex word of our
// own, so these check that it excludes, that a thread that went to sleep on it is woken, and that
// the recursive lock may be re-taken by its holder. Every wait is bounded: a lost wake-up fails
// the test instead of hanging it.
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
@testable import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// A counter that is deliberately not atomic: only a lock keeps increments from being lost (and
/// the thread sanitizer reports any increment the lock does not order).
private final class PlainCounter: @unchecked Sendable {  // guarded by the lock under test
    var value = 0
}

/// Starts `count` threads of their own (not the Dispatch pool, which the queues under test of
/// parallel tests may hold), each running `body` with its index.
private func startThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    for index in 0..<count {
        let thread = Thread { body(index) }
        thread.start()
    }
}

@Suite("Locks: the futex lock and the recursive lock")
struct LockTests {
    @Test("threads hammering one lock lose no increment", arguments: [false, true])
    func excludes(striped: Bool) {
        let owner = PlainCounter()
        let lock = striped ? Lock.striped(for: owner) : Lock()
        let threads = 4
        let increments = 20_000
        let done = Latch(count: threads)
        startThreads(threads) { _ in
            for _ in 0..<increments {
                lock.withLock { owner.value += 1 }
            }
            done.countDown()
        }
        #expect(done.wait(timeout: .seconds(60)), "a thread never got the lock: \(done.count) of \(threads) still running")
        #expect(lock.withLock { owner.value } == threads * increments)
    }

    @Test("a lock held long enough for others to sleep on it wakes each of them in turn")
    func wakesSleepers() {
        let lock = Lock()
        let counter = PlainCounter()
        let waiters = 3
        let held = Latch()
        let release = Gate()
        let started = Latch(count: waiters)
        let done = Latch(count: waiters)
        startThreads(1) { _ in
            lock.lock()
            held.countDown()
            _ = release.wait(timeout: .seconds(60))
            counter.value += 1
            lock.unlock()
        }
        #expect(held.wait(timeout: .seconds(30)))
        startThreads(waiters) { _ in
            started.countDown()
            lock.lock()
            counter.value += 1
            lock.unlock()
            done.countDown()
        }
        #expect(started.wait(timeout: .seconds(30)))
        #if os(Linux)
        // The waiters watch the held lock for a moment, then mark it as slept on and sleep.
        let marked = waitUntil(within: .seconds(30)) {
            lock.word.pointee.load(ordering: .relaxed) == LockWord.heldWithSleepers
        }
        #expect(marked, "no waiter went to sleep on the held lock")
        #endif
        release.open()
        #expect(done.wait(timeout: .seconds(30)), "\(done.count) of \(waiters) waiters were never woken")
        #expect(lock.withLock { counter.value } == waiters + 1)
        #if os(Linux)
        #expect(lock.word.pointee.load(ordering: .relaxed) == LockWord.free)
        #endif
    }

    @Test("a lock with sleepers passes from thread to thread many times without a lost wake-up")
    func manyHandOffs() {
        // Long critical sections, so that threads regularly exhaust the watch and sleep.
        let lock = Lock()
        let counter = PlainCounter()
        let threads = 4
        let rounds = 2_000
        let done = Latch(count: threads)
        startThreads(threads) { _ in
            for _ in 0..<rounds {
                lock.withLock {
                    var spin = 0
                    for step in 0..<2_000 { spin &+= step }
                    counter.value += spin == 0 ? 0 : 1
                }
            }
            done.countDown()
        }
        #expect(done.wait(timeout: .seconds(120)), "\(done.count) of \(threads) threads never finished")
        #expect(lock.withLock { counter.value } == threads * rounds)
    }

    @Test("the recursive lock may be re-taken by its holder and still excludes other threads")
    func recursive() {
        let lock = RecursiveLock()
        let counter = PlainCounter()
        let value = lock.withLock { lock.withLock { lock.withLock { 42 } } }
        #expect(value == 42)
        let threads = 4
        let done = Latch(count: threads)
        startThreads(threads) { _ in
            for _ in 0..<5_000 {
                lock.withLock { lock.withLock { counter.value += 1 } }
            }
            done.countDown()
        }
        #expect(done.wait(timeout: .seconds(60)))
        #expect(lock.withLock { counter.value } == threads * 5_000)
    }
}

#if os(Linux)
/// Looks at `condition`, yielding the thread between looks, until it holds or `timeout` passes
/// (the lock's word has no event to wait for).
private func waitUntil(within timeout: Duration, _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        sched_yield()
    }
    return true
}
#endif
