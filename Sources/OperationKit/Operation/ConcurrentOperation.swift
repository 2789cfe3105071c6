import Dispatch
import Synchronization

/// The base class for work that runs on a ``ConcurrentOperationQueue``, with Foundation's
/// `Operation` surface and NSOperation's semantics — minus the crashes and hangs.
///
/// Subclass it, override ``execute()`` and call ``finish()`` when the work is done, from any
/// thread, now or later:
///
/// ```swift
/// final class Fetch: ConcurrentOperation, @unchecked Sendable {
///     override func execute() {
///         client.get(url) { _ in self.finish() }
///     }
/// }
/// ```
///
/// The lifecycle is an ``OperationStateMachine`` the operation owns: ready → executing →
/// finished, and a separate cancelled flag.
///
/// - A dependent of a cancelled operation still runs (as in Foundation).
/// - Cancelled before it starts: it never executes. In a queue it finishes as soon as the queue
///   reaches it, without waiting for its dependencies; its completion block runs once.
/// - Cancelled while executing: only ``isCancelled`` changes. The operation finishes itself.
/// - The completion block runs exactly once, after ``isFinished`` became true, on the thread that
///   finished the operation, never while a lock is held, and before dependents are released.
/// - Without a queue, ``start()`` on a ready operation runs it on the calling thread.
/// - Once finished, an operation releases its dependencies, its completion block and its queue,
///   so long chains free as they run (``dependencies`` is then empty; Foundation keeps it).
open class ConcurrentOperation {
    /// The relative order in which a queue starts ready operations. FIFO within one priority.
    public enum QueuePriority: Int, Sendable, CaseIterable, Comparable {
        case veryLow = -8
        case low = -4
        case normal = 0
        case high = 4
        case veryHigh = 8

        /// Orders priorities from `.veryLow` to `.veryHigh`.
        public static func < (lhs: QueuePriority, rhs: QueuePriority) -> Bool { lhs.rawValue < rhs.rawValue }

        /// 0 for `.veryHigh` … 4 for `.veryLow`: the index of the ready list it waits in.
        var readyIndex: Int {
            switch self {
            case .veryHigh: 0
            case .high: 1
            case .normal: 2
            case .low: 3
            case .veryLow: 4
            }
        }
    }

    /// The dispatch queue of every operation's state machine (used only for its blocks, which
    /// ConcurrentOperation does not set).
    static let defaultDispatchQueue = DispatchQueue.global()

    /// The lifecycle. Its lock also protects the fields below marked `machine.lock`.
    let machine: OperationStateMachine

    // protected by machine.lock
    private var _name: String?
    private var _completionBlock: (@Sendable () -> Void)?
    /// Direct dependencies as the user gave them. The first `processedDependencyCount` have been
    /// registered with the dependency graph (they were unfinished then) or were already finished.
    var _dependencies = OperationList()
    var processedDependencyCount = 0
    /// The queue this operation was added to; cleared when it finishes. Unretained: a queue keeps
    /// itself alive while it holds operations (and its caller keeps it alive while adding one).
    var queueReference: Unmanaged<ConcurrentOperationQueue>?
    /// Whether the operation is in `queue` now (it was added and has not finished).
    final func isEnqueued(in queue: ConcurrentOperationQueue) -> Bool {
        machine.lock.withLock { queueReference?.toOpaque() == Unmanaged.passUnretained(queue).toOpaque() }
    }

    /// The queue this operation was added to, retained for the caller.
    var queue: ConcurrentOperationQueue? { queueReference?.takeUnretainedValue() }
    /// Threads and tasks waiting for this operation to finish.
    var waiters: [Waiter] = []

    // protected by the lock of `queue`. Unretained links: the queue holds one explicit retain
    // on each of its operations from `insert` until `operationDidFinish`.
    var queueNext: Unmanaged<ConcurrentOperation>?
    var queuePrevious: Unmanaged<ConcurrentOperation>?
    var readyNext: Unmanaged<ConcurrentOperation>?

    /// Dependents released by a finish on the worker's own thread; only that thread touches it.
    var deferredReady: OperationList?

