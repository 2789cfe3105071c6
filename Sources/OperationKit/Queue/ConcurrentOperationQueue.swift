import Dispatch
import Synchronization

/// OperationKit's scheduler: runs ``ConcurrentOperation``s over Dispatch, honouring
/// dependencies, priorities, a concurrency limit, suspension and cancellation.
///
/// ```swift
/// let queue = ConcurrentOperationQueue(name: "images")
/// let download = ClosureOperation { fetch() }
/// let resize = ClosureOperation { resize() }
/// try resize.addDependency(download)
/// try queue.addOperations([download, resize], waitUntilFinished: false)
/// await queue.waitUntilAllOperationsAreFinished()
/// ```
///
/// - An operation starts once all its dependencies have finished; dependencies may live in other
///   queues or in none. Ready operations start in priority order, FIFO within a priority.
/// - Scheduling costs O(1) per operation and per dependency edge: nothing scans the queue.
/// - Ready work waits in one list drained by at most ``maxConcurrentOperationCount`` worker loops
///   on the underlying dispatch queue, so an operation costs no Dispatch hop of its own.
/// - The queue retains an operation until it has finished, then releases it.
/// - Bad input — an operation added twice, to a second queue, after it started or finished, a
///   dependency cycle — throws an ``OperationError`` naming the operations; the queue and every
///   other operation carry on.
public final class ConcurrentOperationQueue {
    /// The default maximum number of operations that execute at once: 64. Operations that wait
    /// for a callback hold a slot but no thread, so a default as narrow as the number of cores
    /// would throttle them; work that blocks threads is bounded by Dispatch's thread pool anyway.
    public static let defaultMaxConcurrentOperationCount = 64

    /// The dispatch queue the workers run on, if one was given.
    public let underlyingQueue: DispatchQueue?
    /// The quality of service of the workers (and so of the operations that do not set their own).
    public let qualityOfService: DispatchQoS.QoSClass

    let target: DispatchQueue
    /// The executor that runs the workers instead of `target`, if any; written before any worker
    /// starts (see ConcurrentOperationQueue+Executor.swift).
    @exclusivity(unchecked) var executor: (any OperationExecutor)?
    /// Whether added operations take this queue's executor or clock for their own queues.
    let settingsToPassOn = Atomic<Bool>(false)
    /// ``main``'s rule: the limit stays 1. Set by the initialiser only.
    @exclusivity(unchecked) var isSerialOnly = false
    let lock = Lock()

