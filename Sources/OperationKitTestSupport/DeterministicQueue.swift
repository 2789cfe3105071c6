// DeterministicQueue: a queue whose workers run only when the test steps them, on the test's
// thread, with a virtual clock; child queues of its groups and retries step with it.
import OperationKit

/// An `OperationExecutor` that keeps the jobs it is given until they are run one by
/// one with ``runNext()``, on the calling thread, in the order they were enqueued.
public final class ManualExecutor: OperationExecutor, Sendable {
    private let jobs = Locked<[OperationExecutorJob]>([])

    /// Creates an executor with no jobs.
    public init() {}

    /// Keeps `job` until a ``runNext()`` runs it.
    ///
    /// - Parameter job: A worker step of a queue.
    public func enqueue(_ job: @escaping OperationExecutorJob) {
        jobs.withLock { $0.append(job) }
    }

    /// How many jobs wait (some may find no work when they run: see ``runNext()``).
    public var pendingJobCount: Int { jobs.withLock { $0.count } }

    /// Runs the oldest jobs on the calling thread until one runs an operation: a job whose worker
    /// finds no work (another job took it) does not count as a step.
    ///
    /// - Returns: `true` if a job ran an operation; `false` if no job left does.
    @discardableResult
    public func runNext() -> Bool {
        while let job = jobs.withLock({ jobs -> OperationExecutorJob? in jobs.isEmpty ? nil : jobs.removeFirst() }) {
            if job() { return true }
        }
        return false
    }
}

/// A queue a test steps by hand: nothing runs until the test calls ``runNext()``,
/// ``runUntilIdle(limit:)`` or ``advance(by:)``, and then it runs on the test's thread, in a fixed order,
/// with a ``VirtualClock`` as the queue's clock.
///
/// ```swift
/// let deterministic = DeterministicQueue()
/// let log = Recorder<String>()
/// deterministic.addOperation(ClosureOperation { log.record("a") })
/// deterministic.addOperation(ClosureOperation { log.record("b") })
/// // nothing has run yet
/// deterministic.runNext()        // runs "a"
/// deterministic.runUntilIdle()   // runs "b"
/// ```
///
/// - Each job runs one operation (one worker step); the queue's limit still holds, so with a
///   limit of 1 each ``runNext()`` runs the next operation in priority order.
/// - A `GroupOperation`'s children and a `RetryOperation`'s attempts
///   run on queues of their own, which take this queue's executor and clock when the group or
///   retry is added here: they step with it.
/// - Timers (delays, timeouts, retry waits) of its operations use ``clock``: they fire only when
///   the test moves time with ``advance(by:)``.
/// - Work that leaves the queue's workers is not stepped: an `AsyncOperation`'s
///   body runs in a Swift task, a callback-finished operation finishes when its callback comes.
public final class DeterministicQueue: Sendable {
    /// The executor that keeps the workers' jobs.
    public let executor: ManualExecutor
    /// The virtual clock of the queue (and of the child queues that step with it).
    public let clock: VirtualClock
    /// The queue itself: configure it (limit, suspension, instrument) as any queue.
    public let queue: ConcurrentOperationQueue

    /// Creates a stepped queue.
    ///
    /// - Parameters:
    ///   - name: The queue's name.
    ///   - maxConcurrentOperationCount: The queue's limit; 64 (the default of every queue) unless
    ///     given.
    ///   - clock: The virtual clock; a new one by default.
    public init(
        name: String = "DeterministicQueue",
        maxConcurrentOperationCount: Int = ConcurrentOperationQueue.defaultMaxConcurrentOperationCount,
        clock: VirtualClock = VirtualClock()
    ) {
        let executor = ManualExecutor()
        self.executor = executor
        self.clock = clock
        queue = ConcurrentOperationQueue(name: name, executor: executor, clock: clock)
        try? queue.setMaxConcurrentOperationCount(max(1, maxConcurrentOperationCount))
    }

    /// Adds an operation; it runs when the test steps the queue.
    ///
    /// - Parameter operation: The operation.
    /// - Throws: what `ConcurrentOperationQueue.addOperation(_:)`
    ///   throws.
    public func addOperation(_ operation: ConcurrentOperation) throws(OperationError) {
        try queue.addOperation(operation)
    }

    /// Adds operations in one batch; they run when the test steps the queue.
    ///
    /// - Parameter operations: The operations.
    /// - Throws: what `ConcurrentOperationQueue.addOperations(_:waitUntilFinished:)`
    ///   throws.
    public func addOperations(_ operations: [ConcurrentOperation]) throws(OperationError) {
        try queue.addOperations(operations, waitUntilFinished: false)
    }

    /// How many jobs wait to run (an upper bound on the operations ready to run: a job may find
    /// that another took its operation).
    public var pendingJobCount: Int { executor.pendingJobCount }

    /// Runs the next operation ready, of this queue or of a child queue (the oldest waiting job
    /// that finds one), on the calling thread.
    ///
    /// - Returns: `false` if none was ready.
    @discardableResult
    public func runNext() -> Bool {
        executor.runNext()
    }

    /// Runs jobs, and fires the timers already due (deadline at or before ``VirtualClock/now``),
    /// until neither is left. Time does not move.
    ///
    /// - Parameter limit: The most steps to run, so that work that always makes more cannot loop
    ///   forever.
    /// - Returns: How many operations ran (steps, as ``runNext()`` counts them).
    @discardableResult
    public func runUntilIdle(limit: Int = 100_000) -> Int {
        var ran = 0
        while ran < limit {
            if executor.runNext() {
                ran += 1
            } else if let deadline = clock.nextDeadline, deadline <= clock.now {
                clock.advance(by: .zero)
            } else {
                break
            }
        }
        return ran
    }

    /// Moves virtual time forward by `duration`, stopping at each timer's deadline on the way to
    /// fire it and run until idle, so that work a timer starts runs before later timers fire.
    ///
    /// - Parameter duration: How far to move; a negative duration counts as zero.
    /// - Returns: How many operations ran (steps, as ``runNext()`` counts them).
    @discardableResult
    public func advance(by duration: Duration) -> Int {
        let target = clock.now.advanced(by: max(duration, .zero))
        var ran = runUntilIdle()
        while let deadline = clock.nextDeadline, deadline <= target {
            clock.advance(to: deadline)
            ran += runUntilIdle()
        }
        clock.advance(to: target)
        return ran + runUntilIdle()
    }
}
