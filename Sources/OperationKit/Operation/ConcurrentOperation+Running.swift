// ConcurrentOperation: starting (by hand or on a queue worker), cancelling, and the
// hand-over of a worker's concurrency slot.

import Dispatch
import Synchronization

extension ConcurrentOperation {
    /// Starts the operation on the calling thread, as Foundation's `start()` does: ``execute()``
    /// runs before this returns (it may finish later). A cancelled operation finishes without
    /// executing.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/managedByQueue`` if a queue runs it;
    ///   ``OperationError/Code-swift.struct/notReady`` if a dependency has not finished;
    ///   ``OperationError/Code-swift.struct/alreadyStarted`` or
    ///   ``OperationError/Code-swift.struct/alreadyFinished`` if it already ran. Nothing changed.
    public final func start() throws(OperationError) {
        if let refusal = refusalOfManualStart() { throw refusal }
        let (inQueue, dependencies) = lock.withLock { (queue != nil, _dependencies) }
        if inQueue {
            throw OperationError(.managedByQueue, operations: [displayName], "a queue starts this operation")
        }
        if !isCancelled, let waiting = dependencies.first(where: { !$0.isFinished }) {
            throw OperationError(
                .notReady, operations: [displayName, waiting.displayName], "a dependency has not finished")
        }
        let instrument = OperationInstrumentation.defaultSlot.current
        // An operation with a queue of its own (a group's children) hands it the instrument it
        // tells, as when it is added to an instrumented queue.
        if let instrument { adoptInstrument(instrument) }
        willTellStarted(instrument)
        // Check the queue again in the same critical section as the transition: a queue that
        // claimed the operation meanwhile must be the only one to start it.
        let action = lock.withLock { () -> OperationLifecycle.StartAction in
            guard queueReference == nil else { return .refuse(.managedByQueue) }
            return startStepLocked()
        }
        switch action {
        case .execute:
            tellLifecycleEventStreams()
            performExecute(telling: instrument, queue: nil)
        case .finishWithoutExecuting:
            finishWithoutExecuting()
        case .refuse(let code):
            throw OperationError(code, operations: [displayName], "start() refused")
        }
    }

    /// Under `lock`: the start step. Returns what to do; on `.execute` the subclass hook
    /// has run. An operation cancelled before it started passes through the step to finish
    /// without executing: that is recorded (`skippedExecution`) for its event streams, which
    /// must not report it as started.
    @inline(__always)
    final func startStepLocked() -> OperationLifecycle.StartAction {
        let action = lifecycle.start()
        switch action {
        case .execute:
            startedStamp = CoarseClock.stamp()
            didStartExecutingLocked()
        case .finishWithoutExecuting:
            lifeFlags.bitwiseOr(LifeFlags.skippedExecution, ordering: .relaxed)
        case .refuse:
            break
        }
        return action
    }

    /// Under `lock`: sets the cancelled flag. Returns `true` if this call set it.
    final func cancelLocked() -> Bool {
        if case .runCancellationBlock = lifecycle.cancel() { return true }
        return false
    }

    /// Without any lock, after ``cancelLocked()`` returned `true` for an operation in `queue`:
    /// marks it runnable and hands it to its queue if that made it runnable.
    final func makeRunnableAfterCancel(in queue: ConcurrentOperationQueue?) {
        guard let queue else { return }
        queue.operationWasCancelled(self)  // its progress: complete (one atomic load if not followed)
        if Readiness.becameRunnableByCancelling(readiness.bitwiseOr(Readiness.cancelled, ordering: .acquiringAndReleasing).oldValue) {
            queue.makeReady([self])
        }
    }

    // MARK: Running on a queue

    /// What a worker does after running an operation.
    enum WorkerOutcome {
        /// The worker keeps its slot and takes the next operation (this one did not run, or it
        /// finished on another thread before `execute()` returned and told the queue itself).
        case keepSlot
        /// It finished on the worker's own thread: the worker tells the queue, releasing these
        /// dependents, in the same critical section in which it takes the next operation.
        case finishedOnWorker(newlyReady: OperationList)
        /// It is still executing: the slot is the operation's until it finishes.
        case slotHandedOver
    }

