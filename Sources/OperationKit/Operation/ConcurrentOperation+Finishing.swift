// ConcurrentOperation: finishing — the state change, the completion block, the release of
// dependents and waiters, and the queue's part of the finish (the tail).

import Synchronization

extension ConcurrentOperation {
    // MARK: Finishing

    /// Finishes the operation after it started.
    ///
    /// - Parameter asLastStep: The caller returns from `execute()` right after this, so when the
    ///   operation runs on a queue worker, that worker may do the queue's part of the finish
    ///   together with taking its next operation. (A subclass's `execute()` may go on after
    ///   `finish()`, even wait for a dependent, so its finish never defers.)
    @discardableResult
    final func finishAfterStart(asLastStep: Bool = false) -> Bool {
        finishAfterStart(handOff: asLastStep ? .lastStepOnWorker : .tellQueue).finished
    }

    /// Who does the queue's part of a finish (see ``finishAfterStart(asLastStep:)``).
    enum FinishHandOff {
        /// This call tells the queue.
        case tellQueue
        /// The worker running the operation, if this is its thread (`asLastStep`).
        case lastStepOnWorker
        /// The async runner that ran the operation's closure (see `AsyncRunner`): if it holds the
        /// operation's slot, it keeps it and takes the queue's next ready operation in the same
        /// step as the queue learns of the finish. The runner holds the operation's queue.
        case asyncRunner
    }

    /// Finishes the operation after it started. Returns whether this call finished it, and for
    /// `.asyncRunner` the operation that came with the runner's slot, if any.
    @inline(__always)
    final func finishAfterStart(handOff: FinishHandOff) -> (finished: Bool, next: ConcurrentOperation?) {
        guard let tail = finishKeepingTail(handOff: handOff, holdsTail: false) else { return (false, nil) }
        return (true, completeTail(tail))
    }

    /// What is left of a finish once the operation has finished, its completion block has run
    /// and its dependents in other queues were handed over: the queue's part (unlinking it, its
    /// slot, the dependents in the same queue, the queue's waiters) and resuming the operation's
    /// own waiters. A procedure holds it until its did-finish observers have returned (see
    /// `LifeFlags.tailPending`), so that no wait returns before them.
    struct FinishTail {
        fileprivate var queue: Unmanaged<ConcurrentOperationQueue>?
        fileprivate var readyInSameQueue: OperationList
        /// `nil` when there are none (an empty array would cost a retain and a release).
        fileprivate var waiters: [Waiter]?
        fileprivate var dependencies: OperationList
        fileprivate var handOff: FinishHandOff
        fileprivate var holdsTail: Bool
    }

    /// The first part of a finish after the start: the state change, the completion block, the
    /// queue's did-finish, the release of dependents (those of other queues handed to their
    /// queues). Returns the rest, for ``completeTail(_:)``, or `nil` if this call did not finish
    /// the operation. With `holdsTail`, waits that begin from now on wait for the tail too.
    ///
    /// `lockHeld`: the caller holds `lock` (a procedure makes this step in its own
    /// finish's critical section, see `ProcedureOperation.finishCollecting`); it is let go of
    /// here.
    @inline(__always)
    final func finishKeepingTail(handOff: FinishHandOff, holdsTail: Bool, lockHeld: Bool = false) -> FinishTail? {
        if !lockHeld { lock.lock() }
        guard let finished = finishStepLocked() else {
            lock.unlock()
            return nil
        }
        lock.unlock()
        return finishAfterStep(finished, handOff: handOff, holdsTail: holdsTail)
    }

    /// Under `lock`: the finish step — the state becomes finished and what the rest of
    /// the finish needs is taken. Returns `nil` if the operation is not executing (not started,
    /// or already finishing). Must not call out.
    @inline(__always)
    private func finishStepLocked() -> Finished? {
        guard case .finalize = lifecycle.finish() else { return nil }
        lifecycle.finalized()
        willBecomeFinishedLocked()
        // The completion block and the dependencies are moved out (`swap`), not copied and then
        // cleared: a copy is a retain and the clearing a release, even of an empty value.
        var taken = Finished(
            completion: nil, queue: queueReference, dependencies: OperationList(),
            wasCancelled: lifecycle.isCancelled)
        swap(&taken.completion, &_completionBlock)
        swap(&taken.dependencies, &_dependencies)
        // An atomic load (no lock): the instrument, and then the errors of the outcome.
        if let queue = queueReference {
            taken.instrument = queue._withUnsafeGuaranteedRef { $0.instrumentSlot.current }
        } else if tellsDefaultInstrument {
            taken.instrument = OperationInstrumentation.defaultSlot.current
        }
        if taken.instrument != nil { taken.errors = instrumentErrorsLocked() }
        queueReference = nil
        processedDependencyCount = 0
        return taken
    }

