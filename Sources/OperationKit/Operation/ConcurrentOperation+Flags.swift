// The atomic flags of a ConcurrentOperation (SlotHandoff, LifeFlags, Readiness), and how
// waiters and dependents meet a finish through them.

import Synchronization

/// The values of `ConcurrentOperation.slotHandoff`.
enum SlotHandoff {
    static let workerHolds: UInt8 = 0
    static let finished: UInt8 = 1
    static let workerLeft: UInt8 = 2
    /// Still executing, but holding no slot (`waitsWithoutSlot`): its finish releases none.
    static let slotReturned: UInt8 = 3
}

/// The bits of `ConcurrentOperation.lifeFlags`. A dependent registers (under the lock of the graph
/// component the two share) only
/// after setting `hasDependents` and seeing no `finished`; a finishing operation sets `finished`
/// and, if it sees `hasDependents`, takes its dependents under that lock. Both sides use
/// read-modify-writes of one atomic, so one of them always sees the other: a dependent is either
/// refused (its dependency has finished) or taken by the finish.
///
/// Waiters meet a finish the same way: a wait (`waitUntilFinished()`…) sets `hasWaiters` (under the
/// operation's lock, with its append) and waits only if `finished` was not set; the finish, after
/// the completion block, sets `finished` and takes the waiters only if `hasWaiters` was set. So a
/// wait returns only once the completion block has run.
///
/// Lifecycle event streams (`LifecycleEventStreams`) meet a finish in the same way:
/// `hasEventStreams` is set (under the side table's lock, with the insertion) before looking for
/// `finished`, and the finish delivers to the table if it sees it. Start and cancel steps load
/// it (relaxed suffices: a stream registered before the step's critical section is ordered
/// before the load by the operation's lock, and one registered after reads the step's effect
/// itself). Cleared, under the table's lock, when the finish has been delivered.
/// `skippedExecution` is set under the operation's lock in a start step that finishes without
/// executing (a cancelled operation), so that its streams do not report `started`.
enum LifeFlags {
    static let finished: UInt8 = 1
    static let hasDependents: UInt8 = 2
    static let hasWaiters: UInt8 = 4
    static let hasEventStreams: UInt8 = 8
    static let skippedExecution: UInt8 = 16
    /// Set with `finished` by a procedure, cleared when its did-finish observers have returned
    /// (see `ConcurrentOperation.FinishTail`): meanwhile a new waiter still waits.
    static let tailPending: UInt8 = 32
    /// A thread tells (or told) the operation's instrument that it was cancelled: the canceller,
    /// or the finish if it comes first. Set only when an instrument is installed.
    static let cancelTellClaimed: UInt8 = 64
    /// The cancel was told (by the canceller that claimed it): the finish, told after it, waits
    /// for this when the canceller is still telling (see `ConcurrentOperation.tellFinished`).
    static let cancelTold: UInt8 = 128
}

extension ConcurrentOperation {
    /// Under `lock`: adds `waiter` unless the operation has announced its finish (its
    /// completion block has run). Returns whether it was added.
    func addWaiter(_ waiter: Waiter) -> Bool {
        let previous = lifeFlags.bitwiseOr(LifeFlags.hasWaiters, ordering: .sequentiallyConsistent).oldValue
        if previous & (LifeFlags.finished | LifeFlags.tailPending) == LifeFlags.finished { return false }
        waiters.append(waiter)
        return true
    }

    /// Whether the operation has finished, read without a lock.
    var hasFinished: Bool { lifeFlags.load(ordering: .sequentiallyConsistent) & LifeFlags.finished != 0 }

    /// Whether a wait for the operation is over: it has finished, and a procedure's did-finish
    /// observers have returned. Read without a lock.
    var waitIsOver: Bool {
        lifeFlags.load(ordering: .sequentiallyConsistent) & (LifeFlags.finished | LifeFlags.tailPending) == LifeFlags.finished
    }

    /// Under the lock of the root of this operation's (and the dependent's) graph component: records `dependent` as waiting for this operation, unless it
    /// has finished. Returns whether it was recorded.
    func registerDependent(_ dependent: ConcurrentOperation) -> Bool {
        let flags = lifeFlags.load(ordering: .sequentiallyConsistent)
        if flags & LifeFlags.finished != 0 { return false }
        if flags & LifeFlags.hasDependents == 0 {
            let previous = lifeFlags.bitwiseOr(LifeFlags.hasDependents, ordering: .sequentiallyConsistent).oldValue
            if previous & LifeFlags.finished != 0 { return false }
        }
        dependents.append(Unmanaged.passUnretained(dependent))
        return true
    }
}

/// The encoding of `ConcurrentOperation.readiness`: the number of unfinished registered
/// dependencies in the low bits, plus a cancelled flag and an enqueuing flag. An operation is
/// pushed to its queue's ready list exactly once per time it becomes runnable, by whoever made it
/// so: the last dependency to finish (count reaches 0 with no flags), `cancel()` (sets the flag
/// while dependencies are pending), or the enqueuer (clears the enqueuing flag).
///
/// Two more bits order an instrument's `started` before a `cancelled` or `finished` told by
/// another thread (see `ConcurrentOperation.awaitStartedTold()`); set only when an instrument is
/// installed, after the operation left its queue's scheduling (it was taken by a worker, or
/// started by hand), where no store overwrites them.
enum Readiness {
    static let cancelled = 1 << 62
    static let enqueuing = 1 << 61
    /// The thread starting the operation will tell its instrument `started`: set before the
    /// start step.
    static let startTelling = Int.min
    /// `started` was told.
    static let startedTold = 1 << 60
    static let countMask = startedTold - 1

    static func isRunnable(_ value: Int) -> Bool {
        value & enqueuing == 0 && (value & countMask == 0 || value & cancelled != 0)
    }

    static func becameRunnableByCancelling(_ old: Int) -> Bool {
        old & cancelled == 0 && old & enqueuing == 0 && old & countMask > 0
    }
}
