// Conditions: adding them, the dependencies they produce, their evaluation — each condition as
// soon as the procedure's dependencies and its own produced dependency have finished, in the
// order they were added, until the first failure — and mutual exclusivity.
//
// A condition that may produce a dependency (any but a `ClosureCondition`) has a `ConditionGate`:
// closed until its produced dependencies are made and have finished. The procedure does not
// depend on the produced dependencies (it would then wait for all of them before any condition
// could fail): a queue worker takes it once its own dependencies have finished, and an evaluation
// (`ConditionEvaluation`) starts each condition whose gate is open, in the order the conditions
// were added, without waiting for earlier answers, and none once decided. A gate that opens later
// (the produced dependency finished, on whatever thread finished it) resumes the evaluation on
// that thread.
//
// A produced dependency made before a worker has taken the procedure waits for that
// (`ProcedureTakenSignal`): otherwise it could reach the ready list first and, if only a cancel
// ends it, hold the slot the procedure needs to evaluate the condition that would cancel it.
extension ProcedureOperation {
    /// Adds a condition, evaluated once the procedure's dependencies — and the dependency the
    /// condition produces, if any — have finished.
    ///
    /// The condition's dependency, if it makes one (``OperationCondition/dependency(for:)``), is
    /// made and added to the procedure's queue when the procedure is added — at once if the
    /// procedure is in a queue already. It runs once a worker of the queue has taken the
    /// procedure to evaluate its conditions, so after the procedure's own dependencies; until
    /// then it waits for an internal operation named after the procedure, which you see among
    /// its ``ConcurrentOperation/dependencies``. (Were it to run first, work that only a cancel
    /// ends could take every slot of the queue, and the condition that fails and cancels it would
    /// never be evaluated.) The condition is evaluated only after that dependency has finished,
    /// also when this call races with the queue adding the procedure or a worker taking it: the
    /// call either takes full effect or throws.
    ///
    /// A procedure with conditions runs only on a queue: ``ConcurrentOperation/start()`` by hand
    /// throws ``OperationError/Code-swift.struct/requiresQueue``.
    ///
    /// A condition the same as one added before (the same ``OperationCondition/identity``) is
    /// not added again: it is evaluated once, its dependency made once, and
    /// ``conditionCount`` does not change. The condition's own
    /// ``OperationCondition/dependencies`` are asked here, once.
    ///
    /// - Parameter condition: The condition to add.
    /// - Throws: ``OperationError/Code-swift.struct/tooLateToAddCondition`` once evaluation has
    ///   begun (or the procedure has started or finished). The condition was then not added, and
    ///   its dependency not made. ``OperationError/Code-swift.struct/selfDependency`` if the
    ///   condition's own dependencies include this procedure (it would wait for itself).
    public func addCondition(_ condition: any OperationCondition) throws(OperationError) {
        try addCondition(condition, first: false)
    }

    /// Adds a condition; with `first`, before every condition that is not itself `first` (result
    /// injection runs before the conditions that may read the injected value).
    func addCondition(_ condition: any OperationCondition, first: Bool) throws(OperationError) {
        // Asked without the lock (user code): the identity, and for a condition that may wait
        // (any but a ClosureCondition without dependencies) its own dependencies.
        let (identity, gated) = ConditionIdentities.classify(condition)
        let waitsFor = gated ? condition.dependencies : []
        if waitsFor.contains(where: { $0 === self }) {
            throw OperationError(
                .selfDependency, operations: [displayName],
                "the condition \(condition.name) lists the procedure among its own dependencies")
        }
        let (accepted, state, makeNow) = lock.withLock {
            () -> (Bool, ProcedureState, (ConditionGate, ConcurrentOperationQueue)?) in
            guard procedureLifecycle.acceptsConditions && lifecycle.isReady else {
                return (false, procedureLifecycle.state, nil)
            }
            // The same condition again: kept once.
            if let identity, conditionTotal > 0, hasConditionLocked(identity) {
                return (true, procedureLifecycle.state, nil)
            }
            let gate = storeConditionLocked(condition, first: first, identity: identity, waitsFor: gated ? waitsFor : nil)
            // Already claimed by a queue: this thread makes the dependency now. (Not claimed yet:
            // the queue's add makes it, or — if this raced past the add's look at the conditions —
            // the worker that takes the procedure does, before evaluating: the closed gate holds
            // the condition back until then.)
            guard let gate, flags.contains(.conditionDependenciesMade), !procedureLifecycle.isCancelled, let queue = self.queue else {
                return (true, procedureLifecycle.state, nil)
            }
            gate.beginMaking()
            return (true, procedureLifecycle.state, (gate, queue))
        }
        guard accepted else {
            throw OperationError(
                .tooLateToAddCondition, operations: [displayName], "conditions are already evaluated (state \(state))")
        }
        if let (gate, queue) = makeNow {
            let produced = ProducedDependencies.of(condition, for: self)
            holdBackUntilTaken(produced)
            addProduced(produced, to: queue)
            finishMaking(gate, produced)
        }
    }