    /// The rest of ``finishKeepingTail(handOff:holdsTail:lockHeld:)`` after the finish step, with
    /// no lock held.
    @inline(__always)
    private func finishAfterStep(_ finished: consuming Finished, handOff: FinishHandOff, holdsTail: Bool) -> FinishTail {
        finished.completion?()
        // The queue is alive: it counts this operation until `operationDidFinish`.
        finished.queue?._withUnsafeGuaranteedRef { $0.notifyDelegate(didFinish: self) }
        // Told after the completion block, before waiters are resumed and dependents released.
        if let instrument = finished.instrument {
            let errors = finished.errors ?? []
            tellFinished(
                finished.wasCancelled ? .cancelled(errors) : errors.isEmpty ? .succeeded : .failed(errors),
                queue: finished.queue?.takeUnretainedValue(), to: instrument)
        }

        let (released, waiters) = announceFinish(holdsTail: holdsTail)
        var readyInSameQueue = released
        if finished.wasCancelled && finished.queue != nil && !finished.dependencies.isEmpty {
            // All of them, not only the first `registeredDependencyCount`: an `addDependency`
            // racing with this finish may have registered an edge it has not counted yet.
            leaveDependents(of: finished.dependencies)
        }
        // Hand the dependents of other queues to their queues now; keep those of this one (the
        // usual case, checked here without a call).
        if !readyInSameQueue.isEmpty && !Self.arePending(readyInSameQueue, in: finished.queue) {
            handOverDependents(&readyInSameQueue, finishedIn: finished.queue)
        }
        return FinishTail(
            queue: finished.queue, readyInSameQueue: readyInSameQueue, waiters: waiters,
            dependencies: finished.dependencies, handOff: handOff, holdsTail: holdsTail)
    }

    /// Whether every operation of `released` is pending in `queue` (a snapshot, see
    /// ``isPending(in:)``).
    @inline(__always)
    private static func arePending(_ released: OperationList, in queue: Unmanaged<ConcurrentOperationQueue>?) -> Bool {
        guard let queue else { return false }
        return released.firstResult(from: 0) { $0.isPending(in: queue) ? nil : () } == nil
    }

    /// Hands the released dependents that are in other queues than `finishedQueue` (the finished
    /// operation's) to their queues, one call per run of dependents of one queue (a layer, in no
    /// queue, hands all of its dependents over), finishes the layers among them, and leaves in
    /// `released` those of `finishedQueue`. Out of line: most finishes release no dependent.
    @inline(never)
    private func handOverDependents(
        _ released: inout OperationList, finishedIn finishedQueue: Unmanaged<ConcurrentOperationQueue>?
    ) {
        var handOver: [ConcurrentOperation] = []
        var handOverQueue: ConcurrentOperationQueue?
        released.removeAll { dependent in
            // The usual case, a dependent in the same queue, needs neither the lock nor a retain.
            if let finishedQueue, dependent.isPending(in: finishedQueue) { return false }
            // Read (and retain) the dependent's queue under its lock: a stale ready-list entry may
            // let a worker run and finish the dependent meanwhile, which clears it; then the
            // queue may be gone, and there is nothing left to do.
            guard let queue = dependent.queueWhilePending else {
                // No queue: finished meanwhile (a stale ready-list entry), or a layer, which
                // finishes itself now that its last member has.
                dependent.lastDependencyDidFinishOutsideQueue()
                return true
            }
            if Unmanaged.passUnretained(queue).toOpaque() == finishedQueue?.toOpaque() { return false }
            if let pending = handOverQueue, pending !== queue {
                pending.makeReady(handOver)
                handOver.removeAll(keepingCapacity: true)
            }
            handOverQueue = queue
            handOver.append(dependent)
            return true
        }
        if let handOverQueue { handOverQueue.makeReady(handOver) }
    }

    /// The rest of a finish (see ``FinishTail``): the queue lets go of the operation and its
    /// waiters and the operation's waiters are resumed. Returns, for `.asyncRunner`, the operation
    /// that came with the runner's slot, if any.
    @inline(__always)
    @discardableResult
    final func completeTail(_ tail: consuming FinishTail) -> ConcurrentOperation? {
        let handOff = tail.handOff
        if tail.holdsTail {
            // Waits that began after the finish joined `waiters` meanwhile.
            let flags = lifeFlags.bitwiseAnd(~LifeFlags.tailPending, ordering: .sequentiallyConsistent).oldValue
            if flags & LifeFlags.hasWaiters != 0 {
                tail.waiters = lock.withLock { () -> [Waiter] in
                    defer { self.waiters = [] }
                    return self.waiters
                }
            }
        }
        var next: ConcurrentOperation?
        if handOff == .lastStepOnWorker && tail.queue != nil && WorkerOperation.holds(self) {
            // Finished on the thread of the worker that runs it: the worker tells the queue once
            // `execute()` returns, in the critical section where it takes its next operation.
            deferredReady = tail.readyInSameQueue
        } else if let queue = tail.queue {
            // The queue counts this operation only until it unlinks it; from then on another
            // finish may empty the queue, resume its waiters and let it go while this call still
            // starts workers. A worker of the queue holds it for its whole loop; any other thread
            // (a callback finishing the operation, an async runner) holds it for the call. The
            // queue settles the slot with the worker (`slotHandoff`) under its lock.
            // An async runner holds its queue for its whole run.
            if handOff == .asyncRunner {
                next = queue._withUnsafeGuaranteedRef { $0.runnerDidFinish(self, newlyReady: tail.readyInSameQueue) }
            } else {
                let retained: ConcurrentOperationQueue? =
                    queue._withUnsafeGuaranteedRef({ CurrentQueue.holds($0) }) ? nil : queue.takeUnretainedValue()
                queue._withUnsafeGuaranteedRef { $0.operationDidFinish(self, newlyReady: tail.readyInSameQueue) }
                withExtendedLifetime(retained) {}
            }
        }
        if let waiters = tail.waiters { waiters.resumeAll() }
        withExtendedLifetime(tail.dependencies) {}
        return next
    }

