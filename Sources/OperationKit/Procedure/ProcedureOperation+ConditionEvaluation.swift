// ProcedureOperation: evaluating its conditions on the worker that took it — one, or several
// driven as their gates open — and what follows their decision (mutual exclusivity, cancel).

extension ProcedureOperation {
    /// On the worker that took the procedure: evaluates its conditions if it has any and has not
    /// yet. Returns whether it goes on to start now, and whether the start step records the
    /// conditions' answer (see `evaluateOne`). `instrumented`: whether the worker tells an
    /// instrument of this run.
    func prepareConditions(queue: ConcurrentOperationQueue, instrumented: Bool) -> RunPreparation {
        enum Taken {
            case proceed
            /// The single condition, copied out under the lock.
            case one(FirstCondition)
            case several
        }
        var signal: ProcedureTakenSignal?
        let taken = lock.withLock { () -> Taken in
            switch procedureLifecycle.dependenciesFinished(hasConditions: conditionTotal > 0) {
            case .proceed:
                return .proceed
            case .evaluateConditions:
                // Taken: the produced dependencies may run now.
                if conditionExtras != nil { signal = takeTakenSignalLocked() }
                // The usual case: one condition, with nothing to wait for.
                if conditionTotal == 1 && (conditionExtras == nil || firstGateIsOpenLocked()) {
                    conditionProgress.beginOne()
                    return .one(firstCondition)
                }
                return .several
            }
        }
        signal?.fire()
        // (Consumed, not copied again: the copy made under the lock is the only retain.)
        switch consume taken {
        case .proceed:
            return .start
        case .one(let single):
            // A ``ClosureCondition`` (the usual one) is asked without an existential.
            switch consume single {
            case .closure(let condition): return evaluateOne(condition, queue: queue, instrumented: instrumented)
            case .boxed(let box): return evaluateOne(box.condition, queue: queue, instrumented: instrumented)
            case .none: return evaluateOne(NoCondition(), queue: queue, instrumented: instrumented)
            }
        case .several:
            return evaluateSeveral(queue: queue) ? .start : .putBack
        }
    }

    /// ``prepareConditions(queue:instrumented:)`` for the usual procedure with conditions, on a
    /// run without an instrument: one ``ClosureCondition`` without dependencies (all that
    /// `conditionKinds` said when read without the lock). Moves the procedure to evaluating its
    /// conditions in one short critical section, then asks the condition (anything else, found
    /// under the lock, goes the general way).
    ///
    /// The condition is asked through `firstCondition`, lent without a retain
    /// (`ConditionProgress.oneLent`): the procedure keeps it until the lend ends in this worker's
    /// next critical section — the start step's `conditionsSatisfiedLocked`, or
    /// `lentConditionDecided` — and a finish meanwhile (a cancel puts the procedure back in its
    /// queue, where another worker may finish it) moves it to this worker, which lets go of it
    /// once done (`startRefusedAfterConditions`). So the condition, shared by every procedure of
    /// a batch as often as not, is not retained and released once more by every worker.
    func prepareSingleClosureCondition(queue: ConcurrentOperationQueue) -> RunPreparation {
        lock.lock()
        guard conditionTotal == 1, conditionExtras == nil, firstCondition.isClosure else {
            lock.unlock()
            return prepareConditions(queue: queue, instrumented: false)
        }
        // (Cancelled: past its dependencies without evaluating.)
        guard procedureLifecycle.dependenciesFinished(hasConditions: true) == .evaluateConditions else {
            lock.unlock()
            return .start
        }
        conditionProgress.beginLent()
        // (Read last, with nothing in between that could let go of it: no retain.)
        let storage = firstCondition.unretainedClosureStorage.unsafelyUnwrapped
        lock.unlock()
        // (As `evaluateOne`: a closure condition requests no category; satisfied, the answer is
        // recorded in the start step, which also ends the lend.)
        let result = ClosureCondition.decide(lent: storage, for: self)
        if case .satisfied = result { return .startSatisfyingConditions }
        return lentConditionDecided(result, queue: queue)
    }

    /// The lent condition of ``prepareSingleClosureCondition(queue:)`` answered other than
    /// satisfied: ends the lend, taking a copy of the condition (for an instrument's names), and
    /// acts on the decision as ``evaluateOne`` does. (Out of line: rare.)
    @inline(never)
    private func lentConditionDecided(_ result: ConditionResult, queue: ConcurrentOperationQueue) -> RunPreparation {
        let (condition, movedOut) = lock.withLock { () -> (ClosureCondition?, ClosureCondition?) in
            if let movedOut = conditionProgress.takeLentAfterFinish() { return (nil, movedOut) }
            conditionProgress.endLend()
            if case .closure(let condition) = firstCondition { return (condition, nil) }
            return (nil, nil)
        }
        // Finished meanwhile (cancelled, put back in its queue and finished by another worker):
        // the condition is this worker's to let go of, here, without the lock.
        guard let condition else {
            withExtendedLifetime(movedOut) {}
            return .putBack
        }
        return conditionsDecided(result, categories: [], queue: queue, onWorker: true) {
            [(condition.name, result)]
        } ? .start : .putBack
    }

