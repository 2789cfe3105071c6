import Dispatch
import Synchronization

/// An operation with conditions, observers, errors and the full procedure lifecycle: the class
/// that users of ProcedureKit, PSOperations and Operations subclass.
///
/// ```swift
/// final class Upload: ProcedureOperation, @unchecked Sendable {
///     override func execute() {
///         client.upload(file) { error in self.finish(with: error) }
///     }
/// }
///
/// let upload = Upload()
/// try upload.addCondition(NoFailedDependencies())
/// try upload.addObserver(TimeoutObserver(timeout: .seconds(30)))
/// try queue.addOperation(upload)
/// ```
///
/// Lifecycle (see ``ProcedureState``): initialized → pending (in a queue) → evaluatingConditions
/// (once its dependencies have finished; skipped without conditions) → ready → executing →
/// finishing → finished. A procedure that was cancelled, or whose conditions failed, goes from
/// ready to finishing without executing.
///
/// - Finish with ``finish()``, ``finish(with:)`` or ``finish(withErrors:)`` (and
///   ``ResultProcedure/finish(withValue:)`` for a typed result). Only the first call counts; later
///   ones change nothing and are recorded in ``diagnostics``.
/// - ``cancel()`` and ``cancel(with:)`` never finish an executing procedure behind its back: it is
///   told (``procedureDidCancel(with:)``, did-cancel observers) and finishes itself — unless
///   ``finishesWhenCancelled`` is set. A procedure cancelled before it executes never executes.
/// - A cancelled dependency still counts as finished, as in Foundation; add
///   ``NoFailedDependencies`` or ``NoCancelledDependencies`` to opt out.
/// - Conditions are only evaluated on a queue: `start()` by hand refuses a procedure with
///   conditions (``OperationError/Code-swift.struct/requiresQueue``). Observers are told either way.
/// - Events — the `procedure…` hooks below and the ``OperationObserver``s — are delivered one at a
///   time per procedure, in the order they happened, on the thread where they happen (see
///   ``OperationObserver`` for which thread that is, and for the one case where a lock is held).
///
/// See `Documentation/Procedures.md` in the repository for the whole guide.
open class ProcedureOperation: ConcurrentOperation, @unchecked Sendable {
    // All the fields below are protected by `machine.lock`.
    @exclusivity(unchecked) var procedureLifecycle = ProcedureLifecycle()
    @exclusivity(unchecked) var _errors: [any Error] = []
    @exclusivity(unchecked) var _diagnostics: [String] = []
    @exclusivity(unchecked) var _finishesWhenCancelled = false
    /// The conditions: the first inline (most procedures have at most one: no array to allocate
    /// and free), the others in `moreConditions`; `conditionTotal` counts them (`firstCondition`
    /// is a placeholder while it is 0). Copied out under the lock to be called.
    @exclusivity(unchecked) var firstCondition: any OperationCondition = NoCondition()
    @exclusivity(unchecked) var moreConditions: [any OperationCondition] = []
    @exclusivity(unchecked) var conditionTotal = 0
    /// How many of `conditions`, at the front, are result injections (evaluated first).
    @exclusivity(unchecked) var injectionConditionCount = 0
    /// The observers, stored like the conditions. Once added, the first observer stays until
    /// the procedure lets go of its observers after its last event was delivered: the thread
    /// delivering an event reads it without the lock (see `ObserversToTell.first`).
    @exclusivity(unchecked) var firstObserver: any OperationObserver = NoObserver()
    @exclusivity(unchecked) var moreObservers: [any OperationObserver] = []
    @exclusivity(unchecked) var observerTotal = 0
    /// See `performExecute`.
    @exclusivity(unchecked) var startedInBaseStep: Start?
    /// See `didComplete`.
    @exclusivity(unchecked) var finishedDirectly: DirectFinish?
    /// Whether a condition that may make a dependency was added (any but a ``ClosureCondition``):
    /// if not, the queue's add need not look (see `conditionDependenciesToEnqueue`).
    let conditionsMayProduceDependencies = Atomic<Bool>(false)
    /// Did finish is queued: the thread that ends the delivery lets go of the observers and
    /// conditions (see `takeReleasablesLocked`).
    @exclusivity(unchecked) var releaseAfterDelivery = false
    /// The events some observer listens to (the union of their `observedEvents`).
    @exclusivity(unchecked) var observedEvents: ProcedureEventKinds = []
    /// The events the class's hooks (`procedureWillExecute()`…) need; every kind unless a
    /// subclass of this module says it overrides none (``ClosureProcedure``…). Set in `init`.
    @exclusivity(unchecked) var hookEvents: ProcedureEventKinds = .all
    /// The evaluation of a single condition, while it runs (see `evaluateOne`): whether the
    /// worker is still starting it, and its answer.
    @exclusivity(unchecked) var singleEvaluationStarting = false
    @exclusivity(unchecked) var singleDecision: ConditionResult?
    /// Whether the procedure asked for mutual exclusivity categories (so a cancel may withdraw).
    @exclusivity(unchecked) var exclusivityRequested = false
    /// Whether a queue has claimed the procedure: a condition added from then on makes its
    /// dependency at once (see `addCondition`).
    @exclusivity(unchecked) var conditionDependenciesMade = false
    /// The gates, evaluation and produced dependencies of conditions beyond the usual single
    /// `ClosureCondition` (see `ConditionExtras`): made only when needed.
    @exclusivity(unchecked) var conditionExtras: ConditionExtras?
    @exclusivity(unchecked) var holdsExclusivity = false
    @exclusivity(unchecked) var didExecuteEmitted = false
    /// Whether a finish called after a cancel, before the procedure executed, counted: its errors
    /// were kept for the finish without executing, and later finishes are ignored.
    @exclusivity(unchecked) var finishKeptBeforeExecuting = false
    /// `didExecuteEmitted`, readable without the lock (it only ever becomes `true`).
    let didExecuteEmittedFlag = Atomic<Bool>(false)
    /// `produce(_:)` calls adding their operation now; a finish meanwhile waits for them.
    @exclusivity(unchecked) var activeProduces = 0
    @exclusivity(unchecked) var finishWaitsForProduce = false
    /// Events waiting to be delivered, and whether (and on which thread) they are being delivered.
    @exclusivity(unchecked) var pendingEvents: [PendingEvent] = []
    @exclusivity(unchecked) var deliveringEvents = false
    @exclusivity(unchecked) var deliveringThread: ThreadIdentity?