    // protected by `lock`
    @exclusivity(unchecked) var _name: String?
    @exclusivity(unchecked) var _maxConcurrentOperationCount = ConcurrentOperationQueue.defaultMaxConcurrentOperationCount {
        didSet { limitMirror.store(_maxConcurrentOperationCount, ordering: .releasing) }
    }
    @exclusivity(unchecked) var _isSuspended = false {
        didSet { suspendedMirror.store(_isSuspended, ordering: .releasing) }
    }
    /// `_maxConcurrentOperationCount` and `_isSuspended`, written with them (under the lock) and
    /// read without it by code that checks them once per unit of work it takes on its own: a
    /// workflow's runners (WorkflowRunOperation), which must not take a lock of the queue per run.
    let limitMirror = Atomic<Int>(ConcurrentOperationQueue.defaultMaxConcurrentOperationCount)
    let suspendedMirror = Atomic<Bool>(false)
    /// Set by an operation that ran a worker's turn of work of its own (a workflow's runner whose
    /// turn of runs is over, see `WorkerTurn`): the worker that ran it makes way after it, as
    /// after a turn of operations (see `runWorker(handedOff:)`). Another worker of the queue
    /// may see it first and make way instead, which does no harm.
    let workerMakeWay = Atomic<Bool>(false)
    /// How long a worker, or a workflow's runner, keeps its thread before it makes way for the
    /// other work of its dispatch queue (see `WorkerTurn`). Tests set it before adding work (0: a
    /// turn is `WorkerTurn.count` operations, `.seconds(3600)`: never over in a test).
    @exclusivity(unchecked) var workerTurnTime = WorkerTurn.defaultTime
    /// Concurrency slots in use: workers looking for work (idle ones included) plus operations
    /// executing.
    @exclusivity(unchecked) var activeSlots = 0
    /// Dispatch workers that found no ready operation and wait a moment for one, still holding
    /// their slots (see `linger(since:)`). New ready work goes to them before new workers start.
    /// Protected by `lock`.
    @exclusivity(unchecked) var idleWorkers = 0
    /// Bumped, under `lock`, when operations become ready while workers are idle; the idle
    /// workers watch it without the lock.
    let idleWake = Atomic<UInt>(0)
    @exclusivity(unchecked) var ready = ReadyList()
    /// All operations in the queue that have not finished, linked through `queueNext`. The list
    /// holds one retain on each (taken in `insert`, given back in `operationDidFinish`), and the
    /// queue retains itself while the list is not empty, so that operations can refer to it
    /// without retaining it.
    @exclusivity(unchecked) var first: Unmanaged<ConcurrentOperation>?
    @exclusivity(unchecked) var last: Unmanaged<ConcurrentOperation>?
    @exclusivity(unchecked) var count = 0
    /// Finished operations that a worker (or an async runner holding a slot, see
    /// `runnerDidFinish`) unlinked but whose retain the queue still holds
    /// ("parked"), linked through `queueNext`; fewer than `finishedLimit`. The next add releases
    /// them on the adding thread, which usually allocated them: their memory goes back to that
    /// thread's cache, instead of a worker freeing it while the adder allocates (the allocator's
    /// lock is then contended on every operation). The finish that empties the queue releases
    /// them before its waiters are resumed, and a worker (or runner) that runs out of work as it
    /// leaves.
    @exclusivity(unchecked) var finished: Unmanaged<ConcurrentOperation>?
    @exclusivity(unchecked) var finishedCount = 0
    @exclusivity(unchecked) var waiters: [Waiter] = []
    /// The barrier that operations added now must wait for.
    @exclusivity(unchecked) var barrier: ConcurrentOperation? {
        didSet { hasBarrier.store(barrier != nil, ordering: .relaxed) }
    }
    /// Whether `barrier` is set, readable without the lock: an add that finds it unset takes no
    /// lock to read it. (An add racing with ``addBarrierBlock(_:)`` may miss the new barrier;
    /// it was never ordered with it: it is linked after the barrier read the earlier operations.)
    let hasBarrier = Atomic<Bool>(false)
    // protected by lock
    weak var _delegate: (any ConcurrentOperationQueueDelegate)?
    // protected by lock
    @exclusivity(unchecked) var _eventHandlers: QueueEventHandlers?
    /// The continuations of ``events`` streams; made by the first stream. It finishes them when
    /// it is released with the queue. Protected by lock.
    @exclusivity(unchecked) var _eventStreams: QueueEventStreams?
    /// The aggregate of its operations' progress; made the first time it is asked for
    /// (ConcurrentOperationQueue+Progress.swift). Protected by lock.
    @exclusivity(unchecked) var _progressTracker: QueueProgressTracker?
    /// Whether a delegate or event handlers are set: read without the lock on every add and finish.
    let hasListeners = Atomic<Bool>(false)
    /// The ``instrument`` (Observability/OperationInstrument+Telling.swift).
    let instrumentSlot = InstrumentSlot(OperationInstrumentation.default)
    /// The procedure whose children this queue runs, if it is a ``GroupOperation``'s queue (or a
    /// ``RetryOperation``'s attempt queue): the link from a child to its ancestors (see
    /// `ExclusivityController`). Set once, by the owner's initialiser, before the queue holds any
    /// operation; weak, since the owner owns the queue.
    ///
    /// Such a queue does not start with the default instrument, as a queue made by a user does:
    /// it takes its instrument from where its owner runs — the instrument of the queue the owner
    /// is added to (none if that queue has none), or the default one when the owner is started by
    /// hand — and tells that instrument the operations it holds as added then
    /// (`adoptInstrument(_:tellHeld:)`). So the default is never told operations of a queue that
    /// ends up telling another instrument.
    weak var owningProcedure: ProcedureOperation? {
        didSet { if owningProcedure != nil { instrumentSlot.instrument = nil } }
    }
    /// The stall watchdog, while one is on (see `ConcurrentOperationQueue+Snapshot`). Protected by lock.
    @exclusivity(unchecked) var _stallWatchdog: StallWatchdog?
    /// The ``clock``. Protected by lock.
    @exclusivity(unchecked) var _clock: any OperationClock

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - qualityOfService: The quality of service of its workers.
    ///   - underlyingQueue: A dispatch queue to run the workers on; by default the global queue of
    ///     `qualityOfService`.
    ///   - clock: The ``clock`` of its operations' timers; real time by default.
    public init(
        name: String? = nil,
        qualityOfService: DispatchQoS.QoSClass = .default,
        underlyingQueue: DispatchQueue? = nil,
        clock: any OperationClock = SystemOperationClock()
    ) {
        _name = name
        _clock = clock
        self.qualityOfService = qualityOfService
        self.underlyingQueue = underlyingQueue
        target = underlyingQueue ?? DispatchQueue.global(qos: qualityOfService)
        if !(clock is SystemOperationClock) { settingsToPassOn.store(true, ordering: .relaxed) }
    }