    // protected by DependencyGraph.lock
    var graphOrder = DependencyGraph.unassigned
    /// Enqueued operations waiting for this one to finish; released when it finishes. Not
    /// retained: a listed operation is retained by its caller while it is being added, then by
    /// its queue until it finishes — and it finishes only after every listed entry of it was
    /// released (it ran: each dependency released it first) or removed (it was cancelled: it
    /// leaves the lists of its dependencies before its queue lets it go). The release that makes
    /// it runnable is the exception: once its count reaches 0 a worker may run it at once
    /// (through a stale ready-list entry) and its queue let it go, so `announceFinish` retains an
    /// entry before a decrement that may do that. Saves a retain and a release, on objects other
    /// threads are touching, per dependency edge.
    var dependents = UnretainedOperationList()

    /// Unfinished registered dependencies plus the `Readiness` flags; see `Readiness`.
    let readiness = Atomic<Int>(0)

    // protected by the lock of `queue`
    var isInReadyList = false
    var isDispatched = false
    /// `queuePriority` as it was when the operation was added to its queue.
    var queuedPriority: QueuePriority = .normal
    /// `qualityOfService` as it was when the operation was added to its queue. Written under
    /// `machine.lock` before the queue publishes the operation; read by the worker that runs it.
    var queuedQualityOfService: DispatchQoS.QoSClass = .unspecified

    /// Hands the worker's concurrency slot over between the worker and `finish()`.
    let slotHandoff = Atomic<UInt8>(SlotHandoff.workerHolds)
    /// `LifeFlags`: whether the operation has finished, whether it ever had dependents, and
    /// whether it may have lifecycle event streams.
    let lifeFlags = Atomic<UInt8>(0)

    // protected by machine.lock (kept with the other one-byte fields to save padding)
    private var _queuePriority: QueuePriority = .normal
    private var _qualityOfService: DispatchQoS.QoSClass = .unspecified

    /// Creates an operation. Subclasses override ``execute()``.
    ///
    /// - Parameter name: A name for logs and errors.
    public init(name: String? = nil) {
        machine = OperationStateMachine()
        _name = name
    }

    deinit {
        // An operation that never finished may hold the last reference to a long chain: move the
        // list out of the field, so that the field's own release finds it empty.
        if !_dependencies.isEmpty {
            let dependencies = _dependencies
            _dependencies = OperationList()
            ChainRelease.release(consume dependencies)
        }
        // Released before it finished, with event streams: they end, and leave the side table.
        if lifeFlags.load(ordering: .relaxed) & LifeFlags.hasEventStreams != 0 {
            LifecycleEventStreams.operationWillDeallocate(ObjectIdentifier(self))
        }
    }

    // MARK: Foundation's surface

    /// A name for logs and errors. Readable and writable from any thread.
    public var name: String? {
        get { machine.lock.withLock { _name } }
        set { machine.lock.withLock { _name = newValue } }
    }

    /// The name, or the type and address when it has none: what errors show.
    public var displayName: String {
        if let name { return name }
        return "\(type(of: self))@\(ObjectIdentifier(self).hashValue)"
    }

    /// Whether the operation can start: it has not started, and every dependency has finished (or
    /// it was cancelled, which makes it ready at once). Readable from any thread.
    public var isReady: Bool {
        let (ready, enqueued, pending) = machine.lock.withLock {
            (machine.lifecycle.isReady, queue != nil, _dependencies)
        }
        guard ready else { return false }
        if enqueued { return Readiness.isRunnable(readiness.load(ordering: .acquiring)) }
        if isCancelled { return true }
        return pending.allSatisfy(\.isFinished)
    }

    /// Whether the operation has started and not finished. Readable from any thread.
    public var isExecuting: Bool { machine.isExecuting }
    /// Whether the operation has finished (executed, or cancelled and reached). Readable from any thread.
    public var isFinished: Bool { machine.isFinished }
    /// Whether ``cancel()`` was called before the operation finished. Readable from any thread.
    public var isCancelled: Bool { machine.isCancelled }
    /// Always `true`: every OperationKit operation may finish after ``execute()`` returns.
    public var isAsynchronous: Bool { true }

