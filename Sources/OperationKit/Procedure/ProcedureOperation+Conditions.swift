// Conditions: adding them, the dependencies they produce, their evaluation once the procedure's
// dependencies have finished, and mutual exclusivity.
extension ProcedureOperation {
    /// Adds a condition, evaluated once the procedure's dependencies have finished.
    ///
    /// The condition's dependency, if it makes one (``OperationCondition/dependency(for:)``), is
    /// made and added to the procedure's queue when the procedure is added, and runs after the
    /// procedure's own dependencies. If the procedure is already in a queue, it is made and added
    /// at once, and does not wait for the procedure's own dependencies.
    ///
    /// A procedure with conditions runs only on a queue: ``ConcurrentOperation/start()`` by hand
    /// throws ``OperationError/Code-swift.struct/requiresQueue``.
    ///
    /// - Parameter condition: The condition to add.
    /// - Throws: ``OperationError/Code-swift.struct/tooLateToAddCondition`` once evaluation has
    ///   begun (or the procedure has started or finished).
    public func addCondition(_ condition: any OperationCondition) throws(OperationError) {
        try addCondition(condition, first: false)
    }

    /// Adds a condition; with `first`, before every condition that is not itself `first` (result
    /// injection runs before the conditions that may read the injected value).
    func addCondition(_ condition: any OperationCondition, first: Bool) throws(OperationError) {
        let (accepted, state, queue) = machine.lock.withLock { () -> (Bool, ProcedureState, ConcurrentOperationQueue?) in
            guard procedureLifecycle.acceptsConditions && machine.lifecycle.isReady else {
                return (false, procedureLifecycle.state, nil)
            }
            storeConditionLocked(condition, first: first)
            return (true, procedureLifecycle.state, conditionDependenciesMade ? self.queue : nil)
        }
        guard accepted else {
            throw OperationError(
                .tooLateToAddCondition, operations: [displayName], "conditions are already evaluated (state \(state))")
        }
        // Already in a queue, whose add has made the other conditions' dependencies: make this
        // one's now.
        if let queue {
            let produced = ProducedDependencies.of(condition, for: self)
            for dependency in produced {
                try? addDependency(dependency)
                try? queue.addOperation(dependency)
            }
            machine.lock.withLock { producedDependencies.append(contentsOf: produced) }
        }
    }

    /// The number of conditions added, result injections (``ResultConsuming/injectResult(from:_:)``)
    /// included; 0 again once the procedure has finished and let them go.
    public var conditionCount: Int { machine.lock.withLock { conditionTotal } }

    /// Under `machine.lock`: every condition, in evaluation order.
    var conditionsLocked: [any OperationCondition] {
        conditionTotal == 0 ? [] : [firstCondition] + moreConditions
    }

    /// Under `machine.lock`: stores a condition — inline if it is the first — before the
    /// non-`first` ones if `first`.
    private func storeConditionLocked(_ condition: any OperationCondition, first: Bool) {
        defer { conditionTotal += 1 }
        if ObjectIdentifier(type(of: condition)) != ObjectIdentifier(ClosureCondition.self) {
            conditionsMayProduceDependencies.store(true, ordering: .releasing)
        }
        if conditionTotal == 0 {
            firstCondition = condition
            if first { injectionConditionCount += 1 }
            return
        }
        var all = conditionsLocked
        if first {
            all.insert(condition, at: injectionConditionCount)
            injectionConditionCount += 1
        } else {
            all.append(condition)
        }
        firstCondition = all[0]
        moreConditions = Array(all.dropFirst())
    }

    /// The dependencies the conditions produce, made once, when the queue adds the procedure.
    func conditionDependenciesToEnqueue() -> [ConcurrentOperation] {
        // Only ClosureConditions (which make none): nothing to ask. (Read without the lock. A
        // condition added on another thread while a queue adds the procedure may miss its
        // dependency, with or without this check: add conditions before adding the procedure.)
        guard conditionsMayProduceDependencies.load(ordering: .acquiring) else { return [] }
        var first: any OperationCondition = NoCondition()
        var more: [any OperationCondition] = []
        let taken = machine.lock.withLock { () -> Bool in
            guard conditionTotal > 0, !conditionDependenciesMade, procedureLifecycle.state == .initialized,
                  queueReference == nil, !procedureLifecycle.isCancelled
            else { return false }
            first = firstCondition
            more = moreConditions
            return true
        }
        guard taken else { return [] }
        // Usually no condition produces anything: no array is built then.
        var produced = ProducedDependencies.of(first, for: self)
        for condition in more {
            let made = ProducedDependencies.of(condition, for: self)
            if !made.isEmpty { produced.append(contentsOf: made) }
        }
        guard !produced.isEmpty else { return [] }
        let directDependencies = machine.lock.withLock { _dependencies.array }
        // Produced dependencies run after the procedure's own dependencies, then the conditions
        // are evaluated (ProcedureKit's order).
        for dependency in produced where !directDependencies.isEmpty {
            try? dependency.addDependencies(directDependencies)
        }
        try? addDependencies(produced)
        machine.lock.withLock { producedDependencies = produced }
        return produced
    }