    /// Creates a queue that runs at most `maxConcurrentOperationCount` operations at once.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/invalidMaxConcurrentOperationCount`` if the
    ///   count is below 1.
    public convenience init(
        name: String? = nil,
        maxConcurrentOperationCount: Int,
        qualityOfService: DispatchQoS.QoSClass = .default,
        underlyingQueue: DispatchQueue? = nil,
        clock: any OperationClock = SystemOperationClock()
    ) throws(OperationError) {
        self.init(name: name, qualityOfService: qualityOfService, underlyingQueue: underlyingQueue, clock: clock)
        try setMaxConcurrentOperationCount(maxConcurrentOperationCount)
    }

    /// The queue whose worker is running the calling code, or `nil` outside any queue's
    /// operation. Inside an operation's ``ConcurrentOperation/execute()`` it is that operation's queue.
    public static var current: ConcurrentOperationQueue? { CurrentQueue.value }

    // MARK: Configuration

    /// The clock that the timers of its operations use when they were given none: a
    /// ``TimeoutObserver``'s, a delay's, the waits of retries and repeats. Real time
    /// (``SystemOperationClock``) unless the queue was made with another, such as a test's virtual
    /// clock.
    public var clock: any OperationClock { lock.withLock { _clock } }

    /// A name for logs and errors.
    public var name: String? {
        get { lock.withLock { _name } }
        set { lock.withLock { _name = newValue } }
    }

    /// The name, or the type and address when it has none.
    public var displayName: String {
        name ?? "ConcurrentOperationQueue@\(ObjectIdentifier(self).hashValue)"
    }

    /// The maximum number of operations that execute at once; 1 makes the queue serial.
    /// Change it with ``setMaxConcurrentOperationCount(_:)``.
    public var maxConcurrentOperationCount: Int { lock.withLock { _maxConcurrentOperationCount } }

    /// Sets ``maxConcurrentOperationCount``. Raising it starts waiting operations at once;
    /// lowering it lets executing operations finish.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/invalidMaxConcurrentOperationCount`` if
    ///   `count` is below 1, or is not 1 for ``main``; the limit is then unchanged.
    public func setMaxConcurrentOperationCount(_ count: Int) throws(OperationError) {
        guard count >= 1 else {
            throw OperationError(
                .invalidMaxConcurrentOperationCount, operations: [displayName],
                "maxConcurrentOperationCount must be at least 1, not \(count)")
        }
        if isSerialOnly && count != 1 { throw serialOnlyRefusal(count) }
        let spawn = lock.withLock {
            _maxConcurrentOperationCount = count
            return reserveWorkers()
        }
        startWorkers(spawn)
    }

    /// Whether the queue holds back operations that have not started. Executing operations are not
    /// affected. Resuming starts the waiting ones.
    public var isSuspended: Bool {
        get { lock.withLock { _isSuspended } }
        set {
            let spawn = lock.withLock {
                _isSuspended = newValue
                return reserveWorkers()
            }
            startWorkers(spawn)
        }
    }