    /// The order in which a queue starts this operation among ready ones. Set before adding it.
    public var queuePriority: QueuePriority {
        get { machine.lock.withLock { _queuePriority } }
        set { machine.lock.withLock { _queuePriority = newValue } }
    }

    /// `queuePriority`; call with `machine.lock` held.
    var queuePriorityLocked: QueuePriority { _queuePriority }
    /// `qualityOfService`; call with `machine.lock` held.
    var qualityOfServiceLocked: DispatchQoS.QoSClass { _qualityOfService }

    /// The quality of service of the work. `.unspecified` (the default) runs it at its queue's.
    public var qualityOfService: DispatchQoS.QoSClass {
        get { machine.lock.withLock { _qualityOfService } }
        set { machine.lock.withLock { _qualityOfService = newValue } }
    }

    /// Runs exactly once after the operation finished — also when it was cancelled — on the
    /// thread that finished it, with no lock held, before its dependents are released.
    public var completionBlock: (@Sendable () -> Void)? {
        get { machine.lock.withLock { _completionBlock } }
        set { machine.lock.withLock { _completionBlock = newValue } }
    }

    /// The operations this one waits for. Empty once it has finished.
    public var dependencies: [ConcurrentOperation] { machine.lock.withLock { _dependencies.array } }

    // MARK: Running

    /// Starts the operation on the calling thread, as Foundation's `start()` does: ``execute()``
    /// runs before this returns (it may finish later). A cancelled operation finishes without
    /// executing.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/managedByQueue`` if a queue runs it;
    ///   ``OperationError/Code-swift.struct/notReady`` if a dependency has not finished;
    ///   ``OperationError/Code-swift.struct/alreadyStarted`` or
    ///   ``OperationError/Code-swift.struct/alreadyFinished`` if it already ran. Nothing changed.
    public final func start() throws(OperationError) {
        if let refusal = refusalOfManualStart() { throw refusal }
        let (inQueue, dependencies) = machine.lock.withLock { (queue != nil, _dependencies) }
        if inQueue {
            throw OperationError(.managedByQueue, operations: [displayName], "a queue starts this operation")
        }
        if !isCancelled, let waiting = dependencies.first(where: { !$0.isFinished }) {
            throw OperationError(
                .notReady, operations: [displayName, waiting.displayName], "a dependency has not finished")
        }
        // Check the queue again in the same critical section as the transition: a queue that
        // claimed the operation meanwhile must be the only one to start it.
        let action = machine.lock.withLock { () -> OperationLifecycle.StartAction in
            guard queueReference == nil else { return .refuse(.managedByQueue) }
            return startStepLocked()
        }
        switch action {
        case .execute:
            tellLifecycleEventStreams()
            performExecute()
        case .finishWithoutExecuting:
            finishWithoutExecuting()
        case .refuse(let code):
            throw OperationError(code, operations: [displayName], "start() refused")
        }
    }

    /// Checks a subclass makes before ``start()`` by hand; ``ProcedureOperation`` refuses when it
    /// has conditions, which only a queue evaluates.
    func refusalOfManualStart() -> OperationError? { nil }

    /// The work. Override it, and call ``finish()`` when the work is done — before returning or
    /// later, from any thread. The default implementation finishes at once.
    ///
    /// Runs on a worker of the operation's queue — on the queue's ``ConcurrentOperationQueue/underlyingQueue``
    /// if it has one, else on the global dispatch queue of the operation's ``qualityOfService``
    /// (or the queue's) — or on the thread that called ``start()``. Check ``isCancelled`` in long work.
    open func execute() {
        finish()
    }

    /// Finishes the operation. Only the first call counts; later calls, and calls before the
    /// operation started, change nothing and return `false`.
    ///
    /// The completion block, then the release of dependents and waiters, happen on the calling
    /// thread before this returns.
    @discardableResult
    public func finish() -> Bool {
        finishAfterStart()
    }

    /// Runs ``execute()``; ``ProcedureOperation`` wraps it in its will- and did-execute events.
    func performExecute() {
        execute()
    }