    /// Creates a procedure. Subclasses override ``ConcurrentOperation/execute()``.
    ///
    /// - Parameter name: A name for logs and errors.
    public override init(name: String? = nil) {
        super.init(name: name)
    }

    // MARK: Hooks of the queue (see ConcurrentOperation)

    override func didClaim() {
        _ = procedureLifecycle.enqueue()
        // From here on, a condition added makes its dependency at once (see `addCondition`).
        conditionDependenciesMade = true
    }

    override func didUnclaim() {
        procedureLifecycle.unenqueue()
        conditionDependenciesMade = false
    }

    override func operationsToEnqueueAlong(in queue: ConcurrentOperationQueue) -> [ConcurrentOperation] {
        conditionDependenciesToEnqueue(in: queue)
    }

    override func prepareToRun(on queue: ConcurrentOperationQueue) -> Bool {
        prepareConditions(queue: queue)
    }

    // MARK: State

    /// Whether the procedure may start: its dependencies have finished (or it was cancelled) and
    /// its conditions are not being evaluated. Readable from any thread.
    public override var isReady: Bool {
        super.isReady && machine.lock.withLock { procedureLifecycle.state != .evaluatingConditions }
    }

    /// Where the procedure is in its lifecycle. Readable from any thread.
    public var state: ProcedureState {
        // The queue's claim moves the lifecycle to pending in the same critical section.
        machine.lock.withLock { procedureLifecycle.state }
    }

    /// The errors the procedure collected, in the order they arrived: the error given to
    /// ``cancel(with:)`` (a failed condition cancels the procedure with its error) and those given
    /// to the finish that counted. Complete once it has finished. Readable from any thread.
    public var errors: [any Error] { machine.lock.withLock { _errors } }

    /// Whether the procedure collected any error (see ``errors``). A procedure cancelled without
    /// an error has not failed.
    public var isFailed: Bool { machine.lock.withLock { !_errors.isEmpty } }