    /// The number of operations the queue holds: added and not yet released. The queue releases
    /// an operation shortly after it finished and its completion block ran, so the count still
    /// includes an operation inside its own completion block (and possibly just after its
    /// own wait returned); ``waitUntilAllOperationsAreFinished()`` returns only once
    /// the queue has released them all.
    public var operationCount: Int { lock.withLock { count } }

    /// The operations the queue holds (see ``operationCount``), in the order they were added.
    public var operations: [ConcurrentOperation] {
        lock.withLock {
            operationsLocked()
        }
    }

    // MARK: Adding

    /// Adds an operation. It starts once its dependencies have finished, in priority order.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/alreadyEnqueued``,
    ///   ``OperationError/Code-swift.struct/enqueuedInAnotherQueue``,
    ///   ``OperationError/Code-swift.struct/alreadyStarted``,
    ///   ``OperationError/Code-swift.struct/alreadyFinished`` or
    ///   ``OperationError/Code-swift.struct/dependencyCycle``. The operation was then not added —
    ///   nor were the dependencies its conditions would have produced — and the queue carries on.
    public func addOperation(_ operation: ConcurrentOperation) throws(OperationError) {
        try add(operation, barrier: hasBarrier.load(ordering: .relaxed) ? lock.withLock { barrier } : nil)
    }

    /// Adds one operation that waits for `pendingBarrier` too, if one is given.
    private func add(_ operation: ConcurrentOperation, barrier pendingBarrier: ConcurrentOperation?) throws(OperationError) {
        notifyDelegate(willAdd: operation)
        let (priority, addsAlong) = try prepare(operation, barrier: pendingBarrier)
        // Before `insert`: the operation cannot start before did add is told.
        notifyDelegate(didAdd: operation)
        if let instrument = instrumentSlot.current { tellAdded(CollectionOfOne(operation), to: instrument) }
        if settingsToPassOn.load(ordering: .relaxed) { operation.adoptQueueSettings(of: self) }
        insert(one: operation, priority: priority)
        if addsAlong { addOperationsAlong(with: operation) }
    }

    /// Adds operations in one step and, if asked, blocks until they have all finished.
    ///
    /// All or nothing: the whole batch is checked — an operation twice in it, one in another
    /// queue, one that has started or finished, a dependency cycle within the batch or with what
    /// is already queued — before any of it can run. If one operation is refused, none is added
    /// (nor are the dependencies their conditions would produce made), the error names the
    /// refused one, and nothing is waited for. A cancelled operation never waits for its
    /// dependencies, so its edges cannot close a cycle: cancelling a member is a way to break one.
    ///
    /// - Throws: the ``OperationError`` that adding the first refused operation alone would throw;
    ///   the queue then holds nothing more than before.
    public func addOperations(_ operations: [ConcurrentOperation], waitUntilFinished: Bool) throws(OperationError) {
        if hasListeners.load(ordering: .acquiring) {
            for operation in operations { notifyDelegate(willAdd: operation) }
        }
        // Everything is prepared (claimed, dependencies registered) before anything is linked, so
        // workers do not start finishing operations — and taking the graph lock to release their
        // dependents — while this batch still registers edges under it; and nothing is linked
        // until every operation was accepted. (Linking in chunks, so that work starts earlier,
        // measured no faster for independent operations and 1.5 times slower for the layered
        // graph of the benchmark's S4.)
        // The priorities of the accepted operations, in order: `operations[i]` has `priorities[i]`.
        // (A separate array of a trivial type: an array of (operation, priority) tuples cost a
        // retain and a release per operation and an unspecialised tuple destroy.)
        var priorities: [ConcurrentOperation.QueuePriority] = []
        priorities.reserveCapacity(operations.count)
        let pendingBarrier = hasBarrier.load(ordering: .relaxed) ? lock.withLock { barrier } : nil
        let stamp = CoarseClock.stamp()  // one clock read for the batch
        // (The loops over `operations` lend each element rather than retain it.)
        var anyAddsAlong = false
        let failure = operations.firstResult(from: 0) { operation -> OperationError? in
            do throws(OperationError) {
                let (priority, addsAlong) = try prepare(operation, barrier: pendingBarrier, stamp: stamp)
                priorities.append(priority)
                anyAddsAlong = anyAddsAlong || addsAlong
                return nil
            } catch {
                return error
            }
        }
        if let failure {
            // Last prepared first: an edge between two of them is undone from its dependent.
            for index in priorities.indices.reversed() { unprepare(operations[index], barrier: pendingBarrier) }
            throw failure
        }
        if operations.isEmpty { return }
        if hasListeners.load(ordering: .acquiring) {
            for operation in operations { notifyDelegate(didAdd: operation) }
        }
        if let instrument = instrumentSlot.current { tellAdded(operations, to: instrument) }
        if settingsToPassOn.load(ordering: .relaxed) {
            for operation in operations { operation.adoptQueueSettings(of: self) }
        }
        insert(zip(operations, priorities))
        // Not a pass over every operation when none adds any (of a large batch, the earliest
        // are out of the cache by now).
        if anyAddsAlong { operations.forEachLent { addOperationsAlong(with: $0) } }
        if waitUntilFinished {
            for operation in operations { operation.waitUntilFinishedBlocking() }
        }
    }

