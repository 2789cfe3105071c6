// Workflow+Snapshot: the workflow's tasks as a QueueSnapshot — state, prerequisites, and what
// each task waits for — read under the workflow's lock, then its queue's snapshot for the runs.

extension Workflow {
    /// What the workflow's tasks are doing now: each task with its state, its prerequisites, and
    /// what it waits for (unfinished prerequisites, an external condition not fulfilled, a
    /// sub-workflow, the workflow's suspension for a task whose start it holds, or — for a task
    /// whose run is queued — the queue's limit or suspension). The snapshot is suspended if the
    /// workflow (``isSuspended``) or its queue is.
    /// Times come from the task's current run on the queue: since it was queued and since it
    /// started (nil for a task without a run in the queue).
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
            let run: WorkflowRunOperation?
            let unfulfilled: Bool
            let held: Bool
        }
        let (facts, suspended) = lock.withLock {
            (tasks.map { task in
                TaskFacts(
                    task: task, state: task.lifecycle.state, prerequisites: task.prerequisiteIndices.array,
                    run: task.runOperation,
                    unfulfilled: (task as? ExternalConditionTask).map { $0.fulfilment == nil } ?? false,
                    held: task.isHeld && task.lifecycle.state == .ready)
            }, _isSuspended)
        }
        let queued = queue.snapshot(source: .queue, name: queue.displayName, findCycles: false)
        var runs: [ObjectIdentifier: OperationSnapshot] = [:]
        for operation in queued.operations { runs[operation.id] = operation }
        let references = facts.map { OperationReference(id: ObjectIdentifier($0.task), name: $0.task.name) }
        // A run named by a queue blocker (the runs holding the slots) is shown as its task.
        var taskOfRun: [ObjectIdentifier: OperationReference] = [:]
        for (index, task) in facts.enumerated() {
            if let run = task.run { taskOfRun[ObjectIdentifier(run)] = references[index] }
        }
        var operations: [OperationSnapshot] = []
        operations.reserveCapacity(facts.count)
        for (index, task) in facts.enumerated() {
            let run = task.run.flatMap { runs[ObjectIdentifier($0)] }
            var blockers: [OperationSnapshot.Blocker] = []
            let unfinished = task.prerequisites.filter { facts[$0].state != .finished }.map { references[$0] }
            if task.state == .pending && !unfinished.isEmpty { blockers.append(.prerequisites(unfinished)) }
            if task.unfulfilled && task.state != .finished { blockers.append(.externalCondition(task.task.name)) }
            if task.held { blockers.append(.workflowSuspended(name)) }
            if task.state == .executing {
                if let run, run.state != .executing && run.state != .finishing {
                    // The run waits in the queue (its limit, its suspension).
                    blockers += run.blockers.map { $0.mapReferences { taskOfRun[$0.id] ?? $0 } }
                }
                if let subworkflow = task.task as? SubworkflowTask, task.run != nil {
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
                isCancelled: task.state == .cancelled, priority: run?.priority ?? .normal,
                sinceAdded: run?.sinceAdded, sinceStarted: run?.sinceStarted,
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