    /// Notes about finish calls that changed nothing — a second finish, or a finish before the
    /// procedure executed — for debugging.
    public var diagnostics: [String] { machine.lock.withLock { _diagnostics } }

    /// Whether cancelling the procedure while it executes also finishes it at once (PSOperations'
    /// behaviour), instead of only telling it. `false` by default.
    ///
    /// The finish happens on the cancelling thread, after the did-cancel observers, with no error
    /// besides the one given to ``cancel(with:)``; the work's own finish later is ignored. Only
    /// the value at the time of the cancel matters: set it before.
    public var finishesWhenCancelled: Bool {
        get { machine.lock.withLock { _finishesWhenCancelled } }
        set { machine.lock.withLock { _finishesWhenCancelled = newValue } }
    }

    // MARK: For subclasses

    /// Called once, just before ``ConcurrentOperation/execute()`` and before the will-execute
    /// observers, on the thread that runs `execute()`: a worker of the procedure's queue, or the
    /// caller of ``ConcurrentOperation/start()``. The default does nothing.
    open func procedureWillExecute() {}
    /// Called once ``ConcurrentOperation/execute()`` has returned — or the procedure finished
    /// first — before the did-execute observers, on that thread (or the finishing thread). The
    /// default does nothing.
    open func procedureDidExecute() {}
    /// Called once when the procedure is cancelled, before the did-cancel observers, on the
    /// cancelling thread. An executing procedure should stop its work and finish; it may call
    /// `finish` from here. The default does nothing.
    ///
    /// - Parameter error: The error given to ``cancel(with:)`` (a failed condition's error), or
    ///   `nil`.
    open func procedureDidCancel(with error: (any Error)?) {}
    /// Called once when the procedure is finishing, before the will-finish observers and before
    /// it has finished, on the finishing thread. The default does nothing.
    ///
    /// - Parameter errors: Every error the procedure collected (its ``errors``).
    open func procedureWillFinish(with errors: [any Error]) {}
    /// Called once when the procedure has finished — after its completion block — before the
    /// did-finish observers, on the finishing thread. The default does nothing.
    ///
    /// - Parameter errors: Every error the procedure collected (its ``errors``).
    open func procedureDidFinish(with errors: [any Error]) {}

    // MARK: Finishing

    /// Finishes the procedure without an error. See ``finish(withErrors:)``.
    ///
    /// - Returns: `true` if this call counted (see ``finish(withErrors:)``); `false` if it was
    ///   ignored (the call is then recorded in ``diagnostics``).
    @discardableResult
    public override func finish() -> Bool {
        finishCollecting([])
    }

    /// Finishes the procedure, with `error` if it is not `nil`. See ``finish(withErrors:)``.
    ///
    /// - Parameter error: An error to record in ``errors``, or `nil`.
    /// - Returns: `true` if this call counted (see ``finish(withErrors:)``); `false` if it was
    ///   ignored (the call is then recorded in ``diagnostics``).
    @discardableResult
    public func finish(with error: (any Error)?) -> Bool {
        finishCollecting(error.map { [$0] } ?? [])
    }

    /// Finishes the procedure with `errors`. Call it once the work is done, from any thread; only
    /// the first finish counts.
    ///
    /// The procedure moves to finishing, and the queue's will-finish, ``procedureWillFinish(with:)``
    /// and the will-finish observers are told; then it finishes: the completion block runs,
    /// dependents are released, its ``MutuallyExclusive`` categories are given back,
    /// ``procedureDidFinish(with:)`` and the did-finish observers are told, and last its queue
    /// lets go of it (its slot, the dependents in the same queue, the queue's waiters) and the
    /// waits for it return. All this happens on the calling thread before the call returns,
    /// except:
    ///
    /// - Called from inside one of this procedure's hooks or observers, it returns at once; the
    ///   finish completes on the same thread right after the event in progress, once will-finish
    ///   has been delivered.
    /// - Called while another thread is delivering an event of this procedure, it waits until
    ///   that thread has delivered will-finish too, then completes the finish.
    /// - Called while ``produce(_:)`` is adding an operation, it returns at once; that `produce`
    ///   completes the finish once the operation has been added.
    ///
    /// So no wait for the procedure (``ConcurrentOperation/waitUntilFinished()``,
    /// ``AwaitableOperation/finished``…) or for its queue returns before the did-finish observers
    /// have returned; ``ConcurrentOperation/isFinished`` is `true` while they run.
    ///
    /// Called on a procedure that was cancelled before it executed (and has not started to
    /// finish without executing), the first finish counts too: `errors` are recorded at once, and
    /// the procedure finishes with them when its queue (or ``ConcurrentOperation/start()``)
    /// finishes it without executing. Later finishes are ignored.
    ///
    /// - Parameter errors: Errors to record in ``errors``, after any already there.
    /// - Returns: `true` if this call counted: it finished the procedure, or its errors were kept
    ///   for a cancelled procedure's finish without executing; `false` if the procedure was not
    ///   executing and not cancelled, or a finish had already counted. The ignored call is
    ///   recorded in ``diagnostics``.
    @discardableResult
    public func finish(withErrors errors: [any Error]) -> Bool {
        finishCollecting(errors)
    }