    /// In the initialiser, before the procedure is shared (so without the lock): stores the
    /// conditions given to it, in order, as ``addCondition(_:)`` would — a condition the same as
    /// one before it is kept once, its own dependencies are asked here, once, and the dependency
    /// it may produce is made when the procedure is added to a queue. Nothing can be refused: the
    /// procedure is initialized, and a condition's own dependencies cannot include a procedure
    /// that did not exist when the condition was made.
    func storeConditionsAtInit(_ conditions: borrowing [any OperationCondition]) {
        for index in conditions.indices {
            let condition = conditions[index]
            let (identity, gated) = ConditionIdentities.classify(condition)
            if let identity, conditionTotal > 0, hasConditionLocked(identity) { continue }
            _ = storeConditionLocked(condition, first: false, identity: identity, waitsFor: gated ? condition.dependencies : nil)
        }
    }

    /// Adds produced dependencies to the procedure's queue, one by one (one the queue refuses —
    /// in a queue already, or finished — does not keep the others out).
    func addProduced(_ produced: [ConcurrentOperation], to queue: ConcurrentOperationQueue) {
        for dependency in produced { try? queue.addPrerequisite(dependency) }
    }

    /// Makes produced dependencies wait until a worker has taken the procedure (after its own
    /// dependencies have finished) or it was cancelled — unless that has happened already.
    private func holdBackUntilTaken(_ produced: [ConcurrentOperation]) {
        guard !produced.isEmpty else { return }
        // (Read before the lock: the name is read under it.)
        let name = displayName
        let signal = lock.withLock { () -> ProcedureTakenSignal? in
            guard procedureLifecycle.state == .pending, !procedureLifecycle.isCancelled else { return nil }
            if let signal = conditionExtras?.takenSignal { return signal }
            let signal = ProcedureTakenSignal(for: name)
            extrasLocked.takenSignal = signal
            return signal
        }
        // (One that cannot take a dependency — it has started or finished — is not held back.)
        if let signal { for dependency in produced { try? dependency.addDependency(signal) } }
    }

    /// Under `lock`: the signal the produced dependencies wait for, taken to be fired
    /// (without the lock) because the procedure was taken or cancelled.
    func takeTakenSignalLocked() -> ProcedureTakenSignal? {
        guard let extras = conditionExtras, let signal = extras.takenSignal else { return nil }
        extras.takenSignal = nil
        return signal
    }

    /// The number of conditions added, result injections (``ResultConsuming/injectResult(from:_:)``)
    /// included; 0 again once the procedure has finished and let them go: by the time did finish
    /// is told to its hook and observers, and before any wait for the finish returns.
    public var conditionCount: Int { lock.withLock { Int(conditionTotal) } }

    /// Under `lock`: every condition, in evaluation order.
    var conditionsLocked: [any OperationCondition] {
        conditionTotal == 0 ? [] : [firstCondition.condition] + (conditionExtras?.moreConditions ?? [])
    }

    /// Under `lock`: whether a condition with this identity was added.
    private func hasConditionLocked(_ identity: ConditionIdentity) -> Bool {
        firstCondition.identity == identity || (conditionExtras?.identities.contains(identity) ?? false)
    }

    /// Under `lock`: stores a condition — inline if it is the first — before the
    /// non-`first` ones if `first`. Returns its gate if it may produce a dependency or waits for
    /// its own (`waitsFor` not `nil`).
    private func storeConditionLocked(
        _ condition: any OperationCondition, first: Bool, identity: ConditionIdentity?, waitsFor: [ConcurrentOperation]?
    ) -> ConditionGate? {
        defer { conditionTotal += 1 }
        // (Only written under the lock: a load and a store, not a read-modify-write.)
        let kinds = ConditionKinds.any | (waitsFor != nil ? ConditionKinds.mayProduceDependencies : 0)
        let known = conditionKinds.load(ordering: .relaxed)
        if known | kinds != known { conditionKinds.store(known | kinds, ordering: .releasing) }
        var gate: ConditionGate?
        if let waitsFor {
            gate = ConditionGate(waitsFor: waitsFor)
            // The gates run parallel to the conditions once there is one.
            if conditionGates.isEmpty { conditionGates = Array(repeating: nil, count: Int(conditionTotal)) }
        }
        let index = first ? (conditionExtras?.injectionConditionCount ?? 0) : Int(conditionTotal)
        if gate != nil || hasGatesLocked { conditionGates.insert(gate, at: index) }
        if first { extrasLocked.injectionConditionCount += 1 }
        if conditionTotal == 0 {
            firstCondition = FirstCondition(condition, identity: identity)
            return gate
        }
        if index == 0 {
            extrasLocked.moreConditions.insert(firstCondition.condition, at: 0)
            if let displaced = firstCondition.identity { extrasLocked.identities.insert(displaced) }
            firstCondition = FirstCondition(condition, identity: identity)
        } else {
            extrasLocked.moreConditions.insert(condition, at: index - 1)
            if let identity { extrasLocked.identities.insert(identity) }
        }
        return gate
    }

