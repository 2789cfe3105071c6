import Dispatch

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

    private let target: DispatchQueue
    private let lock = Lock()

    // protected by `lock`
    private var _name: String?
    private var _maxConcurrentOperationCount = ConcurrentOperationQueue.defaultMaxConcurrentOperationCount
    private var _isSuspended = false
    /// Concurrency slots in use: workers looking for work plus operations executing.
    private var activeSlots = 0
    private var ready = ReadyList()
    /// All operations in the queue that have not finished, linked through `queueNext`. The list
    /// holds one retain on each (taken in `insert`, given back in `operationDidFinish`), and the
    /// queue retains itself while the list is not empty, so that operations can refer to it
    /// without retaining it.
    private var first: Unmanaged<ConcurrentOperation>?
    private var last: Unmanaged<ConcurrentOperation>?
    private var count = 0
    private var waiters: [Waiter] = []
    /// The barrier that operations added now must wait for.
    private var barrier: ConcurrentOperation?

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - qualityOfService: The quality of service of its workers.
    ///   - underlyingQueue: A dispatch queue to run the workers on; by default the global queue of
    ///     `qualityOfService`.
    public init(
        name: String? = nil,
        qualityOfService: DispatchQoS.QoSClass = .default,
        underlyingQueue: DispatchQueue? = nil
    ) {
        _name = name
        self.qualityOfService = qualityOfService
        self.underlyingQueue = underlyingQueue
        target = underlyingQueue ?? DispatchQueue.global(qos: qualityOfService)
    }

    /// Creates a queue that runs at most `maxConcurrentOperationCount` operations at once.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/invalidMaxConcurrentOperationCount`` if the
    ///   count is below 1.
    public convenience init(
        name: String? = nil,
        maxConcurrentOperationCount: Int,
        qualityOfService: DispatchQoS.QoSClass = .default,
        underlyingQueue: DispatchQueue? = nil
    ) throws(OperationError) {
        self.init(name: name, qualityOfService: qualityOfService, underlyingQueue: underlyingQueue)
        try setMaxConcurrentOperationCount(maxConcurrentOperationCount)
    }

    /// The queue whose worker is running the calling code, or `nil` outside any queue's
    /// operation. Inside an operation's ``ConcurrentOperation/execute()`` it is that operation's queue.
    public static var current: ConcurrentOperationQueue? { CurrentQueue.value }

    // MARK: Configuration

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
    ///   `count` is below 1; the limit is then unchanged.
    public func setMaxConcurrentOperationCount(_ count: Int) throws(OperationError) {
        guard count >= 1 else {
            throw OperationError(
                .invalidMaxConcurrentOperationCount, operations: [displayName],
                "maxConcurrentOperationCount must be at least 1, not \(count)")
        }
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
    /// `waitUntilFinished()` returned); ``waitUntilAllOperationsAreFinished()`` returns only once
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
    ///   ``OperationError/Code-swift.struct/dependencyCycle``. The operation was then not added,
    ///   and the queue carries on.
    public func addOperation(_ operation: ConcurrentOperation) throws(OperationError) {
        let priority = try prepare(operation, barrier: lock.withLock { barrier })
        insert(CollectionOfOne((operation, priority)))
    }

    /// Adds operations in one step and, if asked, blocks until they have all finished.
    ///
    /// Every operation that can be added is added. If some cannot, the error of the first of
    /// them is thrown after the others were added (and, with `waitUntilFinished`, have finished).
    ///
    /// - Throws: the first ``OperationError`` that adding each operation alone would throw.
    public func addOperations(_ operations: [ConcurrentOperation], waitUntilFinished: Bool) throws(OperationError) {
        // Everything is prepared (claimed, dependencies registered) before anything is linked, so
        // workers do not start finishing operations — and taking the graph lock to release their
        // dependents — while this batch still registers edges under it. (Linking in chunks, so
        // that work starts earlier, measured no faster for independent operations and 1.5 times
        // slower for the layered graph of the benchmark's S4.)
        var accepted: [(ConcurrentOperation, ConcurrentOperation.QueuePriority)] = []
        accepted.reserveCapacity(operations.count)
        var firstError: OperationError?
        let pendingBarrier = lock.withLock { barrier }
        for operation in operations {
            do {
                accepted.append((operation, try prepare(operation, barrier: pendingBarrier)))
            } catch {
                if firstError == nil { firstError = error }
            }
        }
        insert(accepted)
        if waitUntilFinished {
            // Operations that were refused were never added, and never finish here.
            for operation in operations where operation.isEnqueued(in: self) || operation.isFinished {
                operation.waitUntilFinished()
            }
        }
        if let firstError { throw firstError }
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
        barrierOperation.machine.lock.withLock { barrierOperation._dependencies = OperationList(earlier) }
        try? addOperation(barrierOperation)
        return barrierOperation
    }

    // MARK: Cancelling and waiting

    /// Cancels every operation in the queue. Those that have not started finish without executing
    /// as soon as the queue reaches them (at once unless the queue is suspended).
    public func cancelAllOperations() {
        for operation in operations { operation.cancel() }
    }

    /// Blocks the calling thread until the queue has no operations. Called from one of this
    /// queue's own operations it returns at once, since it could never return otherwise.
    public func waitUntilAllOperationsAreFinished() {
        _ = wait(timeout: nil)
    }

    /// Blocks the calling thread until the queue has no operations or `timeout` has passed.
    ///
    /// - Returns: `true` if the queue emptied, `false` on timeout (or when called from one of this
    ///   queue's own operations).
    public func waitUntilAllOperationsAreFinished(timeout: Duration) -> Bool {
        wait(timeout: timeout)
    }

    /// Suspends the calling task until the queue has no operations.
    public func waitUntilAllOperationsAreFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let empty = lock.withLock {
                if count == 0 { return true }
                waiters.append(.continuation(continuation))
                return false
            }
            if empty { continuation.resume() }
        }
    }

    private func wait(timeout: Duration?) -> Bool {
        if CurrentQueue.value === self { return timeout == nil }
        let semaphore = DispatchSemaphore(value: 0)
        let empty = lock.withLock {
            if count == 0 { return true }
            waiters.append(.semaphore(semaphore))
            return false
        }
        if empty { return true }
        guard let timeout else {
            semaphore.wait()
            return true
        }
        if semaphore.wait(timeout: .now() + timeout.dispatchInterval) == .success { return true }
        return lock.withLock {
            if let index = waiters.firstIndex(where: { $0.isSemaphore(semaphore) }) {
                waiters.remove(at: index)
                return false
            }
            return true
        }
    }

    // MARK: Scheduling internals

    /// Claims `operation` for this queue and registers its dependencies. Leaves it flagged
    /// `enqueuing`, so that nothing pushes it to the ready list before `insert` does.
    private func prepare(
        _ operation: ConcurrentOperation, barrier pendingBarrier: ConcurrentOperation?
    ) throws(OperationError) -> ConcurrentOperation.QueuePriority {
        typealias Claim = (refusal: OperationError.Code?, priority: ConcurrentOperation.QueuePriority, hasDependencies: Bool)
        let claim = operation.machine.lock.withLock { () -> Claim in
            if let queue = operation.queueReference {
                let same = queue.toOpaque() == Unmanaged.passUnretained(self).toOpaque()
                return (same ? .alreadyEnqueued : .enqueuedInAnotherQueue, .normal, false)
            }
            let lifecycle = operation.machine.lifecycle
            if lifecycle.isFinished { return (.alreadyFinished, .normal, false) }
            if !lifecycle.isReady { return (.alreadyStarted, .normal, false) }
            operation.queueReference = Unmanaged.passUnretained(self)
            if let pendingBarrier, pendingBarrier !== operation {
                operation._dependencies.append(pendingBarrier)
            }
            operation.readiness.store(
                Readiness.enqueuing | (lifecycle.isCancelled ? Readiness.cancelled : 0), ordering: .releasing)
            operation.queuedQualityOfService = operation.qualityOfServiceLocked
            return (nil, operation.queuePriorityLocked, !operation._dependencies.isEmpty)
        }
        if let refusal = claim.refusal {
            throw OperationError(refusal, operations: [operation.displayName], "cannot add to \(displayName)")
        }
        let priority = claim.priority
        if !claim.hasDependencies { return priority }
        do {
            try DependencyGraph.registerDependencies(of: operation)
        } catch {
            operation.machine.lock.withLock {
                operation.queueReference = nil
                operation.processedDependencyCount = 0
                if let pendingBarrier, let index = operation._dependencies.lastIndex(where: { $0 === pendingBarrier }) {
                    operation._dependencies.remove(at: index)
                }
            }
            operation.readiness.store(0, ordering: .releasing)
            throw error
        }
        return priority
    }

    /// Links prepared operations into the queue and releases their `enqueuing` flag.
    private func insert<Operations: Collection<(ConcurrentOperation, ConcurrentOperation.QueuePriority)>>(
        _ operations: Operations
    ) {
        if operations.isEmpty { return }
        let spawn = lock.withLock {
            if count == 0 { _ = Unmanaged.passUnretained(self).retain() }
            for (operation, priority) in operations {
                operation.queuedPriority = priority
                let entry = Unmanaged.passRetained(operation)
                operation.queueNext = nil
                operation.queuePrevious = last
                if let last { last._withUnsafeGuaranteedRef { $0.queueNext = entry } } else { first = entry }
                last = entry
                count += 1
                let value = operation.readiness.bitwiseAnd(~Readiness.enqueuing, ordering: .acquiringAndReleasing)
                if Readiness.isRunnable(value.newValue) { ready.push(operation) }
            }
            return reserveWorkers()
        }
        startWorkers(spawn)
    }

    /// Operations that became runnable (their last dependency finished, or they were cancelled).
    func makeReady(_ operations: [ConcurrentOperation]) {
        let spawn = lock.withLock {
            for operation in operations { ready.push(operation) }
            return reserveWorkers()
        }
        startWorkers(spawn)
    }

    /// Counts a new dependency of `operation` unless a worker has already taken it.
    func holdBackIfNotDispatched(_ operation: ConcurrentOperation) -> Bool {
        lock.withLock {
            if operation.isDispatched { return false }
            operation.readiness.add(1, ordering: .acquiringAndReleasing)
            return true
        }
    }

    /// `operation` finished on some thread: unlink it, return its slot if it held one, queue the
    /// dependents it released, and wake waiters if the queue is now empty.
    func operationDidFinish(_ operation: ConcurrentOperation, releasesSlot: Bool, newlyReady: OperationList) {
        // A worker that still holds its slot for this operation will take one entry itself.
        let effects = lock.withLock {
            removeLocked(operation, releasesSlot: releasesSlot, newlyReady: newlyReady, returningWorkers: releasesSlot ? 0 : 1)
        }
        apply(effects, finished: operation)
    }

    /// What is left to do, without the lock, after an operation left the queue.
    private struct RemovalEffects {
        var spawn: Int
        var waiters: [Waiter]
        var emptied: Bool
    }

    /// Under `lock`: unlinks a finished operation and queues the dependents it released.
    private func removeLocked(
        _ operation: ConcurrentOperation, releasesSlot: Bool, newlyReady: OperationList, returningWorkers: Int
    ) -> RemovalEffects {
        let next = operation.queueNext
        let previous = operation.queuePrevious
        if let next { next._withUnsafeGuaranteedRef { $0.queuePrevious = previous } } else { last = previous }
        if let previous { previous._withUnsafeGuaranteedRef { $0.queueNext = next } } else { first = next }
        operation.queueNext = nil
        operation.queuePrevious = nil
        count -= 1
        if releasesSlot { activeSlots -= 1 }
        if barrier === operation { barrier = nil }
        for dependent in newlyReady { ready.push(dependent) }
        let spawn = reserveWorkers(returningWorkers: returningWorkers)
        guard count == 0 else { return RemovalEffects(spawn: spawn, waiters: [], emptied: false) }
        defer { waiters = [] }
        return RemovalEffects(spawn: spawn, waiters: waiters, emptied: true)
    }

    private func apply(_ effects: RemovalEffects, finished operation: ConcurrentOperation) {
        // The list's retain on the operation (the caller still holds it), …
        Unmanaged.passUnretained(operation).release()
        startWorkers(effects.spawn)
        for waiter in effects.waiters { waiter.resume() }
        // … and, last of all, the queue's retain on itself.
        if effects.emptied { Unmanaged.passUnretained(self).release() }
    }

    /// Under `lock`: claims slots for new workers, one per ready entry not already covered by a
    /// worker that is about to look for work, up to the limit.
    private func reserveWorkers(returningWorkers: Int = 0) -> Int {
        if _isSuspended || ready.isEmpty { return 0 }
        let spawn = min(ready.count - returningWorkers, _maxConcurrentOperationCount - activeSlots)
        guard spawn > 0 else { return 0 }
        activeSlots += spawn
        return spawn
    }

    private func startWorkers(_ count: Int) {
        for _ in 0..<count {
            target.async { self.runWorker() }
        }
    }

    /// A worker: holds one slot and runs ready operations one after another, until none is left
    /// or an operation keeps the slot because it finishes after `execute()` returned.
    private func runWorker() {
        CurrentQueue.with(self) {
            var next = lock.withLock { nextOrReleaseSlot() }
            while let operation = next {
                switch operation.runOnWorker(of: self) {
                case .keepSlot:
                    next = lock.withLock { nextOrReleaseSlot() }
                case .finishedOnWorker(let newlyReady):
                    let effects: RemovalEffects
                    (effects, next) = lock.withLock {
                        let effects = removeLocked(operation, releasesSlot: false, newlyReady: newlyReady, returningWorkers: 1)
                        return (effects, nextOrReleaseSlot())
                    }
                    apply(effects, finished: operation)
                case .slotHandedOver:
                    next = nil
                }
            }
        }
    }

    /// Under `lock`: the next operation to run, or `nil` after giving the worker's slot back.
    private func nextOrReleaseSlot() -> ConcurrentOperation? {
        if !_isSuspended && activeSlots <= _maxConcurrentOperationCount, let operation = ready.pop() {
            return operation
        }
        activeSlots -= 1
        return nil
    }

    /// Under `lock`: the unfinished operations.
    private func operationsLocked() -> [ConcurrentOperation] {
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
// are immutable.
extension ConcurrentOperationQueue: @unchecked Sendable {}

extension ConcurrentOperationQueue: CustomStringConvertible {
    /// The queue's ``displayName``.
    public var description: String { displayName }
}