    /// Cancels the operation: sets ``isCancelled`` (once). An operation that has not started will
    /// not execute: in a queue it finishes as soon as the queue reaches it, without waiting for
    /// its dependencies. An executing operation is only told; it must finish itself. Cancelling a
    /// finished operation does nothing. Overrides must call `super.cancel()`.
    open func cancel() {
        // One critical section sets the flag and reads the queue. (The machine of a
        // ConcurrentOperation has no cancellation block to run.)
        let (cancelled, queue) = machine.lock.withLock { () -> (Bool, ConcurrentOperationQueue?) in
            cancelLocked() ? (true, self.queue) : (false, nil)
        }
        guard cancelled else { return }
        tellLifecycleEventStreams()
        makeRunnableAfterCancel(in: queue)
    }

    /// Under `machine.lock`: the start step. Returns what to do; on `.execute` the subclass hook
    /// has run. An operation cancelled before it started passes through the step to finish
    /// without executing: that is recorded (`skippedExecution`) for its event streams, which
    /// must not report it as started.
    @inline(__always)
    final func startStepLocked() -> OperationLifecycle.StartAction {
        let action = machine.lifecycle.start()
        switch action {
        case .execute:
            didStartExecutingLocked()
        case .finishWithoutExecuting:
            lifeFlags.bitwiseOr(LifeFlags.skippedExecution, ordering: .relaxed)
        case .refuse:
            break
        }
        return action
    }

    /// Under `machine.lock`: sets the cancelled flag. Returns `true` if this call set it.
    final func cancelLocked() -> Bool {
        if case .runCancellationBlock = machine.lifecycle.cancel() { return true }
        return false
    }

    /// Without any lock, after ``cancelLocked()`` returned `true` for an operation in `queue`:
    /// marks it runnable and hands it to its queue if that made it runnable.
    final func makeRunnableAfterCancel(in queue: ConcurrentOperationQueue?) {
        guard let queue else { return }
        if Readiness.becameRunnableByCancelling(readiness.bitwiseOr(Readiness.cancelled, ordering: .acquiringAndReleasing).oldValue) {
            queue.makeReady([self])
        }
    }

    // MARK: Finishing

    /// Finishes the operation after it started.
    ///
    /// - Parameter asLastStep: The caller returns from `execute()` right after this, so when the
    ///   operation runs on a queue worker, that worker may do the queue's part of the finish
    ///   together with taking its next operation. (A subclass's `execute()` may go on after
    ///   `finish()`, even wait for a dependent, so its finish never defers.)
    @discardableResult
    final func finishAfterStart(asLastStep: Bool = false) -> Bool {
        finishAfterStart(handOff: asLastStep ? .lastStepOnWorker : .tellQueue).finished
    }

    /// Who does the queue's part of a finish (see ``finishAfterStart(asLastStep:)``).
    enum FinishHandOff {
        /// This call tells the queue.
        case tellQueue
        /// The worker running the operation, if this is its thread (`asLastStep`).
        case lastStepOnWorker
        /// The async runner that ran the operation's closure (see `AsyncRunner`): if it holds the
        /// operation's slot, it keeps it and takes the queue's next ready operation in the same
        /// step as the queue learns of the finish.
        case asyncRunner
    }

    /// Finishes the operation after it started. Returns whether this call finished it, and for
    /// `.asyncRunner` the operation that came with the runner's slot, if any.
    @inline(__always)
    final func finishAfterStart(handOff: FinishHandOff) -> (finished: Bool, next: ConcurrentOperation?) {
        guard let tail = finishKeepingTail(handOff: handOff, holdsTail: false) else { return (false, nil) }
        return (true, completeTail(tail))
    }

    /// What is left of a finish once the operation has finished, its completion block has run
    /// and its dependents in other queues were handed over: the queue's part (unlinking it, its
    /// slot, the dependents in the same queue, the queue's waiters) and resuming the operation's
    /// own waiters. A procedure holds it until its did-finish observers have returned (see
    /// `LifeFlags.tailPending`), so that no wait returns before them.
    struct FinishTail {
        fileprivate var queue: Unmanaged<ConcurrentOperationQueue>?
        fileprivate var readyInSameQueue: OperationList
        fileprivate var waiters: [Waiter]
        fileprivate var dependencies: OperationList
        fileprivate var handOff: FinishHandOff
        fileprivate var holdsTail: Bool
    }