    /// Under `lock`: the conditions whose dependencies nobody has begun to make, their
    /// gates now marked as being made by the caller.
    func takeUnmadeLocked() -> [(ConditionGate, any OperationCondition)] {
        guard hasGatesLocked else { return [] }
        var taken: [(ConditionGate, any OperationCondition)] = []
        for (index, gate) in conditionGates.enumerated() {
            guard let gate, !gate.isMade else { continue }
            gate.beginMaking()
            taken.append((gate, index == 0 ? firstCondition.condition : conditionExtras!.moreConditions[index - 1]))
        }
        return taken
    }

    /// Without the lock, after the gate's `beginMaking()`: counts `produced` and the condition's
    /// own dependencies on the gate, which opens once they have all finished, and remembers the
    /// produced ones (a cancel cancels them; not the condition's own).
    func finishMaking(_ gate: ConditionGate, _ produced: [ConcurrentOperation]) {
        let cancelled = lock.withLock { () -> Bool in
            gate.remaining += produced.count + gate.waitsFor.count
            // Finished meanwhile (cancelled): it has let go of its produced dependencies.
            if procedureLifecycle.state == .finished { return true }
            if !produced.isEmpty { rememberProducedLocked(produced) }
            return procedureLifecycle.isCancelled
        }
        for dependency in produced + gate.waitsFor {
            let registered = dependency.lock.withLock {
                dependency.addWaiter(.callback { [self] in producedDependencyFinished(gate) })
            }
            if !registered { producedDependencyFinished(gate) }
        }
        // Cancelled meanwhile (its cancel may not have seen these): cancel them too.
        if cancelled { for dependency in produced where !dependency.isFinished { dependency.cancel() } }
        // The making itself is done.
        producedDependencyFinished(gate)
    }

    /// One produced dependency of `gate` finished (or its making is done). If that opened the gate
    /// while the conditions are being evaluated and nobody is driving the evaluation, drive it.
    private func producedDependencyFinished(_ gate: ConditionGate) {
        let evaluation = lock.withLock { () -> ConditionEvaluation? in
            gate.remaining -= 1
            // (The state first: once finished, the procedure's condition fields are no longer read.)
            guard gate.remaining == 0, procedureLifecycle.state == .evaluatingConditions,
                  let evaluation = conditionEvaluation, evaluation.mayResume
            else { return nil }
            evaluation.driving = true
            return evaluation
        }
        if let evaluation { drive(evaluation, onWorker: false) }
    }

    /// The dependencies the conditions produce, made once, when the queue adds the procedure.
    func conditionDependenciesToEnqueue(in queue: ConcurrentOperationQueue) -> [ConcurrentOperation] {
        // Only ClosureConditions (which make none): nothing to ask. (A condition that may make one,
        // added on another thread meanwhile, is made by that thread, or left for the worker: see
        // `addCondition`.)
        guard conditionKinds.load(ordering: .acquiring) & ConditionKinds.mayProduceDependencies != 0 else { return [] }
        let taken = lock.withLock { () -> [(ConditionGate, any OperationCondition)] in
            // Called once `queue` has claimed the procedure (an add that is refused makes nothing).
            guard conditionTotal > 0, procedureLifecycle.state == .pending,
                  queueReference?.toOpaque() == Unmanaged.passUnretained(queue).toOpaque(),
                  !procedureLifecycle.isCancelled
            else { return [] }
            return takeUnmadeLocked()
        }
        guard !taken.isEmpty else { return [] }
        // Usually no condition produces anything: no array is built then.
        var all: [ConcurrentOperation] = []
        for (gate, condition) in taken {
            let produced = ProducedDependencies.of(condition, for: self)
            if !produced.isEmpty {
                // Produced dependencies run after the procedure's own dependencies (ProcedureKit's
                // order) — once a worker has taken the procedure.
                holdBackUntilTaken(produced)
                all.append(contentsOf: produced)
            }
            finishMaking(gate, produced)
        }
        return all
    }
}

/// The bits of `ProcedureOperation.conditionKinds`.
enum ConditionKinds {
    /// A condition was added.
    static let any: UInt8 = 1 << 0
    /// A condition that may make a dependency, or waits for its own dependencies, was added.
    static let mayProduceDependencies: UInt8 = 1 << 1
}