    /// On the worker that moved the procedure to evaluating its conditions (no condition can be
    /// added from then on): begins the evaluation, makes the dependencies nobody made yet, then
    /// drives it. (Out of line: `prepareConditions` stays small for the usual case.)
    @inline(never)
    private func evaluateSeveral(queue: ConcurrentOperationQueue) -> Bool {
        let evaluation = lock.withLock { () -> ConditionEvaluation? in
            // Cancelled since (the cancel put it back in its queue): nothing to evaluate.
            guard procedureLifecycle.state == .evaluatingConditions else { return nil }
            return beginEvaluationLocked()
        }
        guard let evaluation else { return false }
        // Only this thread touches `unmade` (taken in the same critical section).
        let unmade = evaluation.unmade
        evaluation.unmade = []
        for (gate, condition) in unmade {
            let produced = ProducedDependencies.of(condition, for: self)
            addProduced(produced, to: queue)
            finishMaking(gate, produced)
        }
        return drive(evaluation, onWorker: true)
    }

    /// Under `lock`: whether the first condition has no gate, or an open one.
    @inline(never)
    private func firstGateIsOpenLocked() -> Bool {
        !hasGatesLocked || conditionGates[0]?.isOpen != false
    }

    /// Under `lock`, on the worker: the evaluation of several conditions (or of one behind
    /// a closed gate), driven by this worker. Kept out of `prepareConditions`'s critical section,
    /// which stays small enough to be inlined for the usual single condition.
    @inline(never)
    private func beginEvaluationLocked() -> ConditionEvaluation {
        let evaluation = ConditionEvaluation(
            conditions: conditionsLocked, gates: conditionGates,
            leadingCount: conditionExtras?.injectionConditionCount ?? 0)
        // A condition added while the queue added the procedure: its dependency is made by this
        // worker, before evaluation (its gate holds it back until that has finished).
        evaluation.unmade = takeUnmadeLocked()
        evaluation.driving = true
        conditionProgress = .several(evaluation)
        return evaluation
    }

    /// Drives an evaluation — the caller has set its `driving` flag — until it is decided or must
    /// wait (for asynchronous answers, or a gate): starts each condition whose gate is open, in
    /// the order they were added, without waiting for the answers of those started before; none
    /// once the evaluation is decided (a synchronous failure stops the conditions after it). A
    /// decision is acted on here. Returns whether the procedure goes on at once (only
    /// `onWorker`).
    @discardableResult
    func drive(_ evaluation: ConditionEvaluation, onWorker: Bool) -> Bool {
        enum Step {
            case start(Int, any OperationCondition)
            case decided(ConditionResult, ConcurrentOperationQueue?)
            case wait
        }
        while true {
            let step = lock.withLock { () -> Step in
                // Cancelled (the cancel abandoned the evaluation): nothing more is started.
                guard procedureLifecycle.state == .evaluatingConditions, conditionEvaluation === evaluation else {
                    evaluation.driving = false
                    return .wait
                }
                if let decision = evaluation.next() {
                    evaluation.driving = false
                    conditionProgress = .decided
                    return .decided(decision, queue)
                }
                if let index = evaluation.startNext() { return .start(index, evaluation.conditions[index]) }
                evaluation.driving = false
                return .wait
            }
            switch step {
            case .wait:
                return false
            case .decided(let result, let queue):
                guard let queue else { return false }
                let categories = evaluation.conditions.reduce(into: Set<String>()) {
                    $0.formUnion($1.mutuallyExclusiveCategories)
                }
                return conditionsDecided(result, categories: categories, queue: queue, onWorker: onWorker) {
                    evaluation.answers.map { (evaluation.conditions[$0.index].name, $0.result) }
                }
            case .start(let index, let condition):
                condition.evaluate(for: self) { [self] result in answered(evaluation, index, result) }
            }
        }
    }

