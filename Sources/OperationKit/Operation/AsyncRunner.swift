/// The Swift task in which an ``AsyncOperation``'s closure runs — and then, while it holds the
/// operation's concurrency slot, the closures of the async operations its queue has ready next.
///
/// A chain of async operations (each depending on the one before) would otherwise cost, per
/// operation, a Dispatch worker woken to start it, a new task, and a hop to the executor; the
/// runner goes straight from one closure to the next, in the same step in which the queue learns
/// of the finish (see `ConcurrentOperation.finishAfterStart(handOff:)`). It does so only for an
/// `AsyncOperation` of the same task priority; any other operation, with the slot, goes to a
/// Dispatch worker as usual.
///
/// Cancellation: cancelling an operation cancels the runner's task only while that operation's
/// closure runs in it (`current`); the runner then finishes that operation and ends, so that no
/// later closure runs in a cancelled task.
final class AsyncRunner: @unchecked Sendable {  // mutable fields are protected by `lock`
    /// A striped lock: held for a few instructions, calling nothing.
    private var lock: Lock { Lock.striped(for: self) }
    /// The operation whose closure runs now.
    @exclusivity(unchecked) private var current: ObjectIdentifier?
    /// A cancel of the current operation reached (or is about to reach) the task.
    @exclusivity(unchecked) private var cancelled = false
    @exclusivity(unchecked) private var task: Task<Void, Never>?
    /// The task's priority; set before the task starts.
    let priority: TaskPriorityCode

    init(running operation: ConcurrentOperation, priority: TaskPriority?) {
        current = ObjectIdentifier(operation)
        self.priority = TaskPriorityCode(priority)
    }

    /// Starts the task, whose first closure is `first`'s.
    func start(with first: ConcurrentOperation) {
        let task = Task(priority: priority.priority) { await run(first: first) }
        let cancelNow = lock.withLock { () -> Bool in
            self.task = task
            return cancelled
        }
        if cancelNow { task.cancel() }
    }

    /// Cancels the task if `operation`'s closure runs in it.
    func cancel(for operation: ConcurrentOperation) {
        let task = lock.withLock { () -> Task<Void, Never>? in
            guard current == ObjectIdentifier(operation) else { return nil }
            // Seen by the runner when this closure ends, even if the task is not cancelled yet.
            cancelled = true
            return self.task
        }
        task?.cancel()
    }

    private func run(first: ConcurrentOperation) async {
        var operation = first
        // Each call runs a run of operations of one class (see `runOnAsyncRunner(_:)`).
        while let next = await operation.runOnAsyncRunner(self) {
            operation = next
        }
    }

    /// After `operation`'s closure has returned (or thrown): finishes the operation and, if the
    /// runner keeps the slot, takes the queue's next ready operation and starts it on this
    /// runner. Returns that operation, whose closure the runner runs next, or `nil` once the
    /// runner is done (it gave the slot back or handed it, with the next operation, to a worker).
    func advance(after operation: ConcurrentOperation) -> ConcurrentOperation? {
        let retire = lock.withLock { () -> Bool in
            current = nil
            return cancelled
        }
        if retire {
            operation.finishAfterStart()
            return nil
        }
        guard let next = operation.finishAfterStart(handOff: .asyncRunner).next else { return nil }
        // `next` came with the slot. An instrumented queue's operations go to a worker: their
        // `execute()` runs in the instrument's `run(_:_:)`, which may bind task-local values
        // that this task would not have.
        guard let queue = next.queue, queue.instrumentSlot.current == nil,
              next.canRunOnAsyncRunner(priority: priority, queue: queue) else {
            next.queue?.startWorker(with: next)
            return nil
        }
        // The current operation is set before the start, so that a cancel that comes after
        // the start finds it.
        lock.withLock { current = ObjectIdentifier(next) }
        switch next.startOnAsyncRunner(self) {
        case .execute:
            return next
        case .finishWithoutExecuting:
            // Cancelled before it started: it finishes without running, and gives the slot
            // back (the runner no longer holds one).
            lock.withLock { current = nil }
            next.finishWithoutExecuting()
            return nil
        case .refuse:
            lock.withLock { current = nil }
            queue.startWorker(with: next)
            return nil
        }
    }
}

extension ConcurrentOperation {
    /// Starts the operation on `runner`, which holds a slot for it: the slot is the operation's
    /// until it finishes (as after its worker left).
    fileprivate func startOnAsyncRunner(_ runner: AsyncRunner) -> OperationLifecycle.StartAction {
        slotHandoff.store(SlotHandoff.workerLeft, ordering: .releasing)
        let action = lock.withLock {
            let action = startStepLocked()
            if case .execute = action { attachAsyncRunnerLocked(runner) }
            return action
        }
        if case .execute = action { tellLifecycleEventStreams() }
        return action
    }
}