    /// The first finish: records `errors` and runs `record` (under the lock, so that a typed
    /// result is set in the same step), then finishes — or, if a ``produce(_:)`` is still adding
    /// its operation, lets that call finish once it is done.
    ///
    /// `asLastStep`: the caller is this module's own `execute()`, which returns right after (see
    /// ``ConcurrentOperation/finishAfterStart(asLastStep:)``).
    func finishCollecting(_ errors: [any Error], asLastStep: Bool = false, then record: () -> Void = {}) -> Bool {
        enum Taken {
            case ignored
            /// Cancelled before executing: the errors are kept for its finish without executing.
            case kept
            /// A `produce(_:)` finishes it.
            case deferred
            /// The queue has listeners, to be told will-finish before the procedure's observers.
            case tellQueueFirst(ConcurrentOperationQueue)
            /// Did execute and will finish are queued already (no queue listener to tell first).
            case queued(FinishEvents)
        }
        let taken = machine.lock.withLock { () -> Taken in
            switch procedureLifecycle.finish() {
            case .finish:
                if !errors.isEmpty { _errors.append(contentsOf: errors) }
                record()
                if activeProduces > 0 {
                    finishWaitsForProduce = true
                    return .deferred
                }
                if let queue = self.queue, queue.hasListeners.load(ordering: .acquiring) {
                    return .tellQueueFirst(queue)
                }
                // The state change and the events in one step.
                return .queued(enqueueFinishEventsLocked(executed: true, asLastStep: asLastStep))
            case .ignoreAlreadyFinishing:
                _diagnostics.append("finish ignored: already \(procedureLifecycle.state) (errors given: \(errors.count))")
                return .ignored
            case .refuseNotStarted:
                // Cancelled before it executed: the first finish's errors are kept for the finish
                // without executing (Procedures.md, "Finishing and cancelling").
                if procedureLifecycle.isCancelled && !finishKeptBeforeExecuting {
                    finishKeptBeforeExecuting = true
                    if !errors.isEmpty { _errors.append(contentsOf: errors) }
                    return .kept
                }
                _diagnostics.append("finish ignored: not executing, state \(procedureLifecycle.state)")
                return .ignored
            }
        }
        switch taken {
        case .ignored:
            return false
        case .kept, .deferred:
            break
        case .tellQueueFirst(let queue):
            completeFinish(executed: true, queue: queue, asLastStep: asLastStep)
        case .queued(let events):
            deliver(events, asLastStep: asLastStep)
        }
        return true
    }

    /// Did execute (if not told yet) and will finish, queued together.
    struct FinishEvents {
        var didExecute: EventDisposition?
        var willFinish: EventDisposition
        var errors: [any Error]
    }

    /// Under `machine.lock`, in the state `finishing`: queues did execute (if `executed` and not
    /// told yet) and will finish, whose delivery is followed by the rest of the finish.
    private func enqueueFinishEventsLocked(executed: Bool, asLastStep: Bool) -> FinishEvents {
        var didExecute: EventDisposition?
        if executed && !didExecuteEmitted {
            didExecuteEmitted = true
            didExecuteEmittedFlag.store(true, ordering: .releasing)
            didExecute = enqueueEventLocked(.didExecute)
        }
        let willFinish = enqueueEventLocked(.willFinish(_errors), then: .finishExecuted(asLastStep: asLastStep))
        return FinishEvents(didExecute: didExecute, willFinish: willFinish, errors: _errors)
    }

