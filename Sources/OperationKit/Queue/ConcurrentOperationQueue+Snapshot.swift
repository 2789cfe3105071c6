// ConcurrentOperationQueue+Snapshot: reading what the queue holds and why each operation waits,
// one lock at a time (the queue's, then each operation's, then the exclusivity register's).

extension ConcurrentOperationQueue {
    /// What the queue holds now: every operation with its state, priority, the time since it was
    /// added and since it started, and — for each one that is not executing — why (its
    /// ``OperationSnapshot/Blocker``s); a group's children are nested in its entry.
    ///
    /// Cheap enough for production: it never stops the queue, takes the queue's lock once and
    /// each operation's lock briefly, one at a time (see ``QueueSnapshot`` for what is
    /// consistent). Callable from any thread, also from inside an operation.
    ///
    /// - Returns: The snapshot.
    public func snapshot() -> QueueSnapshot {
        snapshot(source: .queue, name: displayName, findCycles: true)
    }

    /// Turns on a stall watchdog for this queue, replacing one already on: a timer takes a
    /// ``snapshot()`` every ``StallWatchdogConfiguration/checkInterval`` and calls `handler` when
    /// an operation has executed longer than ``StallWatchdogConfiguration/executionLimit``, when
    /// the queue holds work but nothing started or finished for
    /// ``StallWatchdogConfiguration/progressTimeout``, or when a wait-for cycle appears.
    ///
    /// Off by default; while off it costs nothing (no timer, no work per operation). The timer
    /// holds the queue weakly: it stops when the queue is released, or with
    /// ``stopStallWatchdog()``.
    ///
    /// - Parameters:
    ///   - configuration: What to watch for.
    ///   - handler: Called with each report, on the watchdog's own serial dispatch queue, with no
    ///     lock held.
    public func startStallWatchdog(
        _ configuration: StallWatchdogConfiguration, handler: @escaping @Sendable (StallReport) -> Void
    ) {
        let watchdog = StallWatchdog(configuration, handler: handler) { [weak self] in self?.snapshot() }
        let previous = lock.withLock {
            defer { _stallWatchdog = watchdog }
            return _stallWatchdog
        }
        previous?.stop()
    }

    /// Turns the stall watchdog off (its timer is cancelled); does nothing if it is off.
    public func stopStallWatchdog() {
        let previous = lock.withLock {
            defer { _stallWatchdog = nil }
            return _stallWatchdog
        }
        previous?.stop()
    }

    /// Whether a stall watchdog is on.
    public var isStallWatchdogOn: Bool { lock.withLock { _stallWatchdog != nil } }

    /// The snapshot of this queue as `source` (a group's child queue is described as the group).
    func snapshot(source: QueueSnapshot.Source, name: String, findCycles: Bool) -> QueueSnapshot {
        // 1. Under the queue's lock: its operations (retained) and what only the queue knows.
        let (entries, suspended, limit, slots) = lock.withLock { () -> ([QueuedFacts], Bool, Int, Int) in
            var entries: [QueuedFacts] = []
            entries.reserveCapacity(count)
            var node = first
            while let entry = node {
                let operation = entry.takeUnretainedValue()
                entries.append(QueuedFacts(
                    operation: operation, isListed: operation.isInReadyList, isDispatched: operation.isDispatched,
                    priority: operation.queuedPriority))
                node = operation.queueNext
            }
            return (entries, _isSuspended, _maxConcurrentOperationCount, activeSlots)
        }
        let queueName = displayName
        // 2. Each operation under its own lock, one at a time.
        let facts = entries.map { OperationFacts(reading: $0.operation) }
        let now = CoarseClock.stamp()  // after every stamp read
        // 3. The categories that the procedures waiting for them want, in one critical section.
        let waitingForCategories = Set(zip(entries, facts).compactMap { entry, facts in
            facts.exclusivityRequested ? ObjectIdentifier(entry.operation) : nil
        })
        let categoryWaits = ExclusivityController.waits(of: waitingForCategories)
        // Who holds this queue's slots: its executing operations, except those waiting for
        // children without a slot (a group, a retry).
        let slotHolders = zip(entries, facts).compactMap { entry, facts -> OperationReference? in
            guard facts.lifecycle == .executing || facts.lifecycle == .finishing else { return nil }
            if entry.operation.slotHandoff.load(ordering: .relaxed) == SlotHandoff.slotReturned { return nil }
            return OperationReference(entry.operation)
        }
        let slotsFull = slots >= limit
        // 4. Build each entry; names, groups' children and retries' attempts are read here.
        var operations: [OperationSnapshot] = []
        operations.reserveCapacity(entries.count)
        for (entry, facts) in zip(entries, facts) {
            let operation = entry.operation
            var blockers: [OperationSnapshot.Blocker] = []
            var state: OperationSnapshot.State
            let unfinished = facts.dependencies.filter { !$0.hasFinished }.map(OperationReference.init)
            let waitsInQueue = facts.isRunnable && entry.isListed && !entry.isDispatched
            switch (facts.lifecycle, facts.procedureState) {
            case (.finished, _), (_, .finished?): state = .finished
            case (.finishing, _), (_, .finishing?): state = .finishing
            case (.executing, _), (_, .executing?): state = .executing
            case (.ready, .evaluatingConditions?):
                state = .evaluatingConditions
                blockers += facts.evaluatingConditions.map { .evaluatingCondition($0.name) }
                let produced = facts.producedDependencies.filter { !$0.hasFinished }.map(OperationReference.init)
                if facts.hasClosedGates && !produced.isEmpty { blockers.append(.producedDependencies(produced)) }
                for (condition, waitsFor) in facts.conditionsWaiting {
                    let unfinished = waitsFor.filter { !$0.hasFinished }.map(OperationReference.init)
                    if !unfinished.isEmpty { blockers.append(.conditionDependencies(condition.name, unfinished)) }
                }
            case (.ready, _):
                // (A procedure stays `pending` until a worker takes it: runnable, it is ready.)
                let pending = !facts.isRunnable
                if pending {
                    state = .pending
                    if !unfinished.isEmpty { blockers.append(.dependencies(unfinished)) }
                    for case let layer as OperationLayer in facts.dependencies where !layer.hasFinished {
                        let members = layer.unfinishedMembers.map(OperationReference.init)
                        blockers.append(.layer(OperationReference(layer), unfinishedMembers: members))
                    }
                } else {
                    state = .ready
                    for wait in categoryWaits[ObjectIdentifier(operation)] ?? [] {
                        blockers.append(.exclusiveCategory(
                            wait.category, heldBy: wait.heldBy.compactMap(Self.reference),
                            queuedBehind: wait.queuedBehind.compactMap(Self.reference)))
                    }
                }
                // Runnable and not taken by a worker yet (a procedure waiting for a category is
                // not in the ready list: the grant puts it back).
                if state == .ready && !entry.isDispatched && blockers.isEmpty {
                    if suspended {
                        blockers.append(.queueSuspended(queueName))
                    } else if slotsFull && waitsInQueue {
                        blockers.append(.concurrencyLimit(limit, heldBy: slotHolders))
                    }
                }
            }
            var children: QueueSnapshot?
            if let owner = operation as? any ChildQueueOwning {
                let nested = owner.childQueueForSnapshot.snapshot(
                    source: .group, name: operation.displayName, findCycles: false)
                children = nested
                if state == .executing {
                    blockers += owner.waitBlockers(children: nested, now: now)
                }
            }
            operations.append(OperationSnapshot(
                id: ObjectIdentifier(operation), name: operation.displayName, kind: "\(type(of: operation))",
                state: state, isCancelled: facts.isCancelled, priority: entry.priority,
                sinceAdded: CoarseClock.elapsed(since: facts.addedStamp, now: now),
                sinceStarted: CoarseClock.elapsed(since: facts.startedStamp, now: now),
                dependencies: unfinished, blockers: blockers, children: children))
        }
        return QueueSnapshot(
            source: source, name: name, operations: operations, isSuspended: suspended,
            maxConcurrentOperationCount: limit, findCycles: findCycles)
    }

