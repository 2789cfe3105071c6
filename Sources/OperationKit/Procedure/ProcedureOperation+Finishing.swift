// ProcedureOperation: finishing — finish(with:) and finish(withErrors:), will finish and did finish,
// and letting go of conditions and observers once finished.

extension ProcedureOperation {
    // MARK: Finishing

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
    /// ``ConcurrentOperation/finishAfterStart(asLastStep:)``). `lockHeld`: the caller holds
    /// `lock` (it tried ``beginQuickFinishLocked()`` first).
    func finishCollecting(
        _ errors: [any Error], asLastStep: Bool = false, lockHeld: Bool = false, then record: () -> Void = {}
    ) -> Bool {
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
            /// Nobody listens to did execute or will finish, and no event is being delivered: both
            /// were skipped in the state change's step; the rest of the finish follows at once.
            case skipped
            /// As `skipped`, with no observer with an event queue to wait for either: the base
            /// operation's finish step follows in the same critical section.
            case finishInStep
        }
        func takeLocked() -> Taken {
            switch procedureLifecycle.finish() {
            case .finish:
                appendErrorsLocked(errors)
                record()
                if produceProgress.finishRequested() { return .deferred }
                // (Read through the unretained reference: no retain and release for the usual
                // queue without listeners. The queue is alive: it counts this procedure.)
                if let queue = queueReference, queue._withUnsafeGuaranteedRef({ $0.hasListeners.load(ordering: .acquiring) }) {
                    return .tellQueueFirst(queue.takeUnretainedValue())
                }
                // The usual procedure: what `enqueueFinishEventsLocked` does when both events are
                // skipped, without making them.
                if !eventDelivery.isDelivering && observedEvents.union(hookEvents).isDisjoint(with: [.didExecute, .willFinish]) {
                    didExecuteTold.store(true, ordering: .releasing)
                    // Nothing is told between finishing and finished: the procedure's step and
                    // the base operation's are one (the procedure passes through finishing
                    // within it).
                    if !hasEventQueueObservers.load(ordering: .acquiring) { return .finishInStep }
                    return .skipped
                }
                // The state change and the events in one step.
                return .queued(enqueueFinishEventsLocked(executed: true, asLastStep: asLastStep))
            case .ignoreAlreadyFinishing:
                noteDiagnosticLocked("finish ignored: already \(procedureLifecycle.state) (errors given: \(errors.count))")
                return .ignored
            case .refuseNotStarted:
                // Cancelled before it executed: the first finish's errors are kept for the finish
                // without executing (Procedures.md, "Finishing and cancelling").
                if procedureLifecycle.isCancelled && !flags.contains(.finishKeptBeforeExecuting) {
                    flags.insert(.finishKeptBeforeExecuting)
                    appendErrorsLocked(errors)
                    return .kept
                }
                noteDiagnosticLocked("finish ignored: not executing, state \(procedureLifecycle.state)")
                return .ignored
            }
        }
        if !lockHeld { lock.lock() }
        let taken = takeLocked()
        if case .finishInStep = taken {
            // The base operation's finish step is made in this critical section (it lets go of
            // the lock).
            finishExecuted(asLastStep: asLastStep, lockHeld: true)
            return true
        }
        lock.unlock()
        switch taken {
        case .ignored:
            return false
        case .kept, .deferred:
            break
        case .tellQueueFirst(let queue):
            completeFinish(executed: true, queue: queue, asLastStep: asLastStep)
        case .queued(let events):
            deliver(events, asLastStep: asLastStep)
        case .skipped:
            // (`run` waits for the observers with an event queue, if there are any.)
            if hasEventQueueObservers.load(ordering: .acquiring) {
                run(.finishExecuted(asLastStep: asLastStep))
            } else {
                finishExecuted(asLastStep: asLastStep)
            }
        case .finishInStep:
            break  // (done above)
        }
        return true
    }

    /// Under `lock`: records a note in ``diagnostics``.
    func noteDiagnosticLocked(_ note: String) {
        let outcome = outcomeLocked
        if outcome.diagnostics == nil { outcome.diagnostics = [note] } else { outcome.diagnostics!.append(note) }
    }

    /// How a finish from this module's own `execute()` can go without `finishCollecting`'s
    /// general steps (see ``beginQuickFinishLocked()``).
    enum QuickFinish {
        /// The base operation's finish alone, as a ``ClosureOperation``'s: call
        /// ``finishPlainly(asLastStep:)``.
        case plain
        /// Did execute and will finish skipped, did finish told and the conditions and observers
        /// let go of after the base finish step: call ``finishQuicklyInStep()``.
        case inStep
    }

    /// Under `lock`, for a finish from this module's own `execute()`, with no error: whether the
    /// finish can skip the general steps, and which way. Both need the procedure executing, no
    /// `produce(_:)` under way, no event being delivered, no listener on the queue, nobody
    /// listening to did execute or will finish (observer or hook) and no observer with an event
    /// queue: then nothing is told between finishing and finished, and the base finish step
    /// follows in the same critical section (what `finishCollecting` does for its
    /// `finishInStep`). Without conditions, observers, ``MutuallyExclusive`` categories or a
    /// did-finish hook there is nothing to do after that step either (`.plain`); otherwise did
    /// finish and the release follow (`.inStep`). If not `nil`, the procedure is now finishing and
    /// the caller records its result and goes on in the same critical section; if `nil`, nothing
    /// changed.
    @inline(__always)
    func beginQuickFinishLocked() -> QuickFinish? {
        guard procedureLifecycle.state == .executing, !produceProgress.isAdding, !eventDelivery.isDelivering,
            observedEvents.union(hookEvents).isDisjoint(with: [.didExecute, .willFinish]),
            !hasEventQueueObservers.load(ordering: .relaxed)
        else { return nil }
        // (Through the unretained reference, as in `finishCollecting`: the queue is alive.)
        if let queue = queueReference, queue._withUnsafeGuaranteedRef({ $0.hasListeners.load(ordering: .acquiring) }) {
            return nil
        }
        _ = procedureLifecycle.finish()
        // Nobody listens to did execute: it counts as told (`emitDidExecuteOnce` does nothing).
        didExecuteTold.store(true, ordering: .releasing)
        return finishesPlainlyLocked() ? .plain : .inStep
    }

    /// Under `lock`, in a quick finish (nothing is told before the base finish step): whether
    /// nothing is left to do after that step either — no condition, observer or
    /// ``MutuallyExclusive`` category, no did-finish hook. If so, marks the procedure so that
    /// the base finish step takes nothing for did finish (see `willBecomeFinishedLocked`): there
    /// is nothing to let go of, and the counts are 0 already.
    @inline(__always)
    private func finishesPlainlyLocked() -> Bool {
        guard observerTotal == 0, conditionTotal == 0, conditionExtras == nil, observedEvents.isEmpty,
            !hookEvents.contains(.didFinish), exclusivity == .none
        else { return false }
        flags.insert(.finishTaken)
        return true
    }

    /// Under `lock`, in a finish without executing, once the lifecycle has moved to finishing:
    /// whether will finish would be skipped and the rest of the finish follow at once — nobody
    /// listens to will finish (observer or hook), no event is being delivered, no observer has an
    /// event queue and the queue has no listener (what `finishWithoutExecuting` and
    /// `run(.finishWithoutExecuting)` find out one by one) — and then which way (see
    /// ``QuickFinish``). `nil`: nothing changed.
    @inline(__always)
    func quickFinishWithoutExecutingLocked(queue: ConcurrentOperationQueue?) -> QuickFinish? {
        guard !eventDelivery.isDelivering, !observedEvents.union(hookEvents).contains(.willFinish),
            !hasEventQueueObservers.load(ordering: .relaxed), !(queue?.hasListeners.load(ordering: .acquiring) ?? false)
        else { return nil }
        return finishesPlainlyLocked() ? .plain : .inStep
    }

    /// After ``quickFinishWithoutExecutingLocked(queue:)`` returned `quick`, still under `lock`:
    /// `finishedWithoutExecuting()` with the base finish step in this critical section (it lets
    /// go of the lock) — and for `.plain`, straight to the tail.
    @inline(never)
    func finishWithoutExecutingQuickly(_ quick: QuickFinish) {
        // (As in `finishQuicklyInStep()`.)
        let direct: DirectFinish? = if case .inStep = quick { takeDirectFinishBeforeStepLocked() } else { nil }
        let tail = finishKeepingTail(handOff: .lastStepOnWorker, holdsTail: true, lockHeld: true)
        didFinishWithoutExecuting()
        if let direct { didFinishInStep(direct) }
        if let held = consume tail { completeTail(held) }
    }

    /// After ``beginQuickFinishLocked()`` returned `.plain`, still under `lock`: the base
    /// operation's finish step in this critical section (it lets go of the lock), then its tail.
    /// The tail is held as for any procedure (waits that begin meanwhile wait for it). (Out of
    /// line, as the other two ways: the caller stays small, with a short prologue.)
    @inline(never)
    func finishPlainly(asLastStep: Bool) {
        guard let tail = finishKeepingTail(handOff: asLastStep ? .lastStepOnWorker : .tellQueue, holdsTail: true, lockHeld: true)
        else { return }
        completeTail(tail)
    }

    /// After ``beginQuickFinishLocked()`` returned `.inStep`, still under `lock`: the base
    /// operation's finish step in this critical section, then did finish and the rest. (Out of
    /// line, as ``finishPlainly(asLastStep:)``.)
    @inline(never)
    func finishQuicklyInStep() {
        // (As `finishExecuted(asLastStep: true, lockHeld: true)`, without its general steps: what
        // did finish needs taken in this critical section — nothing is being delivered, and none
        // can be raised any more — rather than by the base finish step's hook; did finish and the
        // release between the base finish step and the tail, as in `finishPlainly(asLastStep:)`.)
        let direct = takeDirectFinishBeforeStepLocked()
        let tail = finishKeepingTail(handOff: .lastStepOnWorker, holdsTail: true, lockHeld: true)
        didFinishInStep(direct)
        if let held = consume tail { completeTail(held) }
    }

    /// Under `lock`, in a quick finish that is not plain (``QuickFinish/inStep``), right before
    /// the base finish step in the same critical section: takes what did finish needs (as
    /// `willBecomeFinishedLocked` would), and marks the procedure so that the base step takes
    /// nothing more.
    @inline(__always)
    private func takeDirectFinishBeforeStepLocked() -> DirectFinish {
        flags.insert(.finishTaken)
        return takeDirectFinishLocked()
    }

    /// After the base finish step of a quick finish that is not plain (``QuickFinish/inStep``),
    /// without the lock: did finish and the release of the conditions and observers. What
    /// ``didComplete(then:)`` does before the tail, without looking for observers with an event
    /// queue to wait for: a quick finish has none.
    @inline(__always)
    private func didFinishInStep(_ direct: DirectFinish) {
        _ = tellDidFinishDirectly(direct, takingMailboxes: false)
    }

    /// Did execute (if not told yet) and will finish, queued together.
    struct FinishEvents {
        var didExecute: EventDisposition?
        var willFinish: EventDisposition
        var errors: [any Error]
    }

    /// Under `lock`, in the state `finishing`: queues did execute (if `executed` and not
    /// told yet) and will finish, whose delivery is followed by the rest of the finish.
    private func enqueueFinishEventsLocked(executed: Bool, asLastStep: Bool) -> FinishEvents {
        var didExecute: EventDisposition?
        if executed && !didExecuteTold.load(ordering: .relaxed) {
            didExecuteTold.store(true, ordering: .releasing)
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
    func completeFinish(executed: Bool, queue: ConcurrentOperationQueue?? = nil, asLastStep: Bool = false) {
        (queue ?? lock.withLock { self.queue })?.notifyDelegate(willFinish: self)
        let events = lock.withLock { enqueueFinishEventsLocked(executed: executed, asLastStep: asLastStep) }
        deliver(events, asLastStep: asLastStep)
    }

    /// The rest of a finish after will finish was delivered. `lockHeld`: the caller holds
    /// `lock`, which the base operation's finish step lets go of.
    func finishExecuted(asLastStep: Bool, lockHeld: Bool = false) {
        let tail = finishKeepingTail(handOff: asLastStep ? .lastStepOnWorker : .tellQueue, holdsTail: true, lockHeld: lockHeld)
        didComplete(then: consume tail)
    }

    /// The rest of a finish without executing, after will finish was delivered.
    func finishedWithoutExecuting() {
        // ConcurrentOperation's finish without executing, its tail held for after did finish.
        let tail = finishKeepingTail(handOff: .lastStepOnWorker, holdsTail: true)
        didFinishWithoutExecuting()
        didComplete(then: consume tail)
    }

    /// What the base operation's finish step took for did finish when nothing was being
    /// delivered (see `willBecomeFinishedLocked`); read right after by `didComplete`, on the
    /// same thread.
    /// (The errors are read from `_errors`: they no longer change once the procedure finished.)
    struct DirectFinish {
        var exclusive: Bool
        var tellHooksAndObservers: Bool
        var hasObservers: Bool
        /// Whether there is anything for `releaseUnlocked` to let go of (a procedure without
        /// conditions or observers skips it).
        var holdsConditionsOrObservers = true
    }

    /// A `DirectFinish?` as `finishedDirectly` stores it: one byte (the optional struct of four
    /// `Bool`s is four).
    struct DirectFinishSlot {
        /// 0: none; otherwise bit 0 set and the four facts in bits 1 to 4.
        private var bits: UInt8 = 0

        init() {}

        init(_ direct: DirectFinish?) {
            guard let direct else { return }
            bits = 1 | (direct.exclusive ? 2 : 0) | (direct.tellHooksAndObservers ? 4 : 0)
                | (direct.hasObservers ? 8 : 0) | (direct.holdsConditionsOrObservers ? 16 : 0)
        }

        /// The finish stored, if any, leaving none.
        mutating func take() -> DirectFinish? {
            guard bits != 0 else { return nil }
            defer { bits = 0 }
            return DirectFinish(
                exclusive: bits & 2 != 0, tellHooksAndObservers: bits & 4 != 0, hasObservers: bits & 8 != 0,
                holdsConditionsOrObservers: bits & 16 != 0)
        }
    }

    /// After the base operation finished: releases mutual exclusivity, tells did finish, and lets
    /// go of conditions and observers (an observer may hold the procedure), without the lock;
    /// then completes `tail` — the queue lets go of the procedure, waiters are resumed — so that
    /// no wait returns before the did-finish observers have. If another event is being delivered,
    /// did finish and the tail are left to the thread delivering.
    private func didComplete(then tail: consuming FinishTail?) {
        if let direct = finishedDirectly.take() {
            completeDirectly(direct, then: tail)
        } else {
            didCompleteWhileDelivering(then: tail)
        }
    }

    /// ``didComplete(then:)`` when another event is being delivered (by this thread further up,
    /// or another): did finish waits its turn, and the thread delivering lets go of the
    /// observers. (Out of line, so that the usual path moves its tail instead of capturing it.)
    @inline(never)
    private func didCompleteWhileDelivering(then tail: consuming FinishTail?) {
        let pending = (consume tail).map { PendingTail($0) }
        var queued: EventDisposition?
        var after = AfterDelivery.nothing
        var hasObservers = false
        var tell = false
        let (exclusive, errors) = lock.withLock { () -> (Bool, [any Error]) in
            let exclusive = exclusivity.release()
            if eventDelivery.releaseAfterDelivery() {
                if let pending { after = .completeTail(pending) }
                queued = enqueueEventLocked(.didFinish(_errors), then: after, handOffThen: true)
            } else {
                tell = observedEvents.union(hookEvents).contains(.didFinish)
                hasObservers = markReleasedLocked() > 0
            }
            return (exclusive, _errors)
        }
        if let queued {
            if exclusive { ExclusivityController.release(ObjectIdentifier(self)) }
            // Queued: the thread delivering tells did finish, then completes the tail.
            handle(queued, delivering: .didFinish(errors), then: after)
            return
        }
        completeDirectly(
            DirectFinish(exclusive: exclusive, tellHooksAndObservers: tell, hasObservers: hasObservers), then: pending?.tail)
    }

    /// The rest of ``didComplete(then:)`` once no event is being delivered.
    private func completeDirectly(_ direct: DirectFinish, then tail: consuming FinishTail?) {
        // Observers with an event queue were posted did finish: the tail waits for them.
        let mailboxes = tellDidFinishDirectly(direct, takingMailboxes: true)
        // Moved, not copied: a copy of the tail (two operation lists, the waiters) costs retains
        // and releases, and destroying the original goes through value witnesses.
        guard let held = consume tail else { return }
        if mailboxes.isEmpty {
            completeTail(held)
        } else {
            // (Touched by one thread at a time: this one, then the one running the continuation.)
            let pending = UncheckedSendable(PendingTail(held))
            EventMailboxes.after(mailboxes) { [self] in completeTail(pending.value.tail) }
        }
    }

    /// Releases mutual exclusivity, tells did finish, and lets go of conditions and observers,
    /// once no event is being delivered (see ``completeDirectly(_:then:)``). With
    /// `takingMailboxes`, returns the mailboxes of the observers with an event queue, which
    /// were posted did finish (read before the observers are let go of).
    @inline(__always)
    private func tellDidFinishDirectly(_ direct: DirectFinish, takingMailboxes: Bool) -> [EventMailbox] {
        if direct.exclusive { ExclusivityController.release(ObjectIdentifier(self)) }
        // No event can come after did finish, and none is being delivered: the observers are
        // this thread's now (see `markReleasedLocked`).
        if direct.tellHooksAndObservers {
            // Finished: the errors no longer change (every write to them checks the state first).
            // None, the usual case: the empty array literal (the runtime's empty array storage,
            // loaded without a retain and without the `swift_once` a global `let` costs).
            if let errors = errorList {
                tellDidFinish(errors, hasObservers: direct.hasObservers)
            } else {
                tellDidFinish([], hasObservers: direct.hasObservers)
            }
        }
        let mailboxes = takingMailboxes && direct.hasObservers ? eventMailboxes() : []
        if direct.holdsConditionsOrObservers { releaseUnlocked() }
        return mailboxes
    }

    /// The did-finish part of ``tellDidFinishDirectly(_:takingMailboxes:)``: the hook, then the
    /// observers.
    @inline(__always)
    private func tellDidFinish(_ errors: borrowing [any Error], hasObservers: Bool) {
        let errors = copy errors
        // (Not when the class's hook is the default, which does nothing: a class of this module
        // that overrides no hook. `hookEvents` is set once, in `init`.)
        if hookEvents.contains(.didFinish) { procedureDidFinish(with: errors) }
        guard hasObservers else { return }
        // Moved out rather than copied (a retain and a release fewer): nothing else reads it any
        // more, and `releaseUnlocked` would let go of it anyway.
        switch firstObserver.take() {
        case .none: break
        case .closure(let observer): tellDidFinish(observer, errors)
        case .boxed(let box): tellDidFinish(box.observer, errors)
        }
        if let more = conditionExtras?.moreObservers { for observer in more { tellDidFinish(observer, errors) } }
    }

    /// A finish's tail, held by a queued did finish for the thread delivering it (see
    /// `didComplete`; boxed: the rare case costs an allocation, not a field in every procedure).
    final class PendingTail {
        let tail: FinishTail
        init(_ tail: FinishTail) { self.tail = tail }
    }

    private func tellDidFinish<Observer: OperationObserver>(_ observer: Observer, _ errors: [any Error]) {
        if observer.observedEvents.contains(.didFinish) { observer.didFinish(self, with: errors) }
    }

    /// Under `lock`, once the procedure is finishing (its did finish is next) and no event is
    /// being delivered or can be raised any more: what did finish needs, taken for the calling
    /// thread (see ``markReleasedLocked()``).
    @inline(__always)
    func takeDirectFinishLocked() -> DirectFinish {
        // (Read before `markReleasedLocked` zeroes the counts.)
        let holdsConditionsOrObservers = conditionTotal != 0 || observerTotal != 0 || conditionExtras != nil
        return DirectFinish(
            exclusive: exclusivity.release(), tellHooksAndObservers: observedEvents.union(hookEvents).contains(.didFinish),
            hasObservers: markReleasedLocked() > 0, holdsConditionsOrObservers: holdsConditionsOrObservers)
    }

    /// Under `lock`, once the procedure has finished and no event is being delivered or
    /// can be raised any more: from here on nothing but the calling thread touches the
    /// conditions, observers and produced dependencies (the counts read 0, every path that would
    /// read them checks the state first), which it then lets go of with ``releaseUnlocked()``.
    /// Returns the number of observers there were.
    func markReleasedLocked() -> Int {
        let observers = Int(observerTotal)
        conditionTotal = 0
        observerTotal = 0
        observedEvents = []
        // Only an evaluation object or an answer holds anything, and an answer is forgotten (the
        // usual single condition's progress holds nothing, and a late call finds nothing to act
        // on either way: see `ConditionProgress.startedOne`).
        switch conditionProgress {
        case .several, .oneSatisfiedWhileStarting, .oneIgnoredWhileStarting, .oneFailedWhileStarting:
            conditionProgress = .none
        case .oneLent:
            // A worker still asks the condition lent by `firstCondition` (cancelled meanwhile, and
            // finished by another worker): moved out for that worker to let go of once done.
            // (Moved, not released: this is not its last reference.)
            if case .closure(let condition) = firstCondition { conditionProgress = .oneLentAfterFinish(condition) }
            firstCondition = .none
        case .none, .oneStarting, .oneStarted, .decided, .oneLentAfterFinish: break
        }
        return observers
    }

    /// After ``markReleasedLocked()``, without the lock: lets go of the conditions, observers and
    /// produced dependencies (their deinitialisers may run here).
    @inline(__always)
    func releaseUnlocked() {
        firstCondition = .none
        // (Usually taken already, to be told did finish.)
        if case .none = firstObserver {} else { firstObserver = .none }
        // (Fired already, when it was taken or cancelled; this is only a safety net.)
        let signal = conditionExtras?.takenSignal
        conditionExtras = nil
        signal?.fire()
    }
}