    private func deliver(_ events: FinishEvents, asLastStep: Bool) {
        if let didExecute = events.didExecute { handle(didExecute, delivering: .didExecute, then: .nothing) }
        handle(events.willFinish, delivering: .willFinish(events.errors), then: .finishExecuted(asLastStep: asLastStep))
    }

    /// Finishing, from the state `finishing`: the queue's will finish, then did execute (if not
    /// told yet) and will finish, queued in one step; once will finish has been delivered, the
    /// base operation finishes (completion block, dependents, waiters), mutual exclusivity is
    /// released and did finish is told (``finishExecuted(asLastStep:)``). If this thread is
    /// delivering the procedure's events (a finish from inside an observer or hook), the rest of
    /// the finish runs right after will finish is delivered.
    ///
    /// `queue`: the procedure's queue if the caller read it in its critical section (`.some`), so
    /// that this need not take the lock to read it.
    private func completeFinish(executed: Bool, queue: ConcurrentOperationQueue?? = nil, asLastStep: Bool = false) {
        (queue ?? machine.lock.withLock { self.queue })?.notifyDelegate(willFinish: self)
        let events = machine.lock.withLock { enqueueFinishEventsLocked(executed: executed, asLastStep: asLastStep) }
        deliver(events, asLastStep: asLastStep)
    }

    /// The rest of a finish after will finish was delivered.
    func finishExecuted(asLastStep: Bool) {
        let tail = finishKeepingTail(handOff: asLastStep ? .lastStepOnWorker : .tellQueue, holdsTail: true)
        didComplete(then: consume tail)
    }

    /// The rest of a finish without executing, after will finish was delivered.
    func finishedWithoutExecuting() {
        // ConcurrentOperation's finish without executing, its tail held for after did finish.
        let tail = finishKeepingTail(handOff: .lastStepOnWorker, holdsTail: true)
        didFinishWithoutExecuting()
        didComplete(then: consume tail)
    }

    override func finishWithoutExecuting() {
        // Without queue listeners to tell first, will finish is queued in the same step as the
        // state change.
        var willFinish: EventDisposition?
        let (action, queue, errors) = machine.lock.withLock {
            () -> (ProcedureLifecycle.StartAction, ConcurrentOperationQueue?, [any Error]) in
            let action = procedureLifecycle.start()
            let queue = self.queue
            if action == .finishWithoutExecuting && !(queue?.hasListeners.load(ordering: .acquiring) ?? false) {
                willFinish = enqueueEventLocked(.willFinish(_errors), waitForDelivery: true, then: .finishWithoutExecuting)
            }
            return (action, queue, _errors)
        }
        precondition(action == .finishWithoutExecuting, "Internal inconsistency: \(action) for a cancelled procedure")
        if let willFinish {
            handle(willFinish, delivering: .willFinish(errors), then: .finishWithoutExecuting)
            return
        }
        queue?.notifyDelegate(willFinish: self)
        let (event, latestErrors) = machine.lock.withLock {
            (enqueueEventLocked(.willFinish(_errors), waitForDelivery: true, then: .finishWithoutExecuting), _errors)
        }
        handle(event, delivering: .willFinish(latestErrors), then: .finishWithoutExecuting)
    }

    /// What the base operation's finish step took for did finish when nothing was being
    /// delivered (see `willBecomeFinishedLocked`); read right after by `didComplete`, on the
    /// same thread.
    struct DirectFinish {
        var exclusive: Bool
        var tellHooksAndObservers: Bool
        var observerCount: Int
        var errors: [any Error]
    }

    /// Under `machine.lock`, as the base operation becomes finished: the procedure's lifecycle
    /// finishes in the same step. If no event is being delivered — none can be raised from now
    /// on — did finish will be told directly by this thread: take what it needs now.
    override func willBecomeFinishedLocked() {
        procedureLifecycle.finished()
        guard !deliveringEvents else { return }
        let exclusive = holdsExclusivity
        holdsExclusivity = false
        finishedDirectly = DirectFinish(
            exclusive: exclusive, tellHooksAndObservers: observedEvents.union(hookEvents).contains(.didFinish),
            observerCount: markReleasedLocked(), errors: _errors)
    }

