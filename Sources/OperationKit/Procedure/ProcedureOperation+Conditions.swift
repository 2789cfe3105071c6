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
    /// - Parameter condition: The condition to add.
    /// - Throws: ``OperationError/Code-swift.struct/tooLateToAddCondition`` once evaluation has
    ///   begun (or the procedure has started or finished). The condition was then not added, and
    ///   its dependency not made.
    public func addCondition(_ condition: any OperationCondition) throws(OperationError) {
        try addCondition(condition, first: false)
    }

    /// Adds a condition; with `first`, before every condition that is not itself `first` (result
    /// injection runs before the conditions that may read the injected value).
    func addCondition(_ condition: any OperationCondition, first: Bool) throws(OperationError) {
        let (accepted, state, makeNow) = machine.lock.withLock {
            () -> (Bool, ProcedureState, (ConditionGate, ConcurrentOperationQueue)?) in
            guard procedureLifecycle.acceptsConditions && machine.lifecycle.isReady else {
                return (false, procedureLifecycle.state, nil)
            }
            let gate = storeConditionLocked(condition, first: first)
            // Already claimed by a queue: this thread makes the dependency now. (Not claimed yet:
            // the queue's add makes it, or — if this raced past the add's look at the conditions —
            // the worker that takes the procedure does, before evaluating: the closed gate holds
            // the condition back until then.)
            guard let gate, conditionDependenciesMade, !procedureLifecycle.isCancelled, let queue = self.queue else {
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

    /// Adds produced dependencies to the procedure's queue, one by one (one the queue refuses —
    /// in a queue already, or finished — does not keep the others out).
    private func addProduced(_ produced: [ConcurrentOperation], to queue: ConcurrentOperationQueue) {
        for dependency in produced { try? queue.addPrerequisite(dependency) }
    }

    /// Makes produced dependencies wait until a worker has taken the procedure (after its own
    /// dependencies have finished) or it was cancelled — unless that has happened already.
    private func holdBackUntilTaken(_ produced: [ConcurrentOperation]) {
        guard !produced.isEmpty else { return }
        // (Read before the lock: the name is read under it.)
        let name = displayName
        let signal = machine.lock.withLock { () -> ProcedureTakenSignal? in
            guard procedureLifecycle.state == .pending, !procedureLifecycle.isCancelled else { return nil }
            if let signal = conditionExtras?.takenSignal { return signal }
            let signal = ProcedureTakenSignal(for: name)
            extrasLocked.takenSignal = signal
            return signal
        }
        // (One that cannot take a dependency — it has started or finished — is not held back.)
        if let signal { for dependency in produced { try? dependency.addDependency(signal) } }
    }

    /// Under `machine.lock`: the signal the produced dependencies wait for, taken to be fired
    /// (without the lock) because the procedure was taken or cancelled.
    func takeTakenSignalLocked() -> ProcedureTakenSignal? {
        guard let extras = conditionExtras, let signal = extras.takenSignal else { return nil }
        extras.takenSignal = nil
        return signal
    }

    /// The number of conditions added, result injections (``ResultConsuming/injectResult(from:_:)``)
    /// included; 0 again once the procedure has finished and let them go.
    public var conditionCount: Int { machine.lock.withLock { conditionTotal } }

    /// Under `machine.lock`: every condition, in evaluation order.
    var conditionsLocked: [any OperationCondition] {
        conditionTotal == 0 ? [] : [firstCondition] + moreConditions
    }

    /// Under `machine.lock`: stores a condition — inline if it is the first — before the
    /// non-`first` ones if `first`. Returns its gate if it may produce a dependency.
    private func storeConditionLocked(_ condition: any OperationCondition, first: Bool) -> ConditionGate? {
        defer { conditionTotal += 1 }
        var gate: ConditionGate?
        if ObjectIdentifier(type(of: condition)) != ObjectIdentifier(ClosureCondition.self) {
            conditionsMayProduceDependencies.store(true, ordering: .releasing)
            gate = ConditionGate()
            // The gates run parallel to the conditions once there is one.
            if conditionGates.isEmpty { conditionGates = Array(repeating: nil, count: conditionTotal) }
        }
        let index = first ? injectionConditionCount : conditionTotal
        if gate != nil || hasGatesLocked { conditionGates.insert(gate, at: index) }
        if first { injectionConditionCount += 1 }
        if conditionTotal == 0 {
            firstCondition = condition
            return gate
        }
        var all = conditionsLocked
        all.insert(condition, at: index)
        firstCondition = all[0]
        moreConditions = Array(all.dropFirst())
        return gate
    }

    /// Under `machine.lock`: the conditions whose dependencies nobody has begun to make, their
    /// gates now marked as being made by the caller.
    private func takeUnmadeLocked() -> [(ConditionGate, any OperationCondition)] {
        guard hasGatesLocked else { return [] }
        var taken: [(ConditionGate, any OperationCondition)] = []
        for (index, gate) in conditionGates.enumerated() {
            guard let gate, !gate.isMade else { continue }
            gate.beginMaking()
            taken.append((gate, index == 0 ? firstCondition : moreConditions[index - 1]))
        }
        return taken
    }

    /// Without the lock, after the gate's `beginMaking()`: counts `produced` on the gate, which
    /// opens once they have all finished, and remembers them (a cancel cancels them).
    func finishMaking(_ gate: ConditionGate, _ produced: [ConcurrentOperation]) {
        let cancelled = machine.lock.withLock { () -> Bool in
            gate.remaining += produced.count
            // Finished meanwhile (cancelled): it has let go of its produced dependencies.
            if procedureLifecycle.state == .finished { return true }
            if !produced.isEmpty { rememberProducedLocked(produced) }
            return procedureLifecycle.isCancelled
        }
        for dependency in produced {
            let registered = dependency.machine.lock.withLock {
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
        let evaluation = machine.lock.withLock { () -> ConditionEvaluation? in
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
        guard conditionsMayProduceDependencies.load(ordering: .acquiring) else { return [] }
        let taken = machine.lock.withLock { () -> [(ConditionGate, any OperationCondition)] in
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

    /// On the worker that took the procedure: evaluates its conditions if it has any and has not
    /// yet. Returns whether it goes on to start now.
    func prepareConditions(queue: ConcurrentOperationQueue) -> Bool {
        enum Taken {
            case proceed
            case one
            case several
        }
        var single: any OperationCondition = NoCondition()
        var signal: ProcedureTakenSignal?
        let taken = machine.lock.withLock { () -> Taken in
            switch procedureLifecycle.dependenciesFinished(hasConditions: conditionTotal > 0) {
            case .proceed:
                return .proceed
            case .evaluateConditions:
                // Taken: the produced dependencies may run now.
                if conditionExtras != nil { signal = takeTakenSignalLocked() }
                // The usual case: one condition, with nothing to wait for.
                if conditionTotal == 1 && (conditionExtras == nil || firstGateIsOpenLocked()) {
                    singleEvaluationStarting = true
                    singleDecision = nil
                    single = firstCondition
                    return .one
                }
                return .several
            }
        }
        signal?.fire()
        switch taken {
        case .proceed:
            return true
        case .one:
            return evaluateOne(single, queue: queue)
        case .several:
            return evaluateSeveral(queue: queue)
        }
    }

    /// On the worker that moved the procedure to evaluating its conditions (no condition can be
    /// added from then on): begins the evaluation, makes the dependencies nobody made yet, then
    /// drives it. (Out of line: `prepareConditions` stays small for the usual case.)
    @inline(never)
    private func evaluateSeveral(queue: ConcurrentOperationQueue) -> Bool {
        let evaluation = machine.lock.withLock { () -> ConditionEvaluation? in
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

    /// Under `machine.lock`: whether the first condition has no gate, or an open one.
    @inline(never)
    private func firstGateIsOpenLocked() -> Bool {
        !hasGatesLocked || conditionGates[0]?.isOpen != false
    }

    /// Under `machine.lock`, on the worker: the evaluation of several conditions (or of one behind
    /// a closed gate), driven by this worker. Kept out of `prepareConditions`'s critical section,
    /// which stays small enough to be inlined for the usual single condition.
    @inline(never)
    private func beginEvaluationLocked() -> ConditionEvaluation {
        let evaluation = ConditionEvaluation(conditions: conditionsLocked, gates: conditionGates)
        // A condition added while the queue added the procedure: its dependency is made by this
        // worker, before evaluation (its gate holds it back until that has finished).
        evaluation.unmade = takeUnmadeLocked()
        evaluation.driving = true
        conditionEvaluation = evaluation
        return evaluation
    }

    /// Drives an evaluation — the caller has set its `driving` flag — until it is decided or must
    /// wait (for asynchronous answers, or a gate): starts each condition whose gate is open, in
    /// the order they were added, without waiting for the answers of those started before; none
    /// once the evaluation is decided (a synchronous failure stops the conditions after it). A
    /// decision is acted on here. Returns whether the procedure goes on at once (only
    /// `onWorker`).
    @discardableResult
    private func drive(_ evaluation: ConditionEvaluation, onWorker: Bool) -> Bool {
        enum Step {
            case start(Int, any OperationCondition)
            case decided(ConditionResult, ConcurrentOperationQueue?)
            case wait
        }
        while true {
            let step = machine.lock.withLock { () -> Step in
                // Cancelled (the cancel abandoned the evaluation): nothing more is started.
                guard procedureLifecycle.state == .evaluatingConditions, conditionEvaluation === evaluation else {
                    evaluation.driving = false
                    return .wait
                }
                if let decision = evaluation.next() {
                    evaluation.driving = false
                    conditionEvaluation = nil
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
                return conditionsDecided(result, categories: categories, queue: queue, onWorker: onWorker)
            case .start(let index, let condition):
                condition.evaluate(for: self) { [self] result in answered(evaluation, index, result) }
            }
        }
    }

    /// A condition of `evaluation` answered (its first answer counts; later ones, and answers
    /// after a cancel, are ignored). Drives the evaluation on if nobody is.
    private func answered(_ evaluation: ConditionEvaluation, _ index: Int, _ result: ConditionResult) {
        let drive = machine.lock.withLock { () -> Bool in
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
    /// synchronously (``ClosureCondition``) is asked directly, without a completion.
    private func evaluateOne(_ condition: any OperationCondition, queue: ConcurrentOperationQueue) -> Bool {
        if let result = condition._evaluateImmediately(for: self) {
            return conditionsDecided(result, categories: condition.mutuallyExclusiveCategories, queue: queue, onWorker: true)
        }
        condition.evaluate(for: self) { [self] result in singleConditionAnswered(result) }
        let decided = machine.lock.withLock { () -> ConditionResult? in
            singleEvaluationStarting = false
            return singleDecision
        }
        guard let decided else { return false }
        return conditionsDecided(decided, categories: condition.mutuallyExclusiveCategories, queue: queue, onWorker: true)
    }

    private func singleConditionAnswered(_ result: ConditionResult) {
        let late = machine.lock.withLock { () -> (any OperationCondition, ConcurrentOperationQueue)? in
            // A second completion of the condition is ignored; so is one after the procedure
            // stopped waiting (cancelled).
            guard singleDecision == nil, procedureLifecycle.state == .evaluatingConditions else { return nil }
            singleDecision = result
            guard !singleEvaluationStarting, conditionTotal > 0, let queue = self.queue else { return nil }
            return (firstCondition, queue)
        }
        if let (condition, queue) = late {
            _ = conditionsDecided(result, categories: condition.mutuallyExclusiveCategories, queue: queue, onWorker: false)
        }
    }

    /// The conditions decided. Returns whether the procedure goes on at once (only `onWorker`);
    /// otherwise it is put back in its queue now or when its categories are granted.
    fileprivate func conditionsDecided(
        _ result: ConditionResult, categories: Set<String>, queue: ConcurrentOperationQueue, onWorker: Bool
    ) -> Bool {
        let satisfied: Bool
        if case .satisfied = result { satisfied = true } else { satisfied = false }
        // `false`: cancelled meanwhile; `cancel` has already put it back in its queue.
        guard machine.lock.withLock({ procedureLifecycle.conditionsEvaluated(satisfied: satisfied) }) else {
            return false
        }
        switch result {
        case .failed(let error):
            // Also cancels the produced dependencies still waiting or running.
            cancel(with: error)
        case .ignored:
            cancel(with: nil)
        case .satisfied:
            if !categories.isEmpty && !isCancelled {
                let owner = ObjectIdentifier(self)
                machine.lock.withLock { exclusivityRequested = true }
                let granted = ExclusivityController.request(categories, for: self) {
                    self.machine.lock.withLock { self.holdsExclusivity = true }
                    queue.requeue(self)
                }
                if granted {
                    machine.lock.withLock { holdsExclusivity = true }
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

/// What a procedure keeps about its conditions beyond the usual single `ClosureCondition`, in
/// one object made when first needed (so that a procedure without it pays one pointer). Every
/// field is protected by the procedure's `machine.lock`.
final class ConditionExtras: @unchecked Sendable {
    /// Parallel to the conditions once one may produce a dependency (else empty): each such
    /// condition's gate, closed until its produced dependencies have finished.
    var gates: [ConditionGate?] = []
    /// The evaluation of several conditions (or of one behind a closed gate), while it runs.
    var evaluation: ConditionEvaluation?
    /// The operations the conditions produced, cancelled with the procedure.
    var produced: [ConcurrentOperation] = []
    /// What the dependencies produced before a worker took the procedure wait for.
    var takenSignal: ProcedureTakenSignal?
}

/// An operation in no queue that finishes when a worker has taken its procedure to evaluate the
/// conditions (its own dependencies have then finished), or when the procedure is cancelled or
/// finished. The dependencies its conditions produce before then wait for it: if they could run
/// first, one that only a cancel ends could take every slot of the queue, and the procedure would
/// never get to evaluate the condition that fails and cancels it.
final class ProcedureTakenSignal: ConcurrentOperation, @unchecked Sendable {
    init(for procedure: String) {
        super.init(name: "\(procedure): taken to evaluate its conditions")
    }

    /// Finishes it (the first call; later ones do nothing).
    func fire() {
        // Started by hand, in no queue, with no dependency: `execute()` finishes it at once. A
        // second call is refused (already finished), which is what we want.
        try? start()
    }
}

extension ProcedureOperation {
    /// Under `machine.lock`: see `ConditionExtras`.
    var conditionGates: [ConditionGate?] {
        get { conditionExtras?.gates ?? [] }
        set { extrasLocked.gates = newValue }
    }

    /// Under `machine.lock`: see `ConditionExtras`.
    var conditionEvaluation: ConditionEvaluation? {
        get { conditionExtras?.evaluation }
        set { extrasLocked.evaluation = newValue }
    }

    /// Under `machine.lock`: whether some condition has a gate (a pointer test in the usual case).
    var hasGatesLocked: Bool {
        guard let extras = conditionExtras else { return false }
        return !extras.gates.isEmpty
    }

    /// Under `machine.lock`: the operations the conditions produced, cancelled with the procedure.
    var producedDependencies: [ConcurrentOperation] { conditionExtras?.produced ?? [] }

    /// Under `machine.lock`: the extras, made if need be.
    private var extrasLocked: ConditionExtras {
        if let extras = conditionExtras { return extras }
        let extras = ConditionExtras()
        conditionExtras = extras
        return extras
    }

    /// Under `machine.lock`: remembers produced dependencies (a cancel cancels them).
    fileprivate func rememberProducedLocked(_ produced: [ConcurrentOperation]) {
        extrasLocked.produced.append(contentsOf: produced)
    }
}

/// Whether a condition that may produce dependencies may be evaluated: closed until they were
/// made and have all finished. Every field is protected by the owning procedure's `machine.lock`.
final class ConditionGate: @unchecked Sendable {
    /// Whether someone has begun to make the dependencies (they are made once).
    private(set) var isMade = false
    /// Produced dependencies not finished yet, plus one while they are being made.
    var remaining = 0

    /// Open: made, and every produced dependency finished.
    var isOpen: Bool { isMade && remaining == 0 }

    /// The caller makes the dependencies, then calls `ProcedureOperation.finishMaking`.
    func beginMaking() {
        isMade = true
        remaining = 1
    }
}

/// The evaluation of several conditions of one procedure (or of one whose gate was closed).
/// Every field is protected by the procedure's `machine.lock`; the conditions are called without
/// it, by the thread that holds `driving`.
final class ConditionEvaluation: @unchecked Sendable {
    let conditions: [any OperationCondition]
    /// Parallel to `conditions`, or empty if none has a gate.
    private let gates: [ConditionGate?]
    /// Per condition: 0 not started, 1 started, 2 answered.
    private var progress: [UInt8]
    /// The first condition that may not have started (those before it all have).
    private var firstUnstarted = 0
    private var satisfiedCount = 0
    private var decision: ConditionResult?
    /// Whether a thread is driving the evaluation (see `ProcedureOperation.drive`).
    var driving = false
    /// The conditions whose dependencies the worker that made this evaluation makes first (a
    /// condition added while the queue added the procedure); only that worker touches it.
    var unmade: [(ConditionGate, any OperationCondition)] = []

    init(conditions: [any OperationCondition], gates: [ConditionGate?]) {
        self.conditions = conditions
        self.gates = gates
        progress = Array(repeating: 0, count: conditions.count)
    }

    /// Whether a gate opening should resume it: nobody drives it and it is not decided.
    var mayResume: Bool { !driving && decision == nil }

    /// The decision, once there is one: the first failure or ignore, or every condition satisfied.
    func next() -> ConditionResult? {
        if let decision { return decision }
        if satisfiedCount == conditions.count { return .satisfied }
        return nil
    }

    /// The next condition to start, marked started: the first one added that has not started and
    /// whose gate is open; none once decided.
    func startNext() -> Int? {
        guard decision == nil else { return nil }
        while firstUnstarted < conditions.count && progress[firstUnstarted] != 0 { firstUnstarted += 1 }
        for index in firstUnstarted..<conditions.count where progress[index] == 0 {
            if !gates.isEmpty, let gate = gates[index], !gate.isOpen { continue }
            progress[index] = 1
            return index
        }
        return nil
    }

    /// Records the answer of a started condition. Returns `false` for a second answer, or one
    /// after the decision.
    func record(_ result: ConditionResult, from index: Int) -> Bool {
        guard decision == nil, progress[index] == 1 else { return false }
        progress[index] = 2
        if case .satisfied = result {
            satisfiedCount += 1
        } else {
            decision = result
        }
        return true
    }
}

/// The placeholder in a procedure's inline condition slot while it has none.
struct NoCondition: OperationCondition {
    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(.satisfied)
    }
}