    /// A condition of `evaluation` answered (its first answer counts; later ones, and answers
    /// after a cancel, are ignored). Drives the evaluation on if nobody is.
    private func answered(_ evaluation: ConditionEvaluation, _ index: Int, _ result: ConditionResult) {
        let drive = lock.withLock { () -> Bool in
            guard procedureLifecycle.state == .evaluatingConditions, conditionEvaluation === evaluation,
                  evaluation.record(result, from: index)
            else { return false }
            if evaluation.driving { return false }
            evaluation.driving = true
            return true
        }
        if drive { self.drive(evaluation, onWorker: false) }
    }

    /// One condition (the usual case): its evaluation state lives in the procedure, and the
    /// completion captures only the procedure — no evaluation object; a condition that answers
    /// synchronously (``ClosureCondition``) is asked directly, without a completion. Satisfied
    /// that way, with no category to request and no instrument to tell, the answer is recorded
    /// in the base operation's start step (`conditionsSatisfiedLocked`), not in a critical
    /// section of its own.
    private func evaluateOne<Condition: OperationCondition>(
        _ condition: Condition, queue: ConcurrentOperationQueue, instrumented: Bool
    ) -> RunPreparation {
        if let result = condition._evaluateImmediately(for: self) {
            let categories = condition.mutuallyExclusiveCategories
            if case .satisfied = result, !instrumented, categories.isEmpty { return .startSatisfyingConditions }
            return conditionsDecided(result, categories: categories, queue: queue, onWorker: true) {
                [(condition.name, result)]
            } ? .start : .putBack
        }
        condition.evaluate(for: self) { [self] result in singleConditionAnswered(result) }
        let decided = lock.withLock { conditionProgress.startedOne() }
        guard let decided else { return .putBack }
        return conditionsDecided(decided, categories: condition.mutuallyExclusiveCategories, queue: queue, onWorker: true) {
            [(condition.name, decided)]
        } ? .start : .putBack
    }

    private func singleConditionAnswered(_ result: ConditionResult) {
        let late = lock.withLock { () -> (any OperationCondition, ConcurrentOperationQueue)? in
            // A second completion of the condition is ignored; so is one after the procedure
            // stopped waiting (cancelled).
            guard procedureLifecycle.state == .evaluatingConditions, conditionProgress.answeredOne(result) == .decide,
                  conditionTotal > 0, let queue = self.queue
            else { return nil }
            return (firstCondition.condition, queue)
        }
        if let (condition, queue) = late {
            _ = conditionsDecided(result, categories: condition.mutuallyExclusiveCategories, queue: queue, onWorker: false) {
                [(condition.name, result)]
            }
        }
    }

    /// The conditions decided. Returns whether the procedure goes on at once (only `onWorker`);
    /// otherwise it is put back in its queue now or when its categories are granted.
    /// `evaluated` lists the conditions' names and answers, for an instrument.
    fileprivate func conditionsDecided(
        _ result: ConditionResult, categories: Set<String>, queue: ConcurrentOperationQueue, onWorker: Bool,
        evaluated: () -> [(name: String, result: ConditionResult)]
    ) -> Bool {
        let satisfied: Bool
        if case .satisfied = result { satisfied = true } else { satisfied = false }
        // `false`: cancelled meanwhile; `cancel` has already put it back in its queue.
        guard lock.withLock({ procedureLifecycle.conditionsEvaluated(satisfied: satisfied) }) else {
            return false
        }
        // Told before what follows the decision (the cancel of a failure, the start, the
        // request for categories), so in the procedure's lifecycle order.
        let instrument = queue.instrumentSlot.current
        if let instrument { tell(.conditionsEvaluated(evaluated()), queue: queue, to: instrument) }
        switch result {
        case .failed(let error):
            // Also cancels the produced dependencies still waiting or running.
            cancel(with: error)
        case .ignored:
            cancel(with: nil)
        case .satisfied:
            if !categories.isEmpty && !isCancelled {
                let owner = ObjectIdentifier(self)
                lock.withLock { exclusivity.request() }
                if let instrument { tell(.exclusivityWaiting(categories), queue: queue, to: instrument) }
                let granted = ExclusivityController.request(categories, for: self) {
                    self.lock.withLock { self.exclusivity.grant() }
                    if let instrument { self.tell(.exclusivityGranted(categories), queue: queue, to: instrument) }
                    queue.requeue(self)
                }
                if granted {
                    lock.withLock { exclusivity.grant() }
                    if let instrument { tell(.exclusivityGranted(categories), queue: queue, to: instrument) }
                } else {
                    // Cancelled while the request was being made: `cancel` found nothing to
                    // withdraw, so withdraw here (at most one of the two succeeds).
                    guard isCancelled && ExclusivityController.withdraw(owner) else { return false }
                }
            }
        }
        if onWorker { return true }
        queue.requeue(self)
        return false
    }
}