    /// After the base operation finished: releases mutual exclusivity, tells did finish, and lets
    /// go of conditions and observers (an observer may hold the procedure), without the lock;
    /// then completes `tail` — the queue lets go of the procedure, waiters are resumed — so that
    /// no wait returns before the did-finish observers have. If another event is being delivered,
    /// did finish and the tail are left to the thread delivering.
    private func didComplete(then tail: consuming FinishTail?) {
        let direct: DirectFinish
        if let taken = finishedDirectly.take() {
            direct = taken
        } else {
            // Another event is being delivered (by this thread further up, or another): did
            // finish waits its turn, and the thread delivering lets go of the observers.
            var queued: EventDisposition?
            var after = AfterDelivery.nothing
            var observerCount = 0
            var tell = false
            let (exclusive, errors) = machine.lock.withLock { () -> (Bool, [any Error]) in
                let exclusive = holdsExclusivity
                holdsExclusivity = false
                if deliveringEvents {
                    releaseAfterDelivery = true
                    if let held = tail { after = .completeTail(PendingTail(held)) }
                    queued = enqueueEventLocked(.didFinish(_errors), then: after, handOffThen: true)
                } else {
                    tell = observedEvents.union(hookEvents).contains(.didFinish)
                    observerCount = markReleasedLocked()
                }
                return (exclusive, _errors)
            }
            if let queued {
                if exclusive { ExclusivityController.release(ObjectIdentifier(self)) }
                // Queued: the thread delivering tells did finish, then completes the tail.
                handle(queued, delivering: .didFinish(errors), then: after)
                return
            }
            direct = DirectFinish(exclusive: exclusive, tellHooksAndObservers: tell, observerCount: observerCount, errors: errors)
        }
        if direct.exclusive { ExclusivityController.release(ObjectIdentifier(self)) }
        // No event can come after did finish, and none is being delivered: the observers are
        // this thread's now (see `markReleasedLocked`).
        if direct.tellHooksAndObservers {
            procedureDidFinish(with: direct.errors)
            if direct.observerCount > 0 {
                tellDidFinish(firstObserver, direct.errors)
                for observer in moreObservers { tellDidFinish(observer, direct.errors) }
            }
        }
        releaseUnlocked()
        if let tail { completeTail(tail) }
    }

    /// A finish's tail, held by a queued did finish for the thread delivering it (see
    /// `didComplete`; boxed: the rare case costs an allocation, not a field in every procedure).
    final class PendingTail {
        let tail: FinishTail
        init(_ tail: FinishTail) { self.tail = tail }
    }

    private func tellDidFinish(_ observer: any OperationObserver, _ errors: [any Error]) {
        if observer.observedEvents.contains(.didFinish) { observer.didFinish(self, with: errors) }
    }

    /// Under `machine.lock`, once the procedure has finished and no event is being delivered or
    /// can be raised any more: from here on nothing but the calling thread touches the
    /// conditions, observers and produced dependencies (the counts read 0, every path that would
    /// read them checks the state first), which it then lets go of with ``releaseUnlocked()``.
    /// Returns the number of observers there were.
    func markReleasedLocked() -> Int {
        let observers = observerTotal
        conditionTotal = 0
        observerTotal = 0
        observedEvents = []
        singleDecision = nil
        return observers
    }

    /// After ``markReleasedLocked()``, without the lock: lets go of the conditions, observers and
    /// produced dependencies (their deinitialisers may run here).
    func releaseUnlocked() {
        firstCondition = NoCondition()
        moreConditions = []
        firstObserver = NoObserver()
        moreObservers = []
        // (Fired already, when it was taken or cancelled; this is only a safety net.)
        let signal = conditionExtras?.takenSignal
        conditionExtras = nil
        signal?.fire()
    }

    // MARK: Executing

