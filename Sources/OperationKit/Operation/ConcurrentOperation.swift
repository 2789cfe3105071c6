// ConcurrentOperation: the base operation class — its stored state, Foundation's surface, and
// the hooks that subclasses and the queue override (running and finishing are in extensions).

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

    // The operation is its own state machine: its `lock` and `lifecycle` are its own fields.
    // (The public ``OperationStateMachine`` is for owners that are not operations.) Keeping the
    // lifecycle in the operation's own allocation saves an object per operation: an allocation,
    // a free and 48 heap bytes.
    /// The operation's lock: the striped lock of its address (never re-entered; see `Lock`). It
    /// also protects the fields below marked `lock`.
    @inline(__always) final var lock: Lock { Lock.striped(for: self) }
    /// The lifecycle (ready, executing, finished; cancelled). Protected by `lock`.
    @exclusivity(unchecked) final var lifecycle = OperationLifecycle()
    /// When its queue claimed it (a `CoarseClock` stamp, 0 before), for snapshots. Declared
    /// right after `lifecycle` (two bytes), it fills the padding before the next word.
    @exclusivity(unchecked) final var addedStamp: UInt32 = 0

    // protected by lock
    @exclusivity(unchecked) private var _name: String?
    @exclusivity(unchecked) var _completionBlock: (@Sendable () -> Void)?
    /// Direct dependencies as the user gave them. The first `processedDependencyCount` have been
    /// registered with the dependency graph (they were unfinished then), were already finished, or
    /// are being registered by the holder of the component's lock.
    @exclusivity(unchecked) var _dependencies = OperationList()
    /// The count behind `processedDependencyCount`, in 32 bits so that `startedStamp` shares its word.
    @exclusivity(unchecked) private var _processedDependencyCount: Int32 = 0
    var processedDependencyCount: Int {
        get { Int(_processedDependencyCount) }
        set { _processedDependencyCount = Int32(truncatingIfNeeded: newValue) }
    }
    /// When the operation started executing (a `CoarseClock` stamp, 0 before), for snapshots.
    @exclusivity(unchecked) var startedStamp: UInt32 = 0
    /// The queue this operation was added to; cleared when it finishes. Unretained: a queue keeps
    /// itself alive while it holds operations (and its caller keeps it alive while adding one).
    /// Protected by `lock`; kept in `queueBits` so that `isPending(in:)` can compare it without.
    var queueReference: Unmanaged<ConcurrentOperationQueue>? {
        @inline(__always) get {
            let bits = queueBits.load(ordering: .relaxed)
            return bits == 0 ? nil : Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: bits).unsafelyUnwrapped)
        }
        @inline(__always) set {
            queueBits.store(newValue.map { UInt(bitPattern: $0.toOpaque()) } ?? 0, ordering: .relaxed)
        }
    }
    /// The bits of `queueReference`'s pointer, or 0. Written only under `lock`.
    private let queueBits = Atomic<UInt>(0)
    /// Whether the operation is pending in `queue`, without the lock: a snapshot, as the locked
    /// read would be, that may be out of date as soon as it is taken (the operation may finish).
    /// The caller keeps `queue` alive, so no other queue can share its address.
    @inline(__always)
    final func isPending(in queue: Unmanaged<ConcurrentOperationQueue>) -> Bool {
        queueBits.load(ordering: .acquiring) == UInt(bitPattern: queue.toOpaque())
    }
    /// Whether the operation is in `queue` now (it was added and has not finished).
    final func isEnqueued(in queue: ConcurrentOperationQueue) -> Bool {
        lock.withLock { queueReference?.toOpaque() == Unmanaged.passUnretained(queue).toOpaque() }
    }

    /// The queue this operation was added to, retained for the caller.
    var queue: ConcurrentOperationQueue? { queueReference?.takeUnretainedValue() }
    /// Threads and tasks waiting for this operation to finish.
    var waiters: [Waiter] {
        get { waiterList ?? [] }
        _modify {
            var list = waiterList ?? []
            waiterList = nil  // keep `list` uniquely referenced while it changes
            defer { waiterList = list.isEmpty ? nil : list }
            yield &list
        }
    }
    /// `waiters`, `nil` while empty: most operations never have one, and an empty array would
    /// cost every operation a retain when made and a release when freed.
    @exclusivity(unchecked) private var waiterList: [Waiter]?

    // protected by the lock of `queue`. Unretained links: the queue holds one explicit retain
    // on each of its operations from `insert` until `operationDidFinish`.
    @exclusivity(unchecked) var queueNext: Unmanaged<ConcurrentOperation>?
    @exclusivity(unchecked) var queuePrevious: Unmanaged<ConcurrentOperation>?
    @exclusivity(unchecked) var readyNext: Unmanaged<ConcurrentOperation>?

    /// Dependents released by a finish on the worker's own thread; only that thread touches it.
    @exclusivity(unchecked) var deferredReady: OperationList?

    /// The component of the dependency graph this operation belongs to once it takes part in an
    /// edge (see `GraphComponent`), as the bits of an unretained pointer, or 0: set from 0 by a
    /// compare-and-exchange under the lock of the joined root, then repointed to the root under
    /// the root's lock (so that it may point to any component between the one joined and the
    /// root); read without a lock.
    let graphComponentBits = Atomic<UInt>(0)
    /// Keeps alive the component the operation joined (and so every one it was merged into; see
    /// `GraphComponent`). Written once, by the thread whose exchange set `graphComponentBits`;
    /// never read.
    @exclusivity(unchecked) final var graphComponentKeepAlive: AnyObject?
    // protected by the lock of the root of the operation's component
    @exclusivity(unchecked) var graphOrder = DependencyGraph.unassigned
    /// Enqueued operations waiting for this one to finish (under the component's lock, like
    /// `graphOrder`); released when it finishes. Not
    /// retained: a listed operation is retained by its caller while it is being added, then by
    /// its queue until it finishes — and it finishes only after every listed entry of it was
    /// released (it ran: each dependency released it first) or removed (it was cancelled: it
    /// leaves the lists of its dependencies before its queue lets it go). The release that makes
    /// it runnable is the exception: once its count reaches 0 a worker may run it at once
    /// (through a stale ready-list entry) and its queue let it go, so `announceFinish` retains an
    /// entry before a decrement that may do that. Saves a retain and a release, on objects other
    /// threads are touching, per dependency edge.
    @exclusivity(unchecked) var dependents = UnretainedOperationList()

    /// Unfinished registered dependencies plus the `Readiness` flags; see `Readiness`.
    let readiness = Atomic<Int>(0)

    // protected by the lock of `queue`
    @exclusivity(unchecked) var isInReadyList = false
    @exclusivity(unchecked) var isDispatched = false
    /// `queuePriority` as it was when the operation was added to its queue.
    @exclusivity(unchecked) var queuedPriority: QueuePriority = .normal
    /// `qualityOfService` as it was when the operation was added to its queue. Written under
    /// `lock` before the queue publishes the operation; read by the worker that runs it.
    @exclusivity(unchecked) var queuedQualityOfService: DispatchQoS.QoSClass = .unspecified

    /// Hands the worker's concurrency slot over between the worker and `finish()`.
    let slotHandoff = Atomic<UInt8>(SlotHandoff.workerHolds)
    /// `LifeFlags`: whether the operation has finished, whether it ever had dependents, and
    /// whether it may have lifecycle event streams.
    let lifeFlags = Atomic<UInt8>(0)

    // protected by lock (kept with the other one-byte fields to save padding)
    @exclusivity(unchecked) private var _queuePriority: QueuePriority = .normal
    @exclusivity(unchecked) private var _qualityOfService: DispatchQoS.QoSClass = .unspecified

    /// Creates an operation. Subclasses override ``execute()``.
    ///
    /// - Parameter name: A name for logs and errors.
    public init(name: String? = nil) {
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
        let flags = lifeFlags.load(ordering: .relaxed)
        if flags & LifeFlags.hasEventStreams != 0 {
            LifecycleEventStreams.operationWillDeallocate(ObjectIdentifier(self))
        }
        // Reported progress or a progress weight: its entry leaves that side table.
        if ReportedProgressTable.hasEntries {
            ReportedProgressTable.operationWillDeallocate(ObjectIdentifier(self))
        }
    }

    // MARK: Foundation's surface

    /// A name for logs and errors. Readable and writable from any thread.
    public var name: String? {
        get { lock.withLock { _name } }
        set { lock.withLock { _name = newValue } }
    }

    /// The name, or — when it has none — the type and a short id, such as
    /// `ClosureOperation#3fa2c1`: what errors, logs and `description` show.
    ///
    /// The id is six hexadecimal digits taken from the operation's address: the same for as long
    /// as the operation lives, and different from that of any other operation alive with it
    /// (short of a rare clash in the digits kept); one that ends may give its id to a later one.
    public var displayName: String {
        if let name { return name }
        return "\(type(of: self))#\(shortID)"
    }

    /// Six hexadecimal digits of the address (heap objects are 16-byte aligned: the low four bits
    /// are always zero and are left out).
    var shortID: String {
        let digits = String((UInt(bitPattern: ObjectIdentifier(self)) >> 4) & 0xFF_FFFF, radix: 16)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }

    /// Whether the operation can start: it has not started, and every dependency has finished (or
    /// it was cancelled, which makes it ready at once). Readable from any thread.
    public var isReady: Bool {
        let (ready, enqueued, pending) = lock.withLock {
            (lifecycle.isReady, queue != nil, _dependencies)
        }
        guard ready else { return false }
        if enqueued { return Readiness.isRunnable(readiness.load(ordering: .acquiring)) }
        if isCancelled { return true }
        return pending.allSatisfy(\.isFinished)
    }

    /// Whether the operation has started and not finished. Readable from any thread.
    public var isExecuting: Bool { lock.withLock { lifecycle.isExecuting } }
    /// Whether the operation has finished (executed, or cancelled and reached). Readable from any thread.
    public var isFinished: Bool { lock.withLock { lifecycle.isFinished } }
    /// Whether ``cancel()`` was called before the operation finished. Readable from any thread.
    public var isCancelled: Bool { lock.withLock { lifecycle.isCancelled } }
    /// Always `true`: every OperationKit operation may finish after ``execute()`` returns.
    public var isAsynchronous: Bool { true }

    /// The order in which a queue starts this operation among ready ones. Set before adding it.
    public var queuePriority: QueuePriority {
        get { lock.withLock { _queuePriority } }
        set { lock.withLock { _queuePriority = newValue } }
    }

    /// `queuePriority`; call with `lock` held.
    var queuePriorityLocked: QueuePriority { _queuePriority }
    /// `qualityOfService`; call with `lock` held.
    var qualityOfServiceLocked: DispatchQoS.QoSClass { _qualityOfService }

    /// The quality of service of the work. `.unspecified` (the default) runs it at its queue's.
    public var qualityOfService: DispatchQoS.QoSClass {
        get { lock.withLock { _qualityOfService } }
        set { lock.withLock { _qualityOfService = newValue } }
    }

    /// Runs exactly once after the operation finished — also when it was cancelled — on the
    /// thread that finished it, with no lock held, before its dependents are released.
    public var completionBlock: (@Sendable () -> Void)? {
        get { lock.withLock { _completionBlock } }
        set { lock.withLock { _completionBlock = newValue } }
    }

    /// The operations this one waits for. Empty once it has finished.
    public var dependencies: [ConcurrentOperation] { lock.withLock { _dependencies.array } }

    // MARK: Running, and hooks for subclasses

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
        // One critical section sets the flag and reads the queue. (A ConcurrentOperation's
        // lifecycle has no cancellation block to run.)
        let (cancelled, queue, executing) = lock.withLock { () -> (Bool, ConcurrentOperationQueue?, Bool) in
            cancelLocked() ? (true, self.queue, lifecycle.isExecuting) : (false, nil, false)
        }
        guard cancelled else { return }
        tellLifecycleEventStreams()
        tellCancelled(queue: queue, wasExecuting: executing)
        makeRunnableAfterCancel(in: queue)
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

    /// What a queue worker does with an operation it took, once ``prepareToRun(on:instrumented:)``
    /// has returned.
    enum RunPreparation {
        /// Not ready to start after all (a procedure whose conditions are still being evaluated):
        /// it is put back in the ready list with ``ConcurrentOperationQueue/requeue(_:)`` later.
        case putBack
        /// Start it.
        case start
        /// Its conditions were satisfied on this worker and nothing was told of it: the start
        /// step records that first (``conditionsSatisfiedLocked()``), saving a critical section.
        case startSatisfyingConditions
        /// It had no condition to evaluate when the worker looked without the lock — none, or it
        /// was cancelled (a procedure, on a run that tells no instrument): the start step moves
        /// it past its dependencies first (``passDependenciesWithoutConditionsLocked()``), saving
        /// a critical section — unless a condition was added meanwhile to one not cancelled: then
        /// nothing starts, and the worker prepares it again.
        case startWithoutConditions
    }

    /// Called by a queue worker that took the operation, before it starts it (see
    /// ``RunPreparation``). `instrumented`: whether the worker tells an instrument of this run.
    func prepareToRun(on queue: ConcurrentOperationQueue, instrumented: Bool) -> RunPreparation { .start }

    /// Under `lock`, in the start step after ``RunPreparation/startSatisfyingConditions``:
    /// records that the conditions were satisfied. Returns `false` if that came too late (a
    /// cancel abandoned the evaluation and put the operation back in its queue): it does not
    /// start. Must not call out.
    func conditionsSatisfiedLocked() -> Bool { true }

    /// Without the lock, after the start step refused a start prepared with
    /// ``RunPreparation/startSatisfyingConditions``: what the evaluation left to this worker (a
    /// procedure lets go of a condition it lent; see
    /// `ProcedureOperation.prepareSingleClosureCondition`).
    func startRefusedAfterConditions() {}

    /// Under `lock`, in the start step after ``RunPreparation/startWithoutConditions``: moves
    /// the operation past its dependencies if it still has no condition to evaluate (none, or
    /// cancelled). Returns `false`, changing nothing, if it has one: it does not
    /// start, and the worker calls ``prepareToRun(on:instrumented:)`` again. Must not call out.
    func passDependenciesWithoutConditionsLocked() -> Bool { true }

    /// Whether an async runner holding a slot of `queue` at `priority` may run this operation's
    /// work itself (see `AsyncRunner`); only ``AsyncOperation`` can.
    func canRunOnAsyncRunner(priority: TaskPriorityCode, queue: ConcurrentOperationQueue) -> Bool { false }

    /// Runs the operation's async work on `runner` (``AsyncOperation``), on the runner's
    /// executor (no hop on the way in and out: the runner's task runs on the global executor),
    /// and then, while the runner gives it operations of the same class, theirs (see
    /// `AsyncRunner.advance(after:)`). Returns the next operation for the runner, of another
    /// class and already started on it, or `nil` once the runner is done.
    nonisolated(nonsending) func runOnAsyncRunner(_ runner: AsyncRunner) async -> ConcurrentOperation? {
        runner.advance(after: self)
    }

    /// Under `lock`, as the operation starts on `runner`: it runs there
    /// (``AsyncOperation``, to cancel its closure).
    func attachAsyncRunnerLocked(_ runner: AsyncRunner) {}

    /// Under `lock`, in the step in which the operation starts executing (just before
    /// ``performExecute()`` on the same thread). Must not call out.
    func didStartExecutingLocked() {}

    /// Under `lock`, in the step in which the operation becomes finished. Must not call
    /// out. (A procedure's own lifecycle becomes finished in the same step.)
    func willBecomeFinishedLocked() {}

    /// Under `lock`: a queue has just claimed the operation. Must not call out. Returns whether the
    /// queue must ask ``operationsToEnqueueAlong(in:)`` once it has linked the operation (what
    /// would come along later is added by whoever makes it, see `ProcedureOperation.addCondition`).
    func didClaim() -> Bool { false }

    /// Under `lock`: the claim was undone (registering a dependency failed).
    func didUnclaim() {}

    /// Operations the queue adds along with this one (a procedure's condition dependencies),
    /// called by the queue's adds once they have claimed this operation, before it is linked.
    func operationsToEnqueueAlong(in queue: ConcurrentOperationQueue) -> [ConcurrentOperation] { [] }

    /// The count of unfinished registered dependencies of an operation that is in no queue has
    /// reached 0 (the finish of its last one released it): an ``OperationLayer`` finishes now.
    /// Any other such operation was in a queue and has finished meanwhile: nothing to do. Called
    /// with no lock held, on the thread of the dependency's finish.
    func lastDependencyDidFinishOutsideQueue() {}

    /// Whether ``removeDependency(_:)`` may remove a dependency: not from a layer, whose members
    /// are fixed.
    var allowsRemovingDependencies: Bool { true }

    /// Whether a finish in no queue tells `OperationInstrumentation.default` (`false` for a
    /// layer, which is never started by hand either, so it would be told finished alone).
    var tellsDefaultInstrument: Bool { true }

    /// Whether the operation, once its `execute()` has returned, only waits for work that runs
    /// elsewhere (a group's children), and so gives its concurrency slot back to its queue
    /// instead of holding it until it finishes. Read only when an operation is still executing
    /// after `execute()` returned.
    var waitsWithoutSlot: Bool { false }

    // Hooks for instruments (Observability/OperationInstrument+Telling.swift), called only when
    // one is installed.

    /// The operation was added to a queue whose instrument is `instrument`: an operation with a
    /// queue of its own (a group's children, a retry's attempts) passes it on.
    func adoptInstrument(_ instrument: any OperationInstrument) {}

    /// The operation was added to `queue`, which has an executor or a clock to pass on: an
    /// operation with a queue of its own (a group's children, a retry's attempts) lets that queue
    /// take them (`ConcurrentOperationQueue.adoptSettings(of:)`).
    func adoptQueueSettings(of queue: ConcurrentOperationQueue) {}

    /// Whether the worker that took the operation tells `ready`: the first time only (a
    /// procedure is taken again after its conditions or categories).
    func takeReadyTelling() -> Bool { true }

    /// The errors the operation finished with, for its outcome; under `lock`, in the
    /// finish step.
    func instrumentErrorsLocked() -> [any Error] { [] }
}

// Mutable state is protected by `lock`, by the lock of the queue the operation is in
// (the intrusive list and ready-list fields) or by the lock of their dependency-graph component
// (`graphOrder`, `dependents`), as
// marked on each field; `readiness` and `slotHandoff` are atomics.
extension ConcurrentOperation: @unchecked Sendable {}

extension ConcurrentOperation: CustomStringConvertible {
    /// The operation's ``displayName``.
    public var description: String { displayName }
}
