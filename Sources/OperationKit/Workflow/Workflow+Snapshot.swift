// Workflow+Snapshot: the workflow's tasks as a QueueSnapshot — state, prerequisites, and what
// each task waits for — read under the workflow's lock, then its queue's snapshot for the runners.

extension Workflow {
    /// What the workflow's tasks are doing now: each task with its state, its prerequisites, and
    /// what it waits for (unfinished prerequisites, an external condition not fulfilled, a
    /// sub-workflow, the workflow's suspension for a task whose start it holds, or — for a task
    /// whose run waits for a runner — what the workflow's runner waiting in the queue waits for:
    /// the queue's limit or suspension). The snapshot is suspended if the workflow
    /// (``isSuspended``) or its queue is.
    /// Times come from the task's current run: since it was started (queued for a runner) and
    /// since a runner took it, to the millisecond (nil for a task that is not executing, and
    /// since-started for a run no runner has taken yet).
    ///
    /// The tasks are read in one critical section of the workflow's lock, so their states are
    /// consistent with each other; the queue's part is read after it (see ``QueueSnapshot``).
    ///
    /// - Returns: The snapshot; its operations are the tasks, in the order they were added.
    public func snapshot() -> QueueSnapshot {
        struct TaskFacts {
            let task: WorkflowTask
            let state: WorkflowTaskState
            let prerequisites: [Int]
            /// The runner executing the task's run, once one took it.
            let runner: WorkflowRunOperation?
            let queuedStamp: UInt32
            let startedStamp: UInt32
            let unfulfilled: Bool
            let held: Bool
        }
        let (facts, suspended) = lock.withLock {
            (tasks.map { task in
                let executing = task.lifecycle.state == .executing
                return TaskFacts(
                    task: task, state: task.lifecycle.state, prerequisites: task.prerequisiteIndices.array,
                    runner: task.runOperation?.takeUnretainedValue(),
                    queuedStamp: executing ? task.runQueuedStamp : 0,
                    startedStamp: executing && task.runOperation != nil ? task.runStartedStamp : 0,
                    unfulfilled: (task as? ExternalConditionTask).map { $0.fulfilment == nil } ?? false,
                    held: task.isHeld && task.lifecycle.state == .ready)
            }, _isSuspended)
        }
        let now = CoarseClock.stamp()
        // The workflow's runners in its queue, then the queue's snapshot: a run that waits for a
        // runner waits for what a runner waiting in the queue waits for (its limit, its
        // suspension).
        let runners = Set(queue.operations.compactMap { operation -> ObjectIdentifier? in
            guard let runner = operation as? WorkflowRunOperation, runner.workflow === self else { return nil }
            return ObjectIdentifier(runner)
        })
        let queued = queue.snapshot(source: .queue, name: queue.displayName, findCycles: false)
        let references = facts.map { OperationReference(id: ObjectIdentifier($0.task), name: $0.task.name) }
        // A runner named by a queue blocker (the operations holding the slots) is shown as the
        // task whose run it executes.
        var taskOfRunner: [ObjectIdentifier: OperationReference] = [:]
        for (index, task) in facts.enumerated() {
            if let runner = task.runner { taskOfRunner[ObjectIdentifier(runner)] = references[index] }
        }
        let waitingRunner = queued.operations.first {
            runners.contains($0.id) && $0.state != .executing && $0.state != .finishing && $0.state != .finished
        }
        let runBlockers: [OperationSnapshot.Blocker]
        if let waitingRunner {
            runBlockers = waitingRunner.blockers.map { $0.mapReferences { taskOfRunner[$0.id] ?? $0 } }
        } else {
            // No runner waits: the workflow's runners are all busy, since it has as many as the
            // queue's limit allows (or one is being queued right now). The run waits for the
            // operations holding the queue's places, or for the queue's suspension.
            let holding = queued.operations.filter { $0.state == .executing || $0.state == .finishing }
            if queued.isSuspended {
                runBlockers = [.queueSuspended(queued.name)]
            } else if !holding.isEmpty && holding.count >= queued.maxConcurrentOperationCount {
                runBlockers = [.concurrencyLimit(
                    queued.maxConcurrentOperationCount, heldBy: holding.map { taskOfRunner[$0.id] ?? $0.reference })]
            } else {
                runBlockers = []
            }
        }
        var operations: [OperationSnapshot] = []
        operations.reserveCapacity(facts.count)
        for (index, task) in facts.enumerated() {
            var blockers: [OperationSnapshot.Blocker] = []
            let unfinished = task.prerequisites.filter { facts[$0].state != .finished }.map { references[$0] }
            if task.state == .pending && !unfinished.isEmpty { blockers.append(.prerequisites(unfinished)) }
            if task.unfulfilled && task.state != .finished { blockers.append(.externalCondition(task.task.name)) }
            if task.held { blockers.append(.workflowSuspended(name)) }
            if task.state == .executing {
                // Started, and not taken by a runner yet: it waits for one.
                if task.runner == nil { blockers += runBlockers }
                if let subworkflow = task.task as? SubworkflowTask, task.runner != nil {
                    blockers.append(.subworkflow(subworkflow.subworkflow.name))
                }
            }
            let state: OperationSnapshot.State = switch task.state {
            case .pending: .pending
            case .ready: .ready
            case .executing: .executing
            case .finished: .finished
            case .failed: .failed
            case .cancelled: .cancelled
            }
            operations.append(OperationSnapshot(
                id: references[index].id, name: task.task.name, kind: "\(type(of: task.task))", state: state,
                isCancelled: task.state == .cancelled, priority: .normal,
                sinceAdded: CoarseClock.elapsed(since: task.queuedStamp, now: now),
                sinceStarted: CoarseClock.elapsed(since: task.startedStamp, now: now),
                dependencies: task.prerequisites.map { references[$0] }, blockers: blockers, children: nil))
        }
        return QueueSnapshot(
            source: .workflow, name: name, operations: operations, isSuspended: suspended || queued.isSuspended,
            maxConcurrentOperationCount: queued.maxConcurrentOperationCount)
    }

    /// Turns on a stall watchdog for this workflow, replacing one already on: a timer takes a
    /// ``snapshot()`` every ``StallWatchdogConfiguration/checkInterval`` and calls `handler` when
    /// a task's run has executed longer than ``StallWatchdogConfiguration/executionLimit``, when
    /// the workflow has unfinished tasks but none started or ended for
    /// ``StallWatchdogConfiguration/progressTimeout`` (a task waiting for an external condition
    /// counts as not moving), or when a wait-for cycle appears.
    ///
    /// Off by default; while off it costs nothing. The timer holds the workflow weakly: it stops
    /// when the workflow is released, or with ``stopStallWatchdog()``.
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
}