    /// The procedure's start, made in the base operation's start step (see
    /// `didStartExecutingLocked`) and taken by `performExecute` right after, on the same thread.
    struct Start {
        var action: ProcedureLifecycle.StartAction
        var willExecute: EventDisposition?
    }

    /// Under `machine.lock`: the procedure starts in the same step as the base operation — the
    /// state change and will execute queued together, so no event overtakes it.
    private func startLocked() -> Start {
        let action = procedureLifecycle.start()
        return Start(action: action, willExecute: action == .execute ? enqueueEventLocked(.willExecute, waitForDelivery: true) : nil)
    }

    override func didStartExecutingLocked() {
        startedInBaseStep = startLocked()
    }

    override func performExecute() {
        // Made in the base operation's start step on this thread (only this thread touches it
        // until the procedure has executed).
        let start = startedInBaseStep.take() ?? machine.lock.withLock { startLocked() }
        let (action, willExecute) = (start.action, start.willExecute)
        switch action {
        case .execute:
            var state: ProcedureState?
            if case .skipped = willExecute {
                state = .executing
            } else if let willExecute {
                state = handle(willExecute, delivering: .willExecute, then: .nothing)
            }
            // A stray finish() while will execute was delivered: the work does not run. (`state`
            // was read when this thread ended the delivery; otherwise read it now.)
            if (state ?? machine.lock.withLock { procedureLifecycle.state }) == .executing { execute() }
            emitDidExecuteOnce()
        case .finishWithoutExecuting:
            // Cancelled between the queue's start and this point: finish without executing.
            finishCancelledAtStart()
        case .refuse:
            break
        }
    }

    /// Finishes a procedure cancelled between its queue's start and its execution.
    func finishCancelledAtStart() {
        completeFinish(executed: false)
        // `execute()` never runs: let go of the work now (a `ClosureProcedure`'s closure), as a
        // procedure cancelled earlier does.
        didFinishWithoutExecuting()
    }

    func emitDidExecuteOnce() {
        // Usually told already, by a finish inside `execute()`: no need for the lock.
        if didExecuteEmittedFlag.load(ordering: .acquiring) { return }
        let event = machine.lock.withLock { () -> EventDisposition? in
            guard !didExecuteEmitted else { return nil }
            didExecuteEmitted = true
            didExecuteEmittedFlag.store(true, ordering: .releasing)
            return enqueueEventLocked(.didExecute)
        }
        if let event { handle(event, delivering: .didExecute, then: .nothing) }
    }

    override func refusalOfManualStart() -> OperationError? {
        machine.lock.withLock { conditionTotal == 0 }
            ? nil
            : OperationError(.requiresQueue, operations: [displayName], "only a queue evaluates conditions")
    }

    /// Adds `operation` to this procedure's queue and tells the observers
    /// (``OperationObserver/procedure(_:didProduce:)``, on the calling thread). Call it while the
    /// procedure executes, from its work, on any thread. A finish that happens meanwhile is held
    /// back until the operation has been added and the observers were told, so did-produce never
    /// comes after did-finish.
    ///
    /// The procedure does not wait for the operation it produced (a ``GroupOperation`` does wait
    /// for what its children produce: they produce into the group's own queue).
    ///
    /// - Parameter operation: An operation that is in no queue and has not started.
    /// - Throws: ``OperationError/Code-swift.struct/notExecuting`` if the procedure is not
    ///   executing on a queue (including when it was started by hand); or what the queue's
    ///   `addOperation` throws. No observer is told then.
    public func produce(_ operation: ConcurrentOperation) throws(OperationError) {
        let (state, queue) = machine.lock.withLock { () -> (ProcedureState, ConcurrentOperationQueue?) in
            let state = procedureLifecycle.state
            guard state == .executing, let queue = self.queue else { return (state, nil) }
            activeProduces += 1
            return (state, queue)
        }
        guard let queue else {
            throw OperationError(
                .notExecuting, operations: [displayName, operation.displayName],
                "produce() needs a procedure executing on a queue (state \(state))")
        }
        var failure: OperationError?
        do {
            try queue.addOperation(operation)
        } catch {
            failure = error
        }
        let (event, finishNow) = machine.lock.withLock { () -> (EventDisposition?, Bool) in
            let event = failure == nil ? enqueueEventLocked(.didProduce(operation)) : nil
            activeProduces -= 1
            let finishNow = activeProduces == 0 && finishWaitsForProduce
            if finishNow { finishWaitsForProduce = false }
            return (event, finishNow)
        }
        if let event { handle(event, delivering: .didProduce(operation), then: .nothing) }
        if finishNow { completeFinish(executed: true) }
        if let failure { throw failure }
    }

