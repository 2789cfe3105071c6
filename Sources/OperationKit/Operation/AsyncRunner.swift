import Synchronization

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
/// closure runs in it (`state`); the runner then finishes that operation and ends, so that no
/// later closure runs in a cancelled task.
final class AsyncRunner: @unchecked Sendable {  // see each field for what protects it
    /// A striped lock, for `task` only: held for a few instructions, calling nothing.
    private var lock: Lock { Lock.striped(for: self) }
    /// Whose closure runs now — the address of that operation, or 0 between two closures — and,
    /// in the lowest bit (an object's address is aligned), whether a cancel of it reached (or is
    /// about to reach) the task. One atomic word, so that the step between two closures costs
    /// no lock: a cancel sets the bit only if the address is that of its operation, and the
    /// runner clears the address only if the bit is not set, so one of the two sees the other.
    /// The bit, once set, stays: the runner then ends.
    private let state: Atomic<UInt>
    private static let cancelledBit: UInt = 1
    /// Protected by `lock`.
    @exclusivity(unchecked) private var task: Task<Void, Never>?
    /// The queue whose slot the runner holds, held for the whole run (so that finishing an
    /// operation need not retain it: see `ConcurrentOperation.completeTail(_:)`), let go when the
    /// run ends; `nil` for an operation started by hand. Set before the task starts and read and
    /// cleared only by the task.
    @exclusivity(unchecked) private var queue: ConcurrentOperationQueue?
    /// The task's priority; set before the task starts.
    let priority: TaskPriorityCode

    init(running operation: ConcurrentOperation, in queue: ConcurrentOperationQueue?, priority: TaskPriority?) {
        state = Atomic(Self.address(of: operation))
        self.queue = queue
        self.priority = TaskPriorityCode(priority)
    }

    private static func address(of operation: ConcurrentOperation) -> UInt {
        UInt(bitPattern: ObjectIdentifier(operation))
    }

    /// Starts the task, whose first closure is `first`'s.
    func start(with first: ConcurrentOperation) {
        let task = Task(priority: priority.priority) { await run(first: first) }
        lock.withLock { self.task = task }
        // After the task is published: a cancel that came before found no task to cancel.
        if state.load(ordering: .acquiring) & Self.cancelledBit != 0 { task.cancel() }
    }

    /// Cancels the task if `operation`'s closure runs in it.
    func cancel(for operation: ConcurrentOperation) {
        let address = Self.address(of: operation)
        // Seen by the runner when this closure ends, even if the task is not cancelled yet.
        guard state.compareExchange(
            expected: address, desired: address | Self.cancelledBit, ordering: .acquiringAndReleasing
        ).exchanged else { return }
        lock.withLock { task }?.cancel()
    }

    private func run(first: ConcurrentOperation) async {
        var operation = first
        // Each call runs a run of operations of one class (see `runOnAsyncRunner(_:)`).
        while let next = await operation.runOnAsyncRunner(self) {
            operation = next
        }
        queue = nil
    }

    /// After `operation`'s closure has returned (or thrown): finishes the operation and, if the
    /// runner keeps the slot, takes the queue's next ready operation and starts it on this
    /// runner. Returns that operation, whose closure the runner runs next, or `nil` once the
    /// runner is done (it gave the slot back or handed it, with the next operation, to a worker).
    func advance(after operation: ConcurrentOperation) -> ConcurrentOperation? {
        let address = Self.address(of: operation)
        guard state.compareExchange(expected: address, desired: 0, ordering: .acquiringAndReleasing).exchanged else {
            // Cancelled while its closure ran: the runner ends after finishing it.
            operation.finishAfterStart()
            return nil
        }
        guard let queue else {
            // Started by hand: no queue, no slot, nothing next.
            operation.finishAfterStart()
            return nil
        }
        guard let next = operation.finishAfterStart(handOff: .asyncRunner).next else { return nil }
        // `next` came with the slot. An instrumented queue's operations go to a worker: their
        // `execute()` runs in the instrument's `run(_:_:)`, which may bind task-local values
        // that this task would not have.
        guard queue.instrumentSlot.current == nil, next.canRunOnAsyncRunner(priority: priority, queue: queue) else {
            queue.startWorker(with: next)
            return nil
        }
        // The current operation is set before the start, so that a cancel that comes after
        // the start (and finds this runner) finds it.
        state.store(Self.address(of: next), ordering: .releasing)
        switch next.startOnAsyncRunner(self) {
        case .execute:
            return next
        case .finishWithoutExecuting:
            // Cancelled before it started: it finishes without running, and gives the slot
            // back (the runner no longer holds one).
            state.store(0, ordering: .releasing)
            next.finishWithoutExecuting()
            return nil
        case .refuse:
            state.store(0, ordering: .releasing)
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