    /// The first part of a finish after the start: the state change, the completion block, the
    /// queue's did-finish, the release of dependents (those of other queues handed to their
    /// queues). Returns the rest, for ``completeTail(_:)``, or `nil` if this call did not finish
    /// the operation. With `holdsTail`, waits that begin from now on wait for the tail too.
    @inline(__always)
    final func finishKeepingTail(handOff: FinishHandOff, holdsTail: Bool) -> FinishTail? {
        let outcome = machine.finish {
            willBecomeFinishedLocked()
            let taken = Finished(
                completion: _completionBlock, queue: queueReference, dependencies: _dependencies,
                wasCancelled: machine.lifecycle.isCancelled)
            _completionBlock = nil
            queueReference = nil
            _dependencies = OperationList()
            processedDependencyCount = 0
            return taken
        }
        guard case .success(let finished) = outcome else { return nil }
        finished.completion?()
        // The queue is alive: it counts this operation until `operationDidFinish`.
        finished.queue?._withUnsafeGuaranteedRef { $0.notifyDelegate(didFinish: self) }

        let (released, waiters) = announceFinish(holdsTail: holdsTail)
        var readyInSameQueue = released
        if finished.wasCancelled && finished.queue != nil && !finished.dependencies.isEmpty {
            // All of them, not only the first `registeredDependencyCount`: an `addDependency`
            // racing with this finish may have registered an edge it has not counted yet.
            leaveDependents(of: finished.dependencies)
        }
        // Hand the dependents of other queues to their queues now; keep those of this one.
        readyInSameQueue.removeAll { dependent in
            // Read (and retain) the dependent's queue under its lock: a stale ready-list entry may
            // let a worker run and finish the dependent meanwhile, which clears it; then the
            // queue may be gone, and there is nothing left to do.
            guard let queue = dependent.queueWhilePending else { return true }
            if Unmanaged.passUnretained(queue).toOpaque() == finished.queue?.toOpaque() { return false }
            queue.makeReady([dependent])
            return true
        }
        return FinishTail(
            queue: finished.queue, readyInSameQueue: readyInSameQueue, waiters: waiters,
            dependencies: finished.dependencies, handOff: handOff, holdsTail: holdsTail)
    }

    /// The rest of a finish (see ``FinishTail``): the queue lets go of the operation and its
    /// waiters and the operation's waiters are resumed. Returns, for `.asyncRunner`, the operation
    /// that came with the runner's slot, if any.
    @inline(__always)
    @discardableResult
    final func completeTail(_ tail: consuming FinishTail) -> ConcurrentOperation? {
        let handOff = tail.handOff
        if tail.holdsTail {
            // Waits that began after the finish joined `waiters` meanwhile.
            let flags = lifeFlags.bitwiseAnd(~LifeFlags.tailPending, ordering: .sequentiallyConsistent).oldValue
            if flags & LifeFlags.hasWaiters != 0 {
                tail.waiters = machine.lock.withLock {
                    defer { self.waiters = [] }
                    return self.waiters
                }
            }
        }
        var next: ConcurrentOperation?
        if handOff == .lastStepOnWorker && tail.queue != nil && WorkerOperation.holds(self) {
            // Finished on the thread of the worker that runs it: the worker tells the queue once
            // `execute()` returns, in the critical section where it takes its next operation.
            deferredReady = tail.readyInSameQueue
        } else if let queue = tail.queue {
            // The queue counts this operation only until it unlinks it; from then on another
            // finish may empty the queue, resume its waiters and let it go while this call still
            // starts workers. A worker of the queue holds it for its whole loop; any other thread
            // (a callback finishing the operation, an async runner) holds it for the call. The
            // queue settles the slot with the worker (`slotHandoff`) under its lock.
            let retained: ConcurrentOperationQueue? =
                queue._withUnsafeGuaranteedRef({ CurrentQueue.holds($0) }) ? nil : queue.takeUnretainedValue()
            if handOff == .asyncRunner {
                next = queue._withUnsafeGuaranteedRef { $0.runnerDidFinish(self, newlyReady: tail.readyInSameQueue) }
            } else {
                queue._withUnsafeGuaranteedRef { $0.operationDidFinish(self, newlyReady: tail.readyInSameQueue) }
            }
            withExtendedLifetime(retained) {}
        }
        for waiter in tail.waiters { waiter.resume() }
        withExtendedLifetime(tail.dependencies) {}
        return next
    }