    /// Runs the operation on a queue worker.
    final func runOnWorker(of queue: ConcurrentOperationQueue) -> WorkerOutcome {
        slotHandoff.store(SlotHandoff.workerHolds, ordering: .releasing)
        return WorkerOperation.with(self) {
            let instrument = queue.instrumentSlot.current
            if let instrument, takeReadyTelling() { tell(.ready, queue: queue, to: instrument) }
            // A procedure evaluates its conditions first; while they are pending it leaves the
            // worker, and its queue runs it again once they are done.
            var preparation = prepareToRun(on: queue, instrumented: instrument != nil)
            var action: OperationLifecycle.StartAction
            while true {
                if preparation == .putBack { return .keepSlot }
                willTellStarted(instrument)
                var conditionAdded = false
                action = lock.withLock { () -> OperationLifecycle.StartAction in
                    switch preparation {
                    case .startSatisfyingConditions:
                        // Conditions satisfied on this worker, their answer recorded in the start
                        // step (refused if a cancel abandoned the evaluation meanwhile and put it
                        // back).
                        if !conditionsSatisfiedLocked() { return .refuse(.notReady) }
                    case .startWithoutConditions:
                        // No condition: past its dependencies in the start step.
                        if !passDependenciesWithoutConditionsLocked() {
                            conditionAdded = true
                            return .refuse(.notReady)
                        }
                    case .start, .putBack:
                        break
                    }
                    return startStepLocked()
                }
                guard conditionAdded else { break }
                // A condition was added since `prepareToRun` looked without the lock: prepare
                // again, which evaluates it. (Only on a run without an instrument, so nothing
                // was told of a start.)
                preparation = prepareToRun(on: queue, instrumented: instrument != nil)
            }
            switch action {
            case .execute:
                tellLifecycleEventStreams()
                let qos = queuedQualityOfService
                if qos != .unspecified && qos != queue.qualityOfService && queue.underlyingQueue == nil {
                    // The work asked for its own quality of service (and the queue has no
                    // underlying queue that all work must run on): run it on that global queue.
                    // The slot goes with it until it finishes.
                    slotHandoff.store(SlotHandoff.workerLeft, ordering: .releasing)
                    DispatchQueue.global(qos: qos).async {
                        CurrentQueue.with(queue) { self.performExecute(telling: instrument, queue: queue) }
                        // A group now only waits for its children: its slot goes back to its queue.
                        if self.waitsWithoutSlot && self.returnSlot() { queue.slotReturned() }
                    }
                    return .slotHandedOver
                }
                performExecute(telling: instrument, queue: queue)
            case .finishWithoutExecuting:
                finishWithoutExecuting()
            case .refuse:
                // A cancel abandoned the evaluation of its conditions (and put it back in its
                // queue), or started by someone else (a queue refuses `start()` by hand, so that
                // does not happen): nothing ran and the worker keeps its slot.
                if preparation == .startSatisfyingConditions { startRefusedAfterConditions() }
                return .keepSlot
            }
            if let deferred = deferredReady {
                deferredReady = nil
                return .finishedOnWorker(newlyReady: deferred)
            }
            let previous = slotHandoff.exchange(SlotHandoff.workerLeft, ordering: .acquiringAndReleasing)
            if previous == SlotHandoff.finished { return .keepSlot }
            // Still executing. A group that now only waits for its children gives the slot back:
            // the worker keeps it and takes the next ready operation (see "A group waiting for its
            // children holds no slot" in Documentation/Semantics.md).
            return waitsWithoutSlot && returnSlot() ? .keepSlot : .slotHandedOver
        }
    }

    /// Settles, once `execute()` has returned, that the operation no longer holds a slot: returns
    /// `true` if the caller (who held the slot for it) keeps the slot, `false` if the operation
    /// finished meanwhile and its finish already gave the slot back.
    final func returnSlot() -> Bool {
        slotHandoff.compareExchange(
            expected: SlotHandoff.workerLeft, desired: SlotHandoff.slotReturned, ordering: .acquiringAndReleasing
        ).exchanged
    }
}