    /// Tells dependents and waiters that the operation has finished, its completion block done:
    /// from here on no dependent registers and no waiter waits (see `LifeFlags`). Releases the
    /// dependents that did register — each one's count drops by one — and returns, retained,
    /// those this made runnable, and the waiters to resume.
    ///
    /// With `holdsTail`, the waiters are left for ``completeTail(_:)``, which takes them (and
    /// those that come meanwhile) once the procedure's did-finish observers have returned.
    private func announceFinish(holdsTail: Bool) -> (runnable: OperationList, waiters: [Waiter]?) {
        let flags = lifeFlags.bitwiseOr(
            holdsTail ? LifeFlags.finished | LifeFlags.tailPending : LifeFlags.finished,
            ordering: .sequentiallyConsistent
        ).oldValue
        // Event streams have `finished` before waiters are resumed and dependents released.
        if flags & LifeFlags.hasEventStreams != 0 { LifecycleEventStreams.deliver(for: self) }
        var waiting: [Waiter]?
        if !holdsTail && flags & LifeFlags.hasWaiters != 0 {
            waiting = lock.withLock { () -> [Waiter] in
                defer { waiters = [] }
                return waiters
            }
        }
        guard flags & LifeFlags.hasDependents != 0 else { return (OperationList(), waiting) }
        // Under the component's lock: the entries are not retained, and each is alive while it is
        // listed (see `dependents`) — but only until the decrement that makes it runnable: from
        // then on a worker may take it (through a stale ready-list entry), run it, and its queue
        // release it before this loop is done with it. So an entry that this decrement may make
        // runnable is retained first.
        var unneeded = OperationList()
        // (It has a component: it registered a dependent before `hasDependents` was set. The
        // operation keeps it alive.)
        let graph = GraphComponent.lockedRootUnretained(fromBits: graphComponentBits.load(ordering: .acquiring))
        var runnable = OperationList()
        dependents.forEachEntry { entry in
            // The count changes only under the component's lock (only the flags change without it),
            // so only an entry whose count is 1 now can reach exactly 0 below.
            let mayBecomeRunnable = entry._withUnsafeGuaranteedRef {
                $0.readiness.load(ordering: .relaxed) & Readiness.countMask == 1
            }
            if mayBecomeRunnable { _ = entry.retain() }
            if entry._withUnsafeGuaranteedRef({ $0.dependencyDidFinish() }) {
                assert(mayBecomeRunnable, "a dependent's count changed outside its component's lock")
                runnable.append(mayBecomeRunnable ? entry.takeRetainedValue() : entry.takeUnretainedValue())
            } else if mayBecomeRunnable {
                // Cancelled, or still being enqueued, meanwhile: `cancel()` or the enqueuer
                // pushes it. The retain is given back after the lock.
                unneeded.append(entry.takeRetainedValue())
            }
        }
        dependents = UnretainedOperationList()
        graph._withUnsafeGuaranteedRef { $0.lock.unlock() }
        withExtendedLifetime(unneeded) {}
        return (runnable, waiting)
    }

    /// A cancelled operation finished without waiting for its dependencies: it leaves their
    /// `dependents` lists before its queue releases it. (Not only the lists of unfinished
    /// dependencies: one that has just set its finished flag may not have released its list yet.)
    /// (Indices rather than a for-in loop over the list, whose iterator may run unspecialised.)
    func leaveDependents(of dependencies: OperationList) {
        let graph = GraphComponent.lock(componentOf: self)
        defer { graph.lock.unlock() }
        for index in 0..<dependencies.count {
            while graph.unregister(self, from: dependencies[index]) {}
        }
    }

    /// What the finish step took (see ``finishStepLocked()``).
    private struct Finished {
        var completion: (@Sendable () -> Void)?
        var queue: Unmanaged<ConcurrentOperationQueue>?
        var dependencies: OperationList
        var wasCancelled: Bool
        var instrument: (any OperationInstrument)?
        /// Only when an instrument is told (`nil` saves a retain and a release of an empty array).
        var errors: [any Error]?
    }

    /// A registered dependency finished. Returns `true` if this made the operation runnable.
    final func dependencyDidFinish() -> Bool {
        readiness.subtract(1, ordering: .acquiringAndReleasing).newValue == 0
    }

    /// The queue of an operation that is enqueued and has not finished.
    final var queueWhilePending: ConcurrentOperationQueue? { lock.withLock { queue } }
}