    /// Tells dependents and waiters that the operation has finished, its completion block done:
    /// from here on no dependent registers and no waiter waits (see `LifeFlags`). Releases the
    /// dependents that did register — each one's count drops by one — and returns, retained,
    /// those this made runnable, and the waiters to resume.
    ///
    /// With `holdsTail`, the waiters are left for ``completeTail(_:)``, which takes them (and
    /// those that come meanwhile) once the procedure's did-finish observers have returned.
    private func announceFinish(holdsTail: Bool) -> (runnable: OperationList, waiters: [Waiter]) {
        let flags = lifeFlags.bitwiseOr(
            holdsTail ? LifeFlags.finished | LifeFlags.tailPending : LifeFlags.finished,
            ordering: .sequentiallyConsistent
        ).oldValue
        // Event streams have `finished` before waiters are resumed and dependents released.
        if flags & LifeFlags.hasEventStreams != 0 { LifecycleEventStreams.deliver(for: self) }
        var waiting: [Waiter] = []
        if !holdsTail && flags & LifeFlags.hasWaiters != 0 {
            waiting = machine.lock.withLock {
                defer { waiters = [] }
                return waiters
            }
        }
        guard flags & LifeFlags.hasDependents != 0 else { return (OperationList(), waiting) }
        // Under the graph lock: the entries are not retained, and each is alive while it is
        // listed (see `dependents`) — but only until the decrement that makes it runnable: from
        // then on a worker may take it (through a stale ready-list entry), run it, and its queue
        // release it before this loop is done with it. So an entry that this decrement may make
        // runnable is retained first.
        var unneeded = OperationList()
        let runnable = DependencyGraph.lock.withLock {
            var runnable = OperationList()
            for entry in dependents {
                // The count changes only under the graph lock (only the flags change without it),
                // so only an entry whose count is 1 now can reach exactly 0 below.
                let mayBecomeRunnable = entry._withUnsafeGuaranteedRef {
                    $0.readiness.load(ordering: .relaxed) & Readiness.countMask == 1
                }
                if mayBecomeRunnable { _ = entry.retain() }
                if entry._withUnsafeGuaranteedRef({ $0.dependencyDidFinish() }) {
                    assert(mayBecomeRunnable, "a dependent's count changed outside the graph lock")
                    runnable.append(mayBecomeRunnable ? entry.takeRetainedValue() : entry.takeUnretainedValue())
                } else if mayBecomeRunnable {
                    // Cancelled, or still being enqueued, meanwhile: `cancel()` or the enqueuer
                    // pushes it. The retain is given back after the lock.
                    unneeded.append(entry.takeRetainedValue())
                }
            }
            dependents = UnretainedOperationList()
            return runnable
        }
        withExtendedLifetime(unneeded) {}
        return (runnable, waiting)
    }

    /// A cancelled operation finished without waiting for its dependencies: it leaves their
    /// `dependents` lists before its queue releases it. (Not only the lists of unfinished
    /// dependencies: one that has just set its finished flag may not have released its list yet.)
    /// (Indices rather than a for-in loop over the list, whose iterator may run unspecialised.)
    private func leaveDependents(of dependencies: OperationList) {
        DependencyGraph.lock.withLock {
            for index in 0..<dependencies.count {
                while DependencyGraph.unregister(self, from: dependencies[index]) {}
            }
        }
    }