    /// Once `operation` is accepted and linked: adds what must come with it — a procedure's
    /// condition dependencies — one by one: one the queue refuses (in a queue already, or
    /// finished) is waited for where it is, and does not keep the others out. They come after
    /// the procedure in the queue's order, so that on a narrow queue the procedure's conditions
    /// are evaluated before a produced operation can take the last slot: a failing condition
    /// then cancels a produced operation that would never end (fuzz seed 92). Until they are
    /// made, their conditions' gates are closed (see `ProcedureOperation+Conditions.swift`).
    private func addOperationsAlong(with operation: ConcurrentOperation) {
        let along = operation.operationsToEnqueueAlong(in: self)
        for other in along { try? addPrerequisite(other) }
    }

    /// Adds an operation that an operation already in this queue waits for (a procedure's
    /// condition dependency). Unlike ``addOperation(_:)-(ConcurrentOperation)``, it does not wait
    /// for the queue's current barrier: that barrier may have been added after the procedure, so
    /// it waits for the procedure, which waits for this operation (fuzz seed 4643). What the
    /// procedure itself waits for, barrier included, has finished or is among this operation's
    /// dependencies already.
    func addPrerequisite(_ operation: ConcurrentOperation) throws(OperationError) {
        try add(operation, barrier: nil)
    }

    /// Wraps `block` in a ``ClosureOperation`` and adds it.
    ///
    /// - Returns: The operation, to cancel it or make other operations depend on it.
    @discardableResult
    public func addOperation(_ block: @escaping @Sendable () -> Void) -> ClosureOperation {
        let operation = ClosureOperation(block)
        // A new operation cannot be refused: it is in no queue, has not started, and has no
        // dependencies except the current barrier.
        try? addOperation(operation)
        return operation
    }

    /// Adds a block that runs after every operation added before it has finished; operations added
    /// after it wait until it has finished.
    ///
    /// - Returns: The barrier operation.
    @discardableResult
    public func addBarrierBlock(_ block: @escaping @Sendable () -> Void) -> ClosureOperation {
        let barrierOperation = ClosureOperation(name: "barrier", block)
        let earlier = lock.withLock {
            barrier = barrierOperation
            return operationsLocked()
        }
        barrierOperation.lock.withLock { barrierOperation._dependencies = OperationList(earlier) }
        try? addOperation(barrierOperation)
        return barrierOperation
    }

    /// Under `lock`: the unfinished operations.
    func operationsLocked() -> [ConcurrentOperation] {
        var result: [ConcurrentOperation] = []
        result.reserveCapacity(count)
        var node = first
        while let entry = node {
            let operation = entry.takeUnretainedValue()
            result.append(operation)
            node = operation.queueNext
        }
        return result
    }
}

// All mutable state is protected by `lock`; `target`, `underlyingQueue` and `qualityOfService`
// are immutable; `executor` and `isSerialOnly` are written before any worker can read them (see
// their comments).
extension ConcurrentOperationQueue: @unchecked Sendable {}

extension ConcurrentOperationQueue: CustomStringConvertible {
    /// The queue's ``displayName``.
    public var description: String { displayName }
}