    /// On the worker that took the procedure: evaluates its conditions if it has any and has not
    /// yet. Returns whether it goes on to start now.
    func prepareConditions(queue: ConcurrentOperationQueue) -> Bool {
        enum Taken {
            case proceed
            case one
            case several([any OperationCondition])
        }
        var single: any OperationCondition = NoCondition()
        let taken = machine.lock.withLock { () -> Taken in
            switch procedureLifecycle.dependenciesFinished(hasConditions: conditionTotal > 0) {
            case .proceed:
                return .proceed
            case .evaluateConditions:
                guard conditionTotal == 1 else { return .several(conditionsLocked) }
                singleEvaluationStarting = true
                singleDecision = nil
                single = firstCondition
                return .one
            }
        }
        switch taken {
        case .proceed: return true
        case .one: return evaluateOne(single, queue: queue)
        case .several(let conditions): return evaluate(conditions, queue: queue)
        }
    }

    /// Starts evaluating several conditions. Returns `true` if they were all decided before this
    /// returned and the procedure may go on at once on this worker.
    private func evaluate(_ conditions: [any OperationCondition], queue: ConcurrentOperationQueue) -> Bool {
        let categories = conditions.reduce(into: Set<String>()) { $0.formUnion($1.mutuallyExclusiveCategories) }
        let evaluation = ConditionEvaluation(count: conditions.count, procedure: self, categories: categories, queue: queue)
        for (index, condition) in conditions.enumerated() {
            condition.evaluate(for: self) { evaluation.record($0, from: index) }
        }
        guard let decided = evaluation.endOfStart() else { return false }
        return conditionsDecided(decided, categories: categories, queue: queue, onWorker: true)
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

/// The evaluation of one procedure's conditions: counts the results and decides once — on the
/// first failure or ignore, or when all are satisfied. A decision reached while the worker is
/// still starting the evaluations is handed back to it (``endOfStart()``); a later one goes to
/// `decided`.
final class ConditionEvaluation: @unchecked Sendable {  // every field is protected by `lock`
    /// A striped lock: held only for a few instructions, calling nothing (no allocation, no
    /// mutex to initialise and destroy per evaluation).
    private var lock: Lock { Lock.striped(for: self) }
    /// Which conditions have answered (a second completion of one condition is ignored): bit
    /// `index` of `answeredBits`, or `answered[index]` beyond 64 conditions.
    @exclusivity(unchecked) private var answeredBits: UInt64 = 0
    @exclusivity(unchecked) private var answered: [Bool]
    @exclusivity(unchecked) private var remaining: Int
    @exclusivity(unchecked) private var decision: ConditionResult?
    @exclusivity(unchecked) private var starting = true
    // What a decision after the start is handed to.
    private let procedure: ProcedureOperation
    private let categories: Set<String>
    private let queue: ConcurrentOperationQueue

    init(count: Int, procedure: ProcedureOperation, categories: Set<String>, queue: ConcurrentOperationQueue) {
        remaining = count
        answered = count > 64 ? Array(repeating: false, count: count) : []
        self.procedure = procedure
        self.categories = categories
        self.queue = queue
    }

    private func decided(_ result: ConditionResult) {
        _ = procedure.conditionsDecided(result, categories: categories, queue: queue, onWorker: false)
    }

    func record(_ result: ConditionResult, from index: Int) {
        let call: ConditionResult? = lock.withLock {
            guard decision == nil else { return nil }
            if index < 64 {
                let bit: UInt64 = 1 << UInt64(index)
                guard answeredBits & bit == 0 else { return nil }
                answeredBits |= bit
            } else {
                guard !answered[index] else { return nil }
                answered[index] = true
            }
            if case .satisfied = result {
                remaining -= 1
                if remaining > 0 { return nil }
            }
            decision = result
            return starting ? nil : result
        }
        if let call { decided(call) }
    }

    /// Called once by the worker after starting every evaluation: the decision if there already
    /// is one (the worker acts on it), else `nil` (a later `record` will call `decided`).
    func endOfStart() -> ConditionResult? {
        lock.withLock {
            starting = false
            return decision
        }
    }
}

/// The placeholder in a procedure's inline condition slot while it has none.
struct NoCondition: OperationCondition {
    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(.satisfied)
    }
}