    private struct Finished {
        var completion: (@Sendable () -> Void)?
        var queue: Unmanaged<ConcurrentOperationQueue>?
        var dependencies: OperationList
        var wasCancelled: Bool
    }

    /// Finishes an operation that was cancelled before it started, without executing it, then
    /// lets it release what its work would have used (with no lock held: releasing a closure
    /// runs the deinitialisers of whatever it captured).
    func finishWithoutExecuting() {
        finishAfterStart(asLastStep: true)
        didFinishWithoutExecuting()
    }

    /// Called once, with no lock held, after the operation finished without executing (it was
    /// cancelled before it started), on the thread that finished it; ``execute()`` never runs
    /// for such an operation, so nothing else touches the work it holds. ``ClosureOperation``
    /// drops its closure here.
    func didFinishWithoutExecuting() {}

    /// Called by a queue worker that took the operation, before it starts it. Returns `false` when
    /// the operation is not ready to start after all (a procedure whose conditions are still being
    /// evaluated); it is then put back in the ready list with ``ConcurrentOperationQueue/requeue(_:)``.
    func prepareToRun(on queue: ConcurrentOperationQueue) -> Bool { true }

    /// Whether an async runner holding a slot of `queue` at `priority` may run this operation's
    /// work itself (see `AsyncRunner`); only ``AsyncOperation`` can.
    func canRunOnAsyncRunner(priority: TaskPriority?, queue: ConcurrentOperationQueue) -> Bool { false }

    /// Runs the operation's async work on an async runner (``AsyncOperation``).
    func runOnAsyncRunner() async {}

    /// Under `machine.lock`, as the operation starts on `runner`: it runs there
    /// (``AsyncOperation``, to cancel its closure).
    func attachAsyncRunnerLocked(_ runner: AsyncRunner) {}

    /// Under `machine.lock`, in the step in which the operation starts executing (just before
    /// ``performExecute()`` on the same thread). Must not call out.
    func didStartExecutingLocked() {}

    /// Under `machine.lock`, in the step in which the operation becomes finished. Must not call
    /// out. (A procedure's own lifecycle becomes finished in the same step.)
    func willBecomeFinishedLocked() {}

    /// Under `machine.lock`: a queue has just claimed the operation. Must not call out.
    func didClaim() {}

    /// Under `machine.lock`: the claim was undone (registering a dependency failed).
    func didUnclaim() {}

    /// Operations the queue adds along with this one (a procedure's condition dependencies),
    /// called by the queue's adds once they have claimed this operation, before it is linked.
    func operationsToEnqueueAlong(in queue: ConcurrentOperationQueue) -> [ConcurrentOperation] { [] }

    /// A registered dependency finished. Returns `true` if this made the operation runnable.
    final func dependencyDidFinish() -> Bool {
        readiness.subtract(1, ordering: .acquiringAndReleasing).newValue == 0
    }

    /// The queue of an operation that is enqueued and has not finished.
    final var queueWhilePending: ConcurrentOperationQueue? { machine.lock.withLock { queue } }

    // MARK: Running on a queue

    /// What a worker does after running an operation.
    enum WorkerOutcome {
        /// The worker keeps its slot and takes the next operation (this one did not run, or it
        /// finished on another thread before `execute()` returned and told the queue itself).
        case keepSlot
        /// It finished on the worker's own thread: the worker tells the queue, releasing these
        /// dependents, in the same critical section in which it takes the next operation.
        case finishedOnWorker(newlyReady: OperationList)
        /// It is still executing: the slot is the operation's until it finishes.
        case slotHandedOver
    }