    // MARK: Cancelling

    /// Cancels the procedure without an error: it is cancelled, not failed. See ``cancel(with:)``.
    public final override func cancel() {
        cancel(with: nil)
    }

    /// Cancels the procedure, recording `error` in ``errors`` if it is not `nil`. Only the first
    /// cancel counts; cancelling a finishing or finished procedure changes nothing.
    ///
    /// ``ConcurrentOperation/isCancelled`` becomes `true`, then ``procedureDidCancel(with:)`` and
    /// the did-cancel observers are told on the calling thread (unless another thread is
    /// delivering this procedure's events: then by that thread, right after). What follows
    /// depends on where the procedure is:
    ///
    /// - Not executing yet (in no queue, pending, ready, or waiting for its ``MutuallyExclusive``
    ///   categories): it never executes. In a queue it finishes without executing as soon as a
    ///   worker reaches it, without waiting for its dependencies; the dependencies its conditions
    ///   produced are cancelled too.
    /// - Evaluating its conditions: it stops waiting for them (their answers are then ignored,
    ///   and no more are evaluated), the dependencies its conditions produced that are still
    ///   waiting or running are cancelled, and it finishes without executing.
    /// - Executing: it is only told, and finishes itself — or at once, on this thread, if
    ///   ``finishesWhenCancelled`` is set.
    ///
    /// Its dependents are not cancelled, and still run once it has finished, unless a condition
    /// such as ``NoCancelledDependencies`` says otherwise.
    ///
    /// - Parameter error: Why the procedure was cancelled, or `nil`. With an error it also counts
    ///   as failed (``isFailed``).
    public func cancel(with error: (any Error)?) {
        cancelCounting(with: error)
    }

    /// ``cancel(with:)``; returns whether this cancel counted (the procedure was not cancelled,
    /// finishing or finished already).
    @discardableResult
    func cancelCounting(with error: (any Error)?) -> Bool {
        typealias Taken = (
            ProcedureLifecycle.CancelAction, ConcurrentOperationQueue?, [ConcurrentOperation], Bool, Bool, EventDisposition?,
            Bool
        )
        var signal: ProcedureTakenSignal?
        let (action, queue, produced, finishes, baseCancelled, event, requested) = machine.lock.withLock { () -> Taken in
            let action = procedureLifecycle.cancel()
            guard action != .none else { return (action, nil, [], false, false, nil, false) }
            signal = takeTakenSignalLocked()
            if let error { _errors.append(error) }
            // The cancelled flag, the state change and did cancel, in one step: no observer sees
            // did cancel before `isCancelled`, and no later event overtakes it.
            let baseCancelled = cancelLocked()
            let event = enqueueEventLocked(.didCancel(error))
            return (action, self.queue, producedDependencies, _finishesWhenCancelled, baseCancelled, event,
                    exclusivityRequested)
        }
        guard action != .none else { return false }
        if baseCancelled {
            tellLifecycleEventStreams()
            makeRunnableAfterCancel(in: queue)
        }
        if let event { handle(event, delivering: .didCancel(error), then: .nothing) }
        switch action {
        case .abandonEvaluation:
            // Its conditions may still wait for the dependencies they produced: cancel them too.
            for dependency in produced where !dependency.isFinished { dependency.cancel() }
            queue?.requeue(self)
        case .cancelledBeforeExecuting:
            for dependency in produced where !dependency.isFinished { dependency.cancel() }
            // Only a procedure that asked for categories can be waiting for them.
            if requested && ExclusivityController.withdraw(ObjectIdentifier(self)) { queue?.requeue(self) }
        case .cancelledWhileExecuting:
            if finishes { finish() }
        case .none:
            break
        }
        // The produced dependencies no longer wait for a worker to take the procedure (after
        // their cancel above: none starts in between).
        signal?.fire()
        return true
    }
}