    /// A reference to an object of the exclusivity register (always an operation).
    private static func reference(_ object: AnyObject) -> OperationReference? {
        (object as? ConcurrentOperation).map(OperationReference.init)
    }
}

/// What the queue's lock guards about one of its operations.
private struct QueuedFacts {
    let operation: ConcurrentOperation
    let isListed: Bool
    let isDispatched: Bool
    let priority: ConcurrentOperation.QueuePriority
}

/// What an operation's own lock guards, read in one critical section; the conditions' names
/// (user code) are asked after it.
struct OperationFacts {
    var lifecycle: OperationLifecycle.State = .ready
    var isCancelled = false
    var isRunnable = false
    var addedStamp: UInt32 = 0
    var startedStamp: UInt32 = 0
    var dependencies: [ConcurrentOperation] = []
    var procedureState: ProcedureState?
    var exclusivityRequested = false
    var evaluatingConditions: [any OperationCondition] = []
    var hasClosedGates = false
    var producedDependencies: [ConcurrentOperation] = []
    /// Conditions behind a closed gate with own dependencies, and those dependencies.
    var conditionsWaiting: [(condition: any OperationCondition, waitsFor: [ConcurrentOperation])] = []

    init(reading operation: ConcurrentOperation) {
        let procedure = operation as? ProcedureOperation
        operation.lock.withLock {
            lifecycle = operation.lifecycle.state
            isCancelled = operation.lifecycle.isCancelled
            addedStamp = operation.addedStamp
            startedStamp = operation.startedStamp
            dependencies = operation._dependencies.array
            guard let procedure else { return }
            procedureState = procedure.procedureLifecycle.state
            exclusivityRequested = procedure.exclusivity == .requested
            guard procedureState == .evaluatingConditions else { return }
            producedDependencies = procedure.producedDependencies
            switch procedure.conditionProgress {
            case .oneStarting, .oneStarted, .oneLent:
                evaluatingConditions = [procedure.firstCondition.condition]
            case .several(let evaluation):
                let (evaluating, gated) = evaluation.waitingIndices
                evaluatingConditions = evaluating.map { evaluation.conditions[$0] }
                hasClosedGates = !gated.isEmpty
                if hasClosedGates { conditionsWaiting = evaluation.gatedOwnDependencies }
            case .none, .oneSatisfiedWhileStarting, .oneIgnoredWhileStarting, .oneFailedWhileStarting, .decided,
                 .oneLentAfterFinish:
                hasClosedGates = procedure.conditionGates.contains { $0.map { !$0.isOpen } ?? false }
            }
        }
        isRunnable = Readiness.isRunnable(operation.readiness.load(ordering: .acquiring))
    }
}

/// An operation that runs other operations on a queue of its own and waits for them: a
/// ``GroupOperation`` (its children) or a ``RetryOperation`` (its attempts).
protocol ChildQueueOwning: ConcurrentOperation {
    /// The queue its children run on.
    var childQueueForSnapshot: ConcurrentOperationQueue { get }
    /// What it waits for while executing, given its children's snapshot. Takes its own lock.
    func waitBlockers(children: QueueSnapshot, now: UInt32) -> [OperationSnapshot.Blocker]
}