    /// Runs the operation on a queue worker.
    final func runOnWorker(of queue: ConcurrentOperationQueue) -> WorkerOutcome {
        slotHandoff.store(SlotHandoff.workerHolds, ordering: .releasing)
        return WorkerOperation.with(self) {
            // A procedure evaluates its conditions first; while they are pending it leaves the
            // worker, and its queue runs it again once they are done.
            guard prepareToRun(on: queue) else { return .keepSlot }
            let action = machine.lock.withLock { startStepLocked() }
            switch action {
            case .execute:
                tellLifecycleEventStreams()
                let qos = queuedQualityOfService
                if qos != .unspecified && qos != queue.qualityOfService && queue.underlyingQueue == nil {
                    // The work asked for its own quality of service (and the queue has no
                    // underlying queue that all work must run on): run it on that global queue.
                    // The slot goes with it until it finishes.
                    slotHandoff.store(SlotHandoff.workerLeft, ordering: .releasing)
                    DispatchQueue.global(qos: qos).async {
                        CurrentQueue.with(queue) { self.performExecute() }
                        // A group now only waits for its children: its slot goes back to its queue.
                        if self.waitsWithoutSlot && self.returnSlot() { queue.slotReturned() }
                    }
                    return .slotHandedOver
                }
                performExecute()
            case .finishWithoutExecuting:
                finishWithoutExecuting()
            case .refuse:
                // Started by someone else (a queue refuses `start()` by hand, so this does not
                // happen); nothing ran and the worker keeps its slot.
                return .keepSlot
            }
            if let deferred = deferredReady {
                deferredReady = nil
                return .finishedOnWorker(newlyReady: deferred)
            }
            let previous = slotHandoff.exchange(SlotHandoff.workerLeft, ordering: .acquiringAndReleasing)
            if previous == SlotHandoff.finished { return .keepSlot }
            // Still executing. A group that now only waits for its children gives the slot back:
            // the worker keeps it and takes the next ready operation (see "A group waiting for its
            // children holds no slot" in Documentation/Semantics.md).
            return waitsWithoutSlot && returnSlot() ? .keepSlot : .slotHandedOver
        }
    }

    /// Whether the operation, once its `execute()` has returned, only waits for work that runs
    /// elsewhere (a group's children), and so gives its concurrency slot back to its queue
    /// instead of holding it until it finishes. Read only when an operation is still executing
    /// after `execute()` returned.
    var waitsWithoutSlot: Bool { false }

    /// Settles, once `execute()` has returned, that the operation no longer holds a slot: returns
    /// `true` if the caller (who held the slot for it) keeps the slot, `false` if the operation
    /// finished meanwhile and its finish already gave the slot back.
    final func returnSlot() -> Bool {
        slotHandoff.compareExchange(
            expected: SlotHandoff.workerLeft, desired: SlotHandoff.slotReturned, ordering: .acquiringAndReleasing
        ).exchanged
    }
}

// Mutable state is protected by `machine.lock`, by the lock of the queue the operation is in
// (the intrusive list and ready-list fields) or by `DependencyGraph.lock` (`graphOrder`), as
// marked on each field; `readiness` and `slotHandoff` are atomics.
extension ConcurrentOperation: @unchecked Sendable {}

extension ConcurrentOperation: CustomStringConvertible {
    /// The operation's ``displayName``.
    public var description: String { displayName }
}

/// The values of `ConcurrentOperation.slotHandoff`.
enum SlotHandoff {
    static let workerHolds: UInt8 = 0
    static let finished: UInt8 = 1
    static let workerLeft: UInt8 = 2
    /// Still executing, but holding no slot (`waitsWithoutSlot`): its finish releases none.
    static let slotReturned: UInt8 = 3
}

/// The bits of `ConcurrentOperation.lifeFlags`. A dependent registers (under the graph lock) only
/// after setting `hasDependents` and seeing no `finished`; a finishing operation sets `finished`
/// and, if it sees `hasDependents`, takes its dependents under the graph lock. Both sides use
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
}

extension ConcurrentOperation {
    /// Under `machine.lock`: adds `waiter` unless the operation has announced its finish (its
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

    /// Under `DependencyGraph.lock`: records `dependent` as waiting for this operation, unless it
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
enum Readiness {
    static let cancelled = 1 << 62
    static let enqueuing = 1 << 61
    static let countMask = enqueuing - 1

    static func isRunnable(_ value: Int) -> Bool {
        value & enqueuing == 0 && (value & countMask == 0 || value & cancelled != 0)
    }

    static func becameRunnableByCancelling(_ old: Int) -> Bool {
        old & cancelled == 0 && old & enqueuing == 0 && old & countMask > 0
    }
}
