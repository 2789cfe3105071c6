// ProcedureOperation: the class — its stored state, its public state, the hooks for subclasses
// and its overrides of ConcurrentOperation (finishing, executing, cancelling are in extensions).

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
    // All the fields below are protected by `lock`, except where said. Each group of
    // related facts is one value type whose cases leave out the impossible combinations (see
    // ProcedureStateValues.swift). They are declared in the order that packs them tightest (a
    // class lays its fields out in declaration order, and a pending procedure's size matters: see
    // Benchmarks) and keeps what a queue's claim touches next to the operation's own fields: the
    // one-byte and 4-byte-aligned ones first — among them the lifecycle, the flags and the
    // condition kinds that `didClaim` reads and writes, right after the operation's `readiness`
    // and queue bytes (another cache line otherwise, for every procedure a batch add claims) —
    // then the word-aligned ones (the enums among them are one word each, `eventDelivery` two):
    // 80 bytes after the operation's.
    @exclusivity(unchecked) var procedureLifecycle = ProcedureLifecycle()
    @exclusivity(unchecked) var flags: ProcedureFlags = []
    /// The kinds of condition added (``ConditionKinds`` bits). Written under the lock; read
    /// without it too (bits are only ever set): whether any condition was added — if not, the
    /// worker that takes the procedure need not look under the lock (see `prepareToRun`) — and
    /// whether one that may make a dependency was (any but a ``ClosureCondition``) — if not, the
    /// queue's add need not look (see `conditionDependenciesToEnqueue`).
    let conditionKinds: Atomic<UInt8>
    /// The events some observer listens to (the union of their `observedEvents`).
    @exclusivity(unchecked) var observedEvents: ProcedureEventKinds = []
    /// The events the class's hooks (`procedureWillExecute()`…) need; every kind unless a
    /// subclass of this module says it overrides none (``ClosureProcedure``…). Set in `init`,
    /// never changed afterwards: read without the lock too.
    @exclusivity(unchecked) var hookEvents: ProcedureEventKinds = .all
    /// The procedure's ``MutuallyExclusive`` categories: asked for (so a cancel may withdraw), held.
    @exclusivity(unchecked) var exclusivity = ExclusivityProgress.none
    @exclusivity(unchecked) var conditionTotal: Int32 = 0
    @exclusivity(unchecked) var observerTotal: Int32 = 0
    /// `produce(_:)` calls adding their operation now; a finish meanwhile waits for them.
    @exclusivity(unchecked) var produceProgress = ProduceProgress.none
    /// See `didComplete`. Not under the lock: written in the finish step, read by the same thread.
    @exclusivity(unchecked) var finishedDirectly = DirectFinishSlot()
    /// See `performExecute`. Not under the lock: written in the start step, read by that thread.
    @exclusivity(unchecked) var startedInBaseStep = StartSlot.none
    /// Whether did execute was told (or queued). Written under the lock; read without it too (it
    /// only ever becomes `true`).
    let didExecuteTold = Atomic<Bool>(false)
    /// Whether an observer with an event queue was added (see EventMailbox.swift). Written under
    /// the lock; read without it too (it only ever becomes `true`).
    let hasEventQueueObservers = Atomic<Bool>(false)
    /// The errors, the diagnostics and a ``ResultProcedure``'s output (see `ProcedureOutcome`),
    /// `nil` while there are none (most procedures: one word instead of three, nothing to let go
    /// of).
    var outcome: ProcedureOutcome? {
        @inline(__always) get { outcomeReference.object }
        set { outcomeReference.object = newValue }
    }
    /// `outcome`'s storage. Unmanaged, as `conditionExtras`'s, so that the deinitialiser lets go
    /// of both after one test (see `deinit`) rather than with a release call each, which a
    /// finished procedure — both `nil` — paid for nothing.
    @exclusivity(unchecked) private var outcomeReference = ManualReference<ProcedureOutcome>(nil)
    /// The conditions: the first in one word (most procedures have at most one, a
    /// ``ClosureCondition``: no array to allocate and free), the others in `conditionExtras`;
    /// `conditionTotal` counts them. Copied out under the lock to be called — except the usual
    /// single ``ClosureCondition``, lent without a retain (`prepareSingleClosureCondition`).
    @exclusivity(unchecked) var firstCondition: FirstCondition
    /// The observers, stored like the conditions. Once added, the first observer stays until
    /// the procedure lets go of its observers after its last event was delivered: the thread
    /// delivering an event reads it without the lock (see `ObserversToTell.first`).
    @exclusivity(unchecked) var firstObserver: FirstObserver
    /// What goes beyond the usual single `ClosureCondition` and single observer (see
    /// `ConditionExtras`): made only when needed.
    var conditionExtras: ConditionExtras? {
        @inline(__always) get { conditionExtrasReference.object }
        set { conditionExtrasReference.object = newValue }
    }
    /// `conditionExtras`'s storage (see `outcomeReference`).
    @exclusivity(unchecked) private var conditionExtrasReference = ManualReference<ConditionExtras>(nil)
    /// Who delivers the events, and those waiting for delivery.
    @exclusivity(unchecked) var eventDelivery = EventDelivery.idle
    /// The evaluation of the conditions, while it runs (see `evaluateOne`, `drive`).
    @exclusivity(unchecked) var conditionProgress = ConditionProgress.none

    /// Creates a procedure. Subclasses override ``ConcurrentOperation/execute()``.
    ///
    /// - Parameter name: A name for logs and errors.
    public override init(name: String? = nil) {
        firstCondition = .none
        firstObserver = .none
        conditionKinds = Atomic(0)
        super.init(name: name)
    }

    deinit {
        // (One test for the two side objects, usually both `nil`.)
        if !outcomeReference.isNil || !conditionExtrasReference.isNil { releaseSideObjects() }
    }

    /// The rest of `deinit`, when the procedure has an outcome or condition extras.
    @inline(never)
    private func releaseSideObjects() {
        outcomeReference.release()
        conditionExtrasReference.release()
    }

    /// Creates a procedure with its conditions and observers: the same as calling
    /// ``addCondition(_:)`` for each condition and then ``addObserver(_:)`` for each observer, in
    /// order, right after the initialiser, but cheaper — they are stored before the procedure can
    /// be shared, without taking its lock.
    ///
    /// ```swift
    /// final class Upload: ProcedureOperation, @unchecked Sendable {
    ///     let file: File
    ///
    ///     init(file: File, log: any OperationObserver) {
    ///         self.file = file
    ///         super.init(name: "upload", conditions: [NoFailedDependencies()], observers: [log])
    ///     }
    /// }
    /// ```
    ///
    /// Everything said of `addCondition(_:)` and `addObserver(_:)` holds: a condition the same as
    /// an earlier one (the same ``OperationCondition/identity``) is kept once; a condition's own
    /// ``OperationCondition/dependencies`` are asked here, once, and its produced dependency is
    /// made when the procedure is added to a queue; an observer with an
    /// ``OperationObserver/eventQueue`` is told its events there. Nothing can be refused at
    /// this point, so the initialiser does not throw. More conditions and observers can still be
    /// added afterwards: they are evaluated and told after these.
    ///
    /// The observers that want ``OperationObserver/didAttach(to:)`` are told it before this
    /// initialiser returns, on the calling thread, in order — after all of them were attached, so
    /// an event raised from a did attach (a cancel, say) reaches every observer, after its did
    /// attach. A subclass's initialiser has not finished then: an observer that looks at the
    /// procedure from its did attach sees the subclass's stored properties set, nothing else.
    ///
    /// Making many procedures with the same conditions and observers, pass the same arrays each
    /// time (the arrays are not copied; an array literal in the call is allocated for each call).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - conditions: Conditions, evaluated in this order (see ``addCondition(_:)``).
    ///   - observers: Observers, told in this order (see ``addObserver(_:)``).
    public init(
        name: String? = nil, conditions: borrowing [any OperationCondition] = [], observers: borrowing [any OperationObserver] = []
    ) {
        // (As in the initialiser below.)
        let (condition, conditionTotal, kinds, observer, observerTotal, events, complete) =
            InitialAttachments.make(conditions, observers)
        firstCondition = consume condition
        self.conditionTotal = conditionTotal
        conditionKinds = Atomic(kinds)
        firstObserver = consume observer
        self.observerTotal = observerTotal
        observedEvents = events
        super.init(name: name)
        if !complete { attachAtInit(conditions: conditions, observers: observers) }
    }

    /// Creates a procedure of a class of this module whose hooks need only `hookEvents` (see
    /// the field): set before the base initialiser, not after it (which costs a retain and a
    /// release of the new procedure).
    init(name: String?, hookEvents: ProcedureEventKinds, outcome: ProcedureOutcome? = nil) {
        self.hookEvents = hookEvents
        outcomeReference = ManualReference(outcome)
        firstCondition = .none
        firstObserver = .none
        conditionKinds = Atomic(0)
        super.init(name: name)
    }

    /// ``init(name:hookEvents:)`` with conditions and observers (see
    /// ``init(name:conditions:observers:)``). (Inlined, with `InitialAttachments.make`, into the
    /// initialisers of the subclasses: their constant arguments — no outcome — fold.)
    @inline(__always)
    init(
        name: String?, hookEvents: ProcedureEventKinds, outcome: ProcedureOutcome? = nil,
        conditions: borrowing [any OperationCondition], observers: borrowing [any OperationObserver]
    ) {
        self.hookEvents = hookEvents
        outcomeReference = ManualReference(outcome)
        // The usual case (see `InitialAttachments`) is stored before the base initialiser, like
        // `hookEvents`: after it, every call on the new procedure costs a retain and a release.
        let (condition, conditionTotal, kinds, observer, observerTotal, events, complete) =
            InitialAttachments.make(conditions, observers)
        firstCondition = consume condition
        self.conditionTotal = conditionTotal
        conditionKinds = Atomic(kinds)
        firstObserver = consume observer
        self.observerTotal = observerTotal
        observedEvents = events
        super.init(name: name)
        if !complete { attachAtInit(conditions: conditions, observers: observers) }
    }

    /// The rest of ``init(name:conditions:observers:)``, once the procedure is complete, when
    /// `InitialAttachments` did not store everything.
    private func attachAtInit(conditions: borrowing [any OperationCondition], observers: borrowing [any OperationObserver]) {
        if !conditions.isEmpty { storeConditionsAtInit(conditions) }
        if !observers.isEmpty { attachObserversAtInit(observers) }
    }

    /// Under `lock`: the errors collected (see ``errors``).
    @inline(__always)
    final var _errors: [any Error] { outcome?.errors ?? [] }

    /// Under `lock`: the errors collected, `nil` while there are none.
    @inline(__always)
    final var errorList: [any Error]? { outcome?.errors }

    /// Under `lock`: the outcome, made if there is none yet.
    final var outcomeLocked: ProcedureOutcome {
        if let outcome { return outcome }
        let made = ProcedureOutcome()
        outcome = made
        return made
    }

    /// Under `lock`: records `errors` after those collected.
    final func appendErrorsLocked(_ errors: [any Error]) {
        guard !errors.isEmpty else { return }
        let outcome = outcomeLocked
        if outcome.errors == nil { outcome.errors = errors } else { outcome.errors!.append(contentsOf: errors) }
    }

    // MARK: Hooks of the queue (see ConcurrentOperation)

    override func didClaim() -> Bool {
        _ = procedureLifecycle.enqueue()
        // From here on, a condition added makes its dependency at once (see `addCondition`).
        flags.insert(.conditionDependenciesMade)
        return conditionKinds.load(ordering: .relaxed) & ConditionKinds.mayProduceDependencies != 0
    }

    override func didUnclaim() {
        procedureLifecycle.unenqueue()
        flags.remove(.conditionDependenciesMade)
    }

    override func operationsToEnqueueAlong(in queue: ConcurrentOperationQueue) -> [ConcurrentOperation] {
        conditionDependenciesToEnqueue(in: queue)
    }

    override func prepareToRun(on queue: ConcurrentOperationQueue, instrumented: Bool) -> RunPreparation {
        // No condition so far (the usual ClosureProcedure): the start step moves the procedure
        // past its dependencies, and checks again under the lock. (Not when an instrument is
        // told: it is told `started` only once the start is certain.)
        guard !instrumented else { return prepareConditions(queue: queue, instrumented: true) }
        let kinds = conditionKinds.load(ordering: .relaxed)
        if kinds & ConditionKinds.any == 0 { return .startWithoutConditions }
        // Cancelled (a queue's `cancelAllOperations`): its conditions are not evaluated, so it
        // passes its dependencies in the start step too, as one without conditions. (The flag is
        // set after the cancel's critical section, or in the queue's claim: the start step sees
        // the cancel, and checks again.)
        if readiness.load(ordering: .acquiring) & Readiness.cancelled != 0 { return .startWithoutConditions }
        // Only ClosureConditions without dependencies so far (the usual one): a shorter way.
        if kinds == ConditionKinds.any { return prepareSingleClosureCondition(queue: queue) }
        return prepareConditions(queue: queue, instrumented: false)
    }

    override func conditionsSatisfiedLocked() -> Bool {
        // The worker is done with a condition lent by `prepareSingleClosureCondition`.
        conditionProgress.endLend()
        return procedureLifecycle.conditionsEvaluated(satisfied: true)
    }

    /// After the start step refused a start whose conditions were satisfied on this worker (a
    /// cancel abandoned their evaluation): lets go of the lent condition if a finish moved it out
    /// meanwhile (see ``prepareSingleClosureCondition(queue:)``).
    override func startRefusedAfterConditions() {
        let movedOut = lock.withLock { conditionProgress.takeLentAfterFinish() }
        withExtendedLifetime(movedOut) {}
    }

    override func passDependenciesWithoutConditionsLocked() -> Bool {
        // (Through ready to the start within the caller's step, as `prepareConditions` does in a
        // step of its own when there is no condition to evaluate: none, or the procedure was
        // cancelled, which skips them.)
        let hasConditions = conditionTotal != 0
        guard !hasConditions || procedureLifecycle.isCancelled else { return false }
        _ = procedureLifecycle.dependenciesFinished(hasConditions: hasConditions)
        return true
    }

    override func takeReadyTelling() -> Bool {
        lock.withLock { flags.insert(.readyTold).inserted }
    }

    override func instrumentErrorsLocked() -> [any Error] { _errors }

    // MARK: State

    /// Whether the procedure may start: its dependencies have finished (or it was cancelled) and
    /// its conditions are not being evaluated. Readable from any thread.
    public override var isReady: Bool {
        super.isReady && lock.withLock { procedureLifecycle.state != .evaluatingConditions }
    }

    /// Where the procedure is in its lifecycle. Readable from any thread.
    public var state: ProcedureState {
        // The queue's claim moves the lifecycle to pending in the same critical section.
        lock.withLock { procedureLifecycle.state }
    }

    /// The errors the procedure collected, in the order they arrived: the error given to
    /// ``cancel(with:)`` (a failed condition cancels the procedure with its error) and those given
    /// to the finish that counted. Complete once it has finished. Readable from any thread.
    public var errors: [any Error] { lock.withLock { _errors } }

    /// Whether the procedure collected any error (see ``errors``). A procedure cancelled without
    /// an error has not failed.
    public var isFailed: Bool { lock.withLock { errorList != nil } }

    /// Notes about finish calls that changed nothing — a second finish, or a finish before the
    /// procedure executed — for debugging.
    public var diagnostics: [String] { lock.withLock { outcome?.diagnostics } ?? [] }

    /// Whether cancelling the procedure while it executes also finishes it at once (PSOperations'
    /// behaviour), instead of only telling it. `false` by default.
    ///
    /// The finish happens on the cancelling thread, after the did-cancel observers, with no error
    /// besides the one given to ``cancel(with:)``; the work's own finish later is ignored. Only
    /// the value at the time of the cancel matters: set it before.
    public var finishesWhenCancelled: Bool {
        get { lock.withLock { flags.contains(.finishesWhenCancelled) } }
        set {
            lock.withLock {
                if newValue { flags.insert(.finishesWhenCancelled) } else { flags.remove(.finishesWhenCancelled) }
            }
        }
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
    /// Called once for each operation the procedure is about to add — one it produces, or a
    /// group's child — before the will-add observers, on the adding thread. The default does
    /// nothing.
    ///
    /// - Parameter operation: The operation about to be added.
    open func procedureWillAdd(_ operation: ConcurrentOperation) {}
    /// Called once for each operation the procedure added, before the did-add observers, on the
    /// adding thread. The default does nothing.
    ///
    /// - Parameter operation: The operation added.
    open func procedureDidAdd(_ operation: ConcurrentOperation) {}
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

    // MARK: Produced into a queue of this procedure's own

    /// An operation this procedure's own queue runs (a group's child) begins to produce
    /// `operation` into that queue. Returns whether `operation` is to be cancelled before it is
    /// added. The default (a procedure whose queue cancels nothing it is given) returns `false`;
    /// every call is followed by one of `producedIntoOwnQueueEnded(_:added:cancelledFirst:)`.
    func producedIntoOwnQueueBegins() -> Bool { false }

    /// The produce begun by `producedIntoOwnQueueBegins()` has added `operation` to this
    /// procedure's own queue (`added`), or failed to. The default does nothing.
    func producedIntoOwnQueueEnded(_ operation: ConcurrentOperation, added: Bool, cancelledFirst: Bool) {}

    // MARK: Overrides of ConcurrentOperation

    /// Finishes the procedure without an error. See ``finish(withErrors:)``.
    ///
    /// - Returns: `true` if this call counted (see ``finish(withErrors:)``); `false` if it was
    ///   ignored (the call is then recorded in ``diagnostics``).
    @discardableResult
    public override func finish() -> Bool {
        finishCollecting([])
    }

    override func finishWithoutExecuting() {
        // Without queue listeners to tell first, will finish is queued in the same step as the
        // state change.
        var willFinish: EventDisposition?
        var gate: DispatchSemaphore?
        var taken: (ProcedureLifecycle.StartAction, ConcurrentOperationQueue?, [any Error])
        repeat {
            gate?.wait()
            gate = nil
            lock.lock()
            // Adds made with `produce(_:before: .execute)` are under way: wait for them first.
            if produceProgress.isAdding, produceProgress.startRequested() {
                gate = startGateLocked()
                lock.unlock()
                taken = (.refuse, nil, [])
                continue
            }
            let action = procedureLifecycle.start()
            let queue = self.queue
            // Nobody to tell will finish (the usual cancelled procedure): the base finish step in
            // this critical section (see `quickFinishWithoutExecutingLocked`).
            if action == .finishWithoutExecuting, let quick = quickFinishWithoutExecutingLocked(queue: queue) {
                finishWithoutExecutingQuickly(quick)
                return
            }
            if action == .finishWithoutExecuting && !(queue?.hasListeners.load(ordering: .acquiring) ?? false) {
                willFinish = enqueueEventLocked(.willFinish(_errors), waitForDelivery: true, then: .finishWithoutExecuting)
            }
            taken = (action, queue, _errors)
            lock.unlock()
        } while gate != nil
        let (action, queue, errors) = taken
        precondition(action == .finishWithoutExecuting, "Internal inconsistency: \(action) for a cancelled procedure")
        if let willFinish {
            handle(willFinish, delivering: .willFinish(errors), then: .finishWithoutExecuting)
            return
        }
        queue?.notifyDelegate(willFinish: self)
        let (event, latestErrors) = lock.withLock {
            (enqueueEventLocked(.willFinish(_errors), waitForDelivery: true, then: .finishWithoutExecuting), _errors)
        }
        handle(event, delivering: .willFinish(latestErrors), then: .finishWithoutExecuting)
    }

    /// Under `lock`, as the base operation becomes finished: the procedure's lifecycle
    /// finishes in the same step. If no event is being delivered — none can be raised from now
    /// on — did finish will be told directly by this thread: take what it needs now.
    override func willBecomeFinishedLocked() {
        procedureLifecycle.finished()
        // A quick finish (`beginQuickFinishLocked`): nothing to take, or taken already.
        guard !flags.contains(.finishTaken), !eventDelivery.isDelivering else { return }
        takeDirectFinishInFinishStepLocked()
    }

    /// The rest of ``willBecomeFinishedLocked()`` when did finish will be told directly. (Out of
    /// line: a quick finish, the usual one, does not come here.)
    @inline(never)
    private func takeDirectFinishInFinishStepLocked() {
        finishedDirectly = DirectFinishSlot(takeDirectFinishLocked())
    }

    /// The procedure's start, made in the base operation's start step (see
    /// `didStartExecutingLocked`) and taken by `performExecute` right after, on the same thread.
    /// (An enum: the action shares the disposition's tag byte.) The usual start — execute, with
    /// nobody to tell will execute, the same as `.execute(willExecute: .skipped)` — records none
    /// (`startedInBaseStep` stays `.none`).
    enum Start {
        case execute(willExecute: EventDisposition)
        case finishWithoutExecuting
        case refuse
        /// Adds made before the start are under way: wait on this, then start again.
        case waitForAdds(DispatchSemaphore)
    }

    /// A `Start?` as `startedInBaseStep` stores it, in one byte: the starts without a payload
    /// (all the usual ones) as cases of their own, any other parked in the procedure's
    /// `ProcedureOutcome` (`parkedStart`) — a start that delivers will execute to several
    /// observers, waits for another thread's delivery or for adds under way.
    enum StartSlot: UInt8 {
        case none
        case executeDeliveringToNone
        case executeDeliveringToFirst
        case executeQueued
        case executeSkipped
        case finishWithoutExecuting
        case refuse
        /// In `outcome.parkedStart`.
        case parked
    }

    /// Under `lock`: `start` as `startedInBaseStep` stores it (see `StartSlot`).
    private func startSlotLocked(_ start: Start) -> StartSlot {
        switch start {
        case .execute(.deliverNow(.none)): return .executeDeliveringToNone
        case .execute(.deliverNow(.first)): return .executeDeliveringToFirst
        case .execute(.queued): return .executeQueued
        case .execute(.skipped): return .executeSkipped
        case .finishWithoutExecuting: return .finishWithoutExecuting
        case .refuse: return .refuse
        case .execute(.deliverNow(.list)), .execute(.wait), .waitForAdds:
            outcomeLocked.parkedStart = start
            return .parked
        }
    }

    /// The start recorded in `startedInBaseStep`, if any, leaving none. (Only the thread that
    /// made it takes it; a parked one is taken under the lock, as the outcome is shared.)
    private func takeStartedInBaseStep() -> Start? {
        let slot = startedInBaseStep
        startedInBaseStep = .none
        switch slot {
        case .none: return nil
        case .executeDeliveringToNone: return .execute(willExecute: .deliverNow(.none))
        case .executeDeliveringToFirst: return .execute(willExecute: .deliverNow(.first))
        case .executeQueued: return .execute(willExecute: .queued)
        case .executeSkipped: return .execute(willExecute: .skipped)
        case .finishWithoutExecuting: return .finishWithoutExecuting
        case .refuse: return .refuse
        case .parked: return lock.withLock { outcome?.parkedStart.take() }
        }
    }

    /// Under `lock`: the procedure starts in the same step as the base operation — the
    /// state change and will execute queued together, so no event overtakes it.
    private func startLocked() -> Start {
        // Adds made with `produce(_:before: .execute)` are under way: wait for them first.
        if produceProgress.isAdding, produceProgress.startRequested() { return .waitForAdds(startGateLocked()) }
        let action = procedureLifecycle.start()
        switch action {
        case .execute: return .execute(willExecute: enqueueEventLocked(.willExecute, waitForDelivery: true))
        case .finishWithoutExecuting: return .finishWithoutExecuting
        case .refuse: return .refuse
        }
    }

    override func didStartExecutingLocked() {
        // The usual start — no adds under way, nobody to tell will execute (it would be skipped):
        // only the state changes, and `performExecute` need not take a `Start`.
        if !produceProgress.isAdding && !observedEvents.union(hookEvents).contains(.willExecute) {
            switch procedureLifecycle.start() {
            case .execute: break  // (Nothing recorded: see `Start`.)
            case .finishWithoutExecuting: startedInBaseStep = .finishWithoutExecuting
            case .refuse: startedInBaseStep = .refuse
            }
            return
        }
        startedInBaseStep = startSlotLocked(startLocked())
    }

    override func performExecute() {
        // Made in the base operation's start step on this thread, which always comes first (only
        // this thread touches it until the procedure has executed).
        guard startedInBaseStep != .none else {
            // The usual start (see `Start`): as `.execute(willExecute: .skipped)` below.
            execute()
            // Usually told already, by a finish inside `execute()`: no call.
            if !didExecuteTold.load(ordering: .acquiring) { emitDidExecuteOnce() }
            return
        }
        performStartedExecute()
    }

    /// ``performExecute()`` after a start that recorded a `Start`. (Out of line: the usual start
    /// stays small.)
    @inline(never)
    private func performStartedExecute() {
        guard var start = takeStartedInBaseStep() else { return }
        while case .waitForAdds(let gate) = start {
            gate.wait()
            start = lock.withLock { startLocked() }
        }
        switch start {
        case .execute(let willExecute):
            var state: ProcedureState?
            if case .skipped = willExecute {
                state = .executing
            } else {
                state = handle(willExecute, delivering: .willExecute, then: .nothing)
                // Observers with an event queue: the work waits until they have been told.
                if hasEventQueueObservers.load(ordering: .acquiring) {
                    awaitEventQueues()
                    state = nil
                }
            }
            // A stray finish() while will execute was delivered: the work does not run. (`state`
            // was read when this thread ended the delivery; otherwise read it now.)
            if (state ?? lock.withLock { procedureLifecycle.state }) == .executing { execute() }
            emitDidExecuteOnce()
        case .finishWithoutExecuting:
            // Cancelled between the queue's start and this point: finish without executing.
            finishCancelledAtStart()
        case .refuse, .waitForAdds:
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

    override func refusalOfManualStart() -> OperationError? {
        lock.withLock { conditionTotal == 0 }
            ? nil
            : OperationError(.requiresQueue, operations: [displayName], "only a queue evaluates conditions")
    }

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
}
