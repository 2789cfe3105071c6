// Where a queue runs its workers: an executor instead of a dispatch queue (a test kit's manual
// executor), the process-wide main queue, and child queues taking their parent's executor and clock.
import Dispatch

/// Runs the jobs of a ``ConcurrentOperationQueue`` made with ``ConcurrentOperationQueue/init(name:executor:clock:)``
/// instead of a dispatch queue: each job is one step of a worker (it runs one operation).
///
/// A job must run once, on any thread, and not on the thread that enqueued it while that thread
/// is inside `enqueue`: the queue calls `enqueue` with no lock held, but from code (a finishing
/// operation, an add) that expects to return first. Jobs of one executor may run one at a time
/// (a test kit's manual executor does, when the test asks) or concurrently.
public protocol OperationExecutor: AnyObject, Sendable {
    /// Runs `job` later, once.
    ///
    /// - Parameter job: One worker step of the queue.
    func enqueue(_ job: @escaping OperationExecutorJob)
}

/// One worker step of a ``ConcurrentOperationQueue`` on an ``OperationExecutor``. It returns
/// whether it ran an operation: `false` when the worker found no work (a worker the queue started
/// for an operation that another job took first). Executors that only run jobs ignore the result.
public typealias OperationExecutorJob = @Sendable () -> Bool

extension ConcurrentOperationQueue {
    /// Creates a queue whose workers run as jobs of `executor` rather than on a dispatch queue.
    ///
    /// Each job runs one operation (one step of a worker); the queue enqueues the next job when
    /// that operation leaves its slot, so a test that runs jobs one by one steps operations one
    /// by one (see `DeterministicQueue` in OperationKitTestSupport). Operations whose body is
    /// async still run their body in a Swift task.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - executor: What runs the workers' jobs.
    ///   - clock: The ``clock`` of its operations' timers; real time by default.
    public convenience init(
        name: String? = nil, executor: any OperationExecutor, clock: any OperationClock = SystemOperationClock()
    ) {
        self.init(name: name, clock: clock)
        self.executor = executor
        settingsToPassOn.store(true, ordering: .releasing)
    }

    /// The executor the workers run on, if the queue was made with one (or took its parent's,
    /// as a group's child queue does).
    public var operationExecutor: (any OperationExecutor)? { lock.withLock { executor } }

    /// The process-wide queue that runs its operations on the main dispatch queue, one at a time.
    ///
    /// For apps and for command-line tools that call `dispatchMain()` (or run the main run loop):
    /// an operation in it executes on the main thread, so it may touch main-thread-only state. Its
    /// ``maxConcurrentOperationCount`` stays 1: raising it throws. Never block the main thread
    /// waiting for this queue (``waitUntilAllOperationsAreFinishedBlocking()`` from the main thread
    /// would wait forever); await ``waitUntilAllOperationsAreFinished()`` instead.
    public static let main = ConcurrentOperationQueue(mainQueueNamed: "main")

    /// Builds a queue with the main queue's rules on `underlyingQueue` (the main dispatch queue
    /// for ``main``; a serial queue of a test's to check those rules where the main queue is not
    /// serviced).
    convenience init(mainQueueNamed name: String, underlyingQueue: DispatchQueue = .main) {
        self.init(name: name, qualityOfService: .userInteractive, underlyingQueue: underlyingQueue)
        isSerialOnly = true
        _maxConcurrentOperationCount = 1
        limitMirror.store(1, ordering: .releasing)
    }

    /// Why ``main`` refuses a limit other than 1.
    func serialOnlyRefusal(_ count: Int) -> OperationError {
        OperationError(
            .invalidMaxConcurrentOperationCount, operations: [displayName],
            "the main queue runs one operation at a time: its maxConcurrentOperationCount stays 1, not \(count)")
    }

    /// Runs one step of a worker on an executor: one operation (`first`, or the next ready one),
    /// then a new job for the next ready operation, if any, with the slot.
    ///
    /// - Returns: Whether it ran an operation (`false`: none was ready, and the slot went back).
    func runStep(first: ConcurrentOperation?) -> Bool {
        CurrentQueue.with(self) {
            guard let operation = first ?? lock.withLock({ nextOrReleaseSlot() }) else { return false }
            var lookup = NextLookup(mayLinger: false)
            if let next = runTaken(operation, lookup: &lookup) { startWorker(with: next) }
            return true
        }
    }

    /// A group's child queue (or a retry's attempt queue) takes the executor and clock of
    /// `parent`, the queue its owner was added to — each only if it was given none of its own
    /// (no underlying queue nor executor; the system clock) — and passes them on to the
    /// operations it holds that have queues of their own (a group in a group).
    ///
    /// Runs when the owner is added, before the child queue can start a worker (a group's queue
    /// is suspended until the group executes; a retry's is empty until then). `executor` is
    /// written under `lock`; `startWorkers` reads it without the lock, but only after
    /// `reserveWorkers` took the lock, which orders the two.
    func adoptSettings(of parent: ConcurrentOperationQueue) {
        let (parentExecutor, parentClock) = parent.lock.withLock { (parent.executor, parent._clock) }
        let adopted = lock.withLock { () -> Bool in
            var adopted = false
            if let parentExecutor, executor == nil, underlyingQueue == nil {
                executor = parentExecutor
                adopted = true
            }
            if !(parentClock is SystemOperationClock), _clock is SystemOperationClock {
                _clock = parentClock
                adopted = true
            }
            return adopted
        }
        guard adopted else { return }
        settingsToPassOn.store(true, ordering: .releasing)
        for operation in operations { operation.adoptQueueSettings(of: self) }
    }
}
