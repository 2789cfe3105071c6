// WorkerTurn: how long a queue's worker, or a workflow's runner, keeps its thread before it makes
// way for the other work of its dispatch queue (Architecture.md, "Worker loops").

import Dispatch

/// A turn on a thread of the dispatch queue: a worker (`runWorker(handedOff:)`) or a workflow's
/// runner (`WorkflowRunOperation`) runs operations or runs one after another, and once its turn is
/// over and more work is ready, it goes to the back of its dispatch queue, so that a long backlog
/// does not hold up the other work queued there (other queues' workers, Dispatch users, and on
/// Linux Swift's tasks) until it is done.
///
/// A turn is over after at least `count` operations and at least the queue's turn time
/// (`ConcurrentOperationQueue.workerTurnTime`, 100 µs unless a test sets it) since it began; the
/// clock is read when the turn begins and once per `count` operations after that. A turn of
/// operations that take long is over after `count` of them; a turn of short ones lasts about the
/// turn time, so a backlog of short operations makes way a few times per millisecond rather than
/// after every `count` operations (each making way is a Dispatch `async` and, often, a thread
/// woken on the other core).
struct WorkerTurn {
    /// The fewest operations of a turn, and how often the turn looks at the clock.
    static let count = 64
    /// The turn time of a new queue. With the queue's default limit of 64 workers and two cores,
    /// a block queued behind a backlog waits for up to 64 turns spread over the cores: about
    /// 3 ms at 100 µs a turn.
    static let defaultTime: Duration = .microseconds(100)

    /// The turn time and its start, in nanoseconds of `DispatchTime` (plain integers: a
    /// `ContinuousClock.Instant` field, being resilient, would send a runner's fields through the
    /// runtime's generic paths).
    private let nanoseconds: UInt64
    private let start: UInt64
    private var remaining = WorkerTurn.count
    private var over = false

    /// Begins a turn that lasts at least `time` (no clock is read for a turn of zero time).
    init(time: Duration) {
        let (seconds, attoseconds) = time.components
        nanoseconds = time > .zero ? UInt64(seconds) &* 1_000_000_000 &+ UInt64(attoseconds / 1_000_000_000) : 0
        start = nanoseconds > 0 ? DispatchTime.now().uptimeNanoseconds : 0
    }

    /// Counts one operation (or run) of the turn; returns whether the turn is over. Once over, it
    /// stays over.
    @inline(__always)
    mutating func countOne() -> Bool {
        if over { return true }
        remaining &-= 1
        if remaining > 0 { return false }
        return lookAtTheClock()
    }

    @inline(never)
    private mutating func lookAtTheClock() -> Bool {
        if nanoseconds > 0 && DispatchTime.now().uptimeNanoseconds &- start < nanoseconds {
            remaining = Self.count
            return false
        }
        over = true
        return true
    }

    /// Whether the turn is over (without counting).
    var isOver: Bool { over }
}
