import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// The scheduler: claiming and linking operations, the ready lists, worker loops and the
// concurrency slots they hold, and what happens when an operation finishes. See the section
// "How scheduling stays O(1)" of Documentation/Architecture.md.
extension ConcurrentOperationQueue {
    /// Claims `operation` for this queue and registers its dependencies. Leaves it flagged
    /// `enqueuing`, so that nothing pushes it to the ready list before `insert` does. Returns its
    /// priority, and whether it has operations to add along (see `ConcurrentOperation.didClaim()`).
    func prepare(
        _ operation: ConcurrentOperation, barrier pendingBarrier: ConcurrentOperation?,
        stamp: UInt32 = CoarseClock.stamp()
    ) throws(OperationError) -> (priority: ConcurrentOperation.QueuePriority, addsAlong: Bool) {
        // `anchor`: see `DependencyGraph.registerDependencies(of:anchor:)`; nil: no edge to register.
        typealias Claim = (
            refusal: OperationError.Code?, priority: ConcurrentOperation.QueuePriority, anchor: UInt?, addsAlong: Bool
        )
        let claim = operation.lock.withLock { () -> Claim in
            if let queue = operation.queueReference {
                let same = queue.toOpaque() == Unmanaged.passUnretained(self).toOpaque()
                return (same ? .alreadyEnqueued : .enqueuedInAnotherQueue, .normal, nil, false)
            }
            let lifecycle = operation.lifecycle
            if lifecycle.isFinished { return (.alreadyFinished, .normal, nil, false) }
            if !lifecycle.isReady { return (.alreadyStarted, .normal, nil, false) }
            operation.queueReference = Unmanaged.passUnretained(self)
            operation.addedStamp = stamp
            if let pendingBarrier, pendingBarrier !== operation {
                operation._dependencies.append(pendingBarrier)
            }
            operation.readiness.store(
                Readiness.enqueuing | (lifecycle.isCancelled ? Readiness.cancelled : 0), ordering: .releasing)
            operation.queuedQualityOfService = operation.qualityOfServiceLocked
            let addsAlong = operation.didClaim()
            // A cancelled operation does not wait for its dependencies: it registers no edge, so
            // it can close no cycle (cancelling a member breaks one, as in Foundation).
            let registers = !operation._dependencies.isEmpty && !lifecycle.isCancelled
            return (
                nil, operation.queuePriorityLocked, registers ? DependencyGraph.anchorBits(ofDependenciesOf: operation) : nil,
                addsAlong
            )
        }
        if let refusal = claim.refusal {
            throw OperationError(refusal, operations: [operation.displayName], "cannot add to \(displayName)")
        }
        let result = (priority: claim.priority, addsAlong: claim.addsAlong)
        guard let anchor = claim.anchor else { return result }
        do {
            try DependencyGraph.registerDependencies(of: operation, anchor: anchor)
        } catch {
            operation.lock.withLock {
                operation.queueReference = nil
                operation.processedDependencyCount = 0
                operation.didUnclaim()
                if let pendingBarrier, let index = operation._dependencies.lastIndex(where: { $0 === pendingBarrier }) {
                    operation._dependencies.remove(at: index)
                }
            }
            operation.readiness.store(0, ordering: .releasing)
            throw error
        }
        return result
    }

    /// Undoes ``prepare(_:barrier:stamp:)`` for an operation of a batch that was refused as a whole:
    /// its dependency edges leave the graph, and it is in no queue again. Its `enqueuing` flag
    /// kept it from running meanwhile; a dependency that finished meanwhile has already dropped
    /// it from its list.
    func unprepare(_ operation: ConcurrentOperation, barrier pendingBarrier: ConcurrentOperation?) {
        let graph = GraphComponent.lock(componentOf: operation)
        defer { graph.lock.unlock() }
        let (dependencies, registered) = operation.lock.withLock {
            (operation._dependencies, operation.processedDependencyCount)
        }
        for index in 0..<registered {
            while graph.unregister(operation, from: dependencies[index]) {}
        }
        operation.lock.withLock {
            operation.queueReference = nil
            operation.processedDependencyCount = 0
            operation.didUnclaim()
            if let pendingBarrier, pendingBarrier !== operation,
               let index = operation._dependencies.lastIndex(where: { $0 === pendingBarrier }) {
                operation._dependencies.remove(at: index)
            }
        }
        operation.readiness.store(0, ordering: .releasing)
    }

    /// Links prepared operations — at least one — into the queue and releases their `enqueuing` flag.
    func insert<Operations: Sequence<(ConcurrentOperation, ConcurrentOperation.QueuePriority)>>(
        _ operations: Operations
    ) {
        let (spawn, released) = lock.withLock { () -> (Int, Unmanaged<ConcurrentOperation>?) in
            let wasEmpty = count == 0
            for (operation, priority) in operations { linkLocked(operation, priority: priority) }
            return insertedLocked(wasEmpty: wasEmpty)
        }
        startWorkers(spawn)
        Self.release(finished: released)
    }

    /// ``insert(_:)`` for one operation (`addOperation(_:)`): the operation is lent, where a
    /// one-element sequence of (operation, priority) pairs would retain it for the pair.
    func insert(one operation: ConcurrentOperation, priority: ConcurrentOperation.QueuePriority) {
        let (spawn, released) = lock.withLock { () -> (Int, Unmanaged<ConcurrentOperation>?) in
            let wasEmpty = count == 0
            linkLocked(operation, priority: priority)
            return insertedLocked(wasEmpty: wasEmpty)
        }
        startWorkers(spawn)
        Self.release(finished: released)
    }

    /// Under `lock`, in ``insert(_:)``: links one prepared operation and releases its
    /// `enqueuing` flag (pushing it to the ready list if that made it runnable).
    @inline(__always)
    private func linkLocked(_ operation: ConcurrentOperation, priority: ConcurrentOperation.QueuePriority) {
        operation.queuedPriority = priority
        let entry = Unmanaged.passRetained(operation)
        operation.queueNext = nil
        operation.queuePrevious = last
        if let last { last._withUnsafeGuaranteedRef { $0.queueNext = entry } } else { first = entry }
        last = entry
        count += 1
        let value = operation.readiness.bitwiseAnd(~Readiness.enqueuing, ordering: .acquiringAndReleasing)
        if Readiness.isRunnable(value.newValue) { ready.push(operation) }
    }

    /// Under `lock`, at the end of ``insert(_:)``: the workers to start and the finished
    /// operations to release.
    @inline(__always)
    private func insertedLocked(wasEmpty: Bool) -> (Int, Unmanaged<ConcurrentOperation>?) {
        // The queue keeps itself alive while it holds operations (none of these can finish
        // before the lock is let go).
        if wasEmpty && count > 0 { _ = Unmanaged.passUnretained(self).retain() }
        return (reserveWorkers(), takeFinishedLocked())
    }

    /// Under `lock`: the finished operations the queue still retains (see `finished`), taken
    /// for ``release(finished:)``.
    @inline(__always)
    func takeFinishedLocked() -> Unmanaged<ConcurrentOperation>? {
        guard let head = finished else { return nil }
        finished = nil
        finishedCount = 0
        return head
    }

    /// Gives back the queue's retain on each operation of a chain taken by `takeFinishedLocked()`.
    static func release(finished head: Unmanaged<ConcurrentOperation>?) {
        var node = head
        while let entry = node {
            node = entry._withUnsafeGuaranteedRef { $0.queueNext }
            entry.release()
        }
    }

    /// Operations that became runnable (their last dependency finished, or they were cancelled).
    func makeReady(_ operations: [ConcurrentOperation]) {
        let spawn = lock.withLock {
            for operation in operations { ready.push(operation) }
            return reserveWorkers()
        }
        startWorkers(spawn)
    }

    /// Puts back in the ready list an operation a worker took but did not start (see
    /// ``ConcurrentOperation/prepareToRun(on:instrumented:)``).
    func requeue(_ operation: ConcurrentOperation) {
        let spawn = lock.withLock {
            operation.isDispatched = false
            ready.push(operation)
            return reserveWorkers()
        }
        startWorkers(spawn)
    }

    /// Counts a new dependency of `operation` unless a worker has already taken it.
    func holdBackIfNotDispatched(_ operation: ConcurrentOperation) -> Bool {
        lock.withLock {
            if operation.isDispatched { return false }
            operation.readiness.add(1, ordering: .acquiringAndReleasing)
            return true
        }
    }

    /// `operation` finished on some thread, not as the last step of `execute()` on its worker:
    /// unlink it, return its slot if it held one, queue the dependents it released, and wake
    /// waiters if the queue is now empty.
    func operationDidFinish(_ operation: ConcurrentOperation, newlyReady: OperationList) {
        let effects = lock.withLock {
            // Settled under the lock, not before it: a worker whose exchange then sees `finished`
            // keeps its slot and takes this lock to look for its next operation only after this
            // critical section, so it finds the dependents pushed here (see "Slot hand-off" in
            // Documentation/Architecture.md). Exchanged before taking the lock, the worker could
            // look first, find nothing and leave, while `returningWorkers` below still counted
            // it: a dependent in the ready list with no worker coming for it.
            let handoff = operation.slotHandoff.exchange(SlotHandoff.finished, ordering: .acquiringAndReleasing)
            let releasesSlot = handoff == SlotHandoff.workerLeft
            // A worker that still holds its slot for this operation will take one entry itself;
            // an operation that gave its slot back (`slotReturned`) has neither slot nor worker.
            let workerComing = handoff == SlotHandoff.workerHolds
            return removeLocked(
                operation, releasesSlot: releasesSlot, newlyReady: newlyReady, returningWorkers: workerComing ? 1 : 0)
        }
        apply(effects, finished: operation)
    }

    /// An async runner finished `operation`: unlink it and, if the runner holds its slot (the
    /// worker left `execute()` first), take the next ready operation with that slot in the same
    /// step (or give the slot back: `nil`). If the worker still holds the slot, it takes the
    /// next operation itself (as in `operationDidFinish`), and this returns `nil`.
    ///
    /// A runner that keeps its slot parks the operations it finishes, as a worker does (see
    /// `finished` and `runWorker(handedOff:)`), and releases those parked when it gives its slot
    /// back: the operations are then freed in batches rather than one by one, each right after
    /// its finish — while the thread adding them allocates the next ones, which made both
    /// threads wait for the allocator's lock.
    func runnerDidFinish(_ operation: ConcurrentOperation, newlyReady: OperationList) -> ConcurrentOperation? {
        let (effects, next, parked) = lock.withLock {
            () -> (RemovalEffects, ConcurrentOperation?, Unmanaged<ConcurrentOperation>?) in
            // Settled under the lock, as in `operationDidFinish`.
            let runnerHoldsSlot = operation.slotHandoff.exchange(SlotHandoff.finished, ordering: .acquiringAndReleasing)
                == SlotHandoff.workerLeft
            let effects = removeLocked(
                operation, releasesSlot: false, newlyReady: newlyReady, returningWorkers: 1, parks: runnerHoldsSlot)
            guard runnerHoldsSlot else { return (effects, nil, nil) }
            let next = nextOrReleaseSlot()
            return (effects, next, next == nil ? takeFinishedLocked() : nil)
        }
        apply(effects, finished: operation)
        Self.release(finished: parked)
        return next
    }

    /// An operation still executing gave back the slot a worker had left it (a group that only
    /// waits for its children, see `ConcurrentOperation.waitsWithoutSlot`): free it, or use it
    /// for a ready operation.
    func slotReturned() {
        let spawn = lock.withLock {
            activeSlots -= 1
            return reserveWorkers()
        }
        startWorkers(spawn)
    }

    /// Hands `operation`, taken from the ready list with a slot, and the slot to a new worker.
    func startWorker(with operation: ConcurrentOperation) {
        if let executor {
            executor.enqueue { self.runStep(first: operation) }
            return
        }
        // The block holds no reference of its own: see `runWorker(handedOff:)`.
        let handedOff = Unmanaged.passRetained(operation)
        target.async { self.runWorker(handedOff: handedOff) }
    }

    /// What is left to do, without the lock, after an operation left the queue.
    struct RemovalEffects {
        var spawn: Int
        /// `nil` unless the queue emptied (an empty array would cost a retain and a release).
        var waiters: [Waiter]?
        var emptied: Bool
        /// Finished operations whose retain the queue gives back now (see `finished`).
        var released: Unmanaged<ConcurrentOperation>?
    }

    /// Under `lock`: unlinks a finished operation and queues the dependents it released.
    ///
    /// With `parks` (a Dispatch worker that goes on to its next operation), the queue keeps its
    /// retain on the operation for a while (see `finished`); otherwise it is given back in
    /// ``apply(_:finished:)``.
    func removeLocked(
        _ operation: ConcurrentOperation, releasesSlot: Bool, newlyReady: OperationList, returningWorkers: Int,
        parks: Bool = false
    ) -> RemovalEffects {
        let next = operation.queueNext
        let previous = operation.queuePrevious
        if let next { next._withUnsafeGuaranteedRef { $0.queuePrevious = previous } } else { last = previous }
        if let previous { previous._withUnsafeGuaranteedRef { $0.queueNext = next } } else { first = next }
        operation.queuePrevious = nil
        count -= 1
        let entry = Unmanaged.passUnretained(operation)
        var released: Unmanaged<ConcurrentOperation>?
        if parks && count > 0 {
            // The list's retain stays with the queue a little longer: see `finished`.
            operation.queueNext = finished
            finished = entry
            finishedCount += 1
            if finishedCount >= Self.finishedLimit { released = takeFinishedLocked() }
        } else {
            // Released now, with those parked if the queue is empty.
            operation.queueNext = count == 0 ? takeFinishedLocked() : nil
            released = entry
        }
        if releasesSlot { activeSlots -= 1 }
        if barrier === operation { barrier = nil }
        for dependent in newlyReady { ready.push(dependent) }
        let spawn = reserveWorkers(returningWorkers: returningWorkers)
        guard count == 0 else { return RemovalEffects(spawn: spawn, waiters: nil, emptied: false, released: released) }
        defer { waiters = [] }
        return RemovalEffects(spawn: spawn, waiters: waiters, emptied: true, released: released)
    }

    /// How many finished operations the queue parks at most before the finishing worker
    /// releases them (see `finished`).
    static let finishedLimit = 64

    func apply(_ effects: RemovalEffects, finished operation: ConcurrentOperation) {
        // The retains on finished operations the queue gave up (the caller still holds this one), …
        Self.release(finished: effects.released)
        startWorkers(effects.spawn)
        if let waiters = effects.waiters { waiters.resumeAll() }
        // … and, last of all, the queue's retain on itself.
        if effects.emptied { Unmanaged.passUnretained(self).release() }
    }

    /// Under `lock`: claims slots for new workers, one per ready entry not already covered by a
    /// worker that is about to look for work (`returningWorkers`, and the idle workers, which it
    /// wakes), up to the limit.
    func reserveWorkers(returningWorkers: Int = 0) -> Int {
        if _isSuspended || ready.isEmpty { return 0 }
        if idleWorkers > 0 { idleWake.wrappingAdd(1, ordering: .relaxed) }
        let spawn = min(
            ready.count - returningWorkers - idleWorkers, _maxConcurrentOperationCount - activeSlots)
        guard spawn > 0 else { return 0 }
        activeSlots += spawn
        return spawn
    }

    func startWorkers(_ count: Int) {
        guard count > 0 else { return }
        if let executor {
            for _ in 0..<count { executor.enqueue { self.runStep(first: nil) } }
            return
        }
        for _ in 0..<count {
            target.async { self.runWorker() }
        }
    }

    /// A worker: holds one slot and runs ready operations one after another, until none is left
    /// or an operation keeps the slot because it finishes after `execute()` returned.
    ///
    /// It parks the operations it finishes (see `finished`) and, as it leaves, releases those
    /// parked so far: so an operation is released by the next add, by the 64th finish after it,
    /// by the finish that empties the queue, or when its worker runs out of work.
    ///
    /// With nothing ready it does not leave at once: on the global queues it waits a moment as an
    /// idle worker (see `linger(since:)`), so that operations added one at a time, each a little
    /// after the last, find it there instead of each starting a new worker.
    ///
    /// Once its turn is over (`WorkerTurn`: at least 64 operations and the queue's turn time) with
    /// more ready — or sooner, after an operation that did a
    /// turn's work of its own and asked for it (`workerMakeWay`: a workflow's runner) — it goes to
    /// the back of its dispatch queue
    /// (a new job with the next operation and the slot), so that a long backlog does not hold up
    /// the other work of that queue — for the global queues, other queues' workers and Swift's
    /// tasks — until it is done. Those parked stay parked for the next turn.
    ///
    /// `handedOff`, if given, is the first operation, taken with the slot, with a retain of its
    /// own that the loop's variable takes over (and lets go once it has run): a block or a
    /// parameter holding the operation would keep it alive until the worker leaves.
    func runWorker(handedOff: Unmanaged<ConcurrentOperation>? = nil) {
        // The next operation, if the worker makes way, with a retain for the next turn (this
        // turn's references to it end with the closure).
        let handOff = CurrentQueue.with(self) { () -> Unmanaged<ConcurrentOperation>? in
            var lookup = NextLookup(mayLinger: underlyingQueue == nil)
            var next = handedOff?.takeRetainedValue() ?? lock.withLock { nextLocked(&lookup) }
            var turn = WorkerTurn(time: workerTurnTime)
            while true {
                if next == nil, let since = lookup.idleSince {
                    lookup.idleSince = nil
                    next = linger(since: since)
                }
                guard let operation = next else { break }
                next = runTaken(operation, parks: true, lookup: &lookup)
                // A turn may end while the worker is idle, with no next operation to hand off; it
                // makes way after the first operation it runs once it is back.
                if turn.countOne() || workerMakeWay.load(ordering: .relaxed), let next {
                    workerMakeWay.store(false, ordering: .relaxed)
                    return Unmanaged.passRetained(next)
                }
            }
            return nil
        }
        if let handOff {
            target.async { self.runWorker(handedOff: handOff) }
            return
        }
        Self.release(finished: lock.withLock { takeFinishedLocked() })
    }


    /// Runs `operation`, taken from the ready list with a slot, and returns the next ready
    /// operation for that slot, or `nil` once the slot went back (or to the operation, which
    /// finishes after `execute()` returned). One worker step, shared by the Dispatch workers'
    /// loop and the executor's jobs (`runStep(first:)`).
    ///
    /// `lookup`: how the worker looks for its next operation (whether it may become idle).
    @inline(__always)
    func runTaken(_ operation: ConcurrentOperation, parks: Bool = false, lookup: inout NextLookup) -> ConcurrentOperation? {
        switch operation.runOnWorker(of: self) {
        case .keepSlot:
            return lock.withLock { nextLocked(&lookup) }
        case .finishedOnWorker(let newlyReady):
            let (effects, next) = lock.withLock { () -> (RemovalEffects, ConcurrentOperation?) in
                let effects = removeLocked(
                    operation, releasesSlot: false, newlyReady: newlyReady, returningWorkers: 1, parks: parks)
                return (effects, nextLocked(&lookup))
            }
            apply(effects, finished: operation)
            return next
        case .slotHandedOver:
            return nil
        }
    }

    /// How a worker looks for its next operation when none is ready: whether it may wait a moment
    /// as an idle worker, and, once it is one, the `idleWake` count it watches.
    struct NextLookup {
        /// Only a Dispatch worker on a global queue: on a queue of the caller's (a serial one, the
        /// main queue) it would hold up that queue's other work while it waits.
        let mayLinger: Bool
        var idleSince: UInt?

        init(mayLinger: Bool) {
            self.mayLinger = mayLinger
        }
    }

    /// Under `lock`: the next operation to run, or `nil` — after giving the worker's slot back, or,
    /// if `lookup` allows, no other worker of the queue is idle and the queue could run one (not
    /// suspended, within its limit), after making the worker idle (`lookup.idleSince` set; see
    /// ``linger(since:)``).
    @inline(__always)
    func nextLocked(_ lookup: inout NextLookup) -> ConcurrentOperation? {
        if lookup.mayLinger && idleWorkers == 0 && !_isSuspended && activeSlots <= _maxConcurrentOperationCount {
            if let operation = ready.pop() { return operation }
            idleWorkers += 1
            lookup.idleSince = idleWake.load(ordering: .relaxed)
            return nil
        }
        return nextOrReleaseSlot()
    }

    /// An idle worker (see ``nextLocked(_:)``) waits a moment for ready work: it watches `idleWake`
    /// for at most `lingerTime` without giving up its thread, then takes the lock once,
    /// stops being idle, and takes the next ready operation or gives its slot back.
    ///
    /// Operations added one at a time, each made while the workers run the last, otherwise find no
    /// worker: each worker leaves as soon as it has caught up, and the next add starts a new one — a
    /// Dispatch job, a thread to wake and a lookup of the queue's lock, for a single operation (up
    /// to one worker per operation; see Performance.md, issue 17's ninth round).
    ///
    /// It watches rather than yields its thread: a yield may give the core away for a whole time
    /// slice, while `reserveWorkers` counts the idle worker as coming and starts none — the ready
    /// work then waited for it at every gap in the ready list (S4 with layers ran twice as slow on
    /// the quiet benchmark machine, 5 to 10 times under load; Performance.md, issue 17's tenth
    /// round). It is the only idle worker of its queue, and for at most `lingerTime`: more
    /// workers watching at once, or for longer, slowed the threads doing the work (the adding
    /// thread, the worker finishing the operation the others waited for).
    ///
    /// A reserved slot is never held for long: at most `lingerTime`, and an operation that
    /// becomes ready meanwhile wakes it (`reserveWorkers` counts idle workers as coming, so it
    /// starts none for that operation).
    private func linger(since: UInt) -> ConcurrentOperation? {
        let deadline = ContinuousClock.now.advanced(by: Self.lingerTime)
        var spins = 0
        while idleWake.load(ordering: .relaxed) == since {
            spins &+= 1
            if spins & 31 == 0 && ContinuousClock.now >= deadline { break }
        }
        return lock.withLock {
            idleWorkers -= 1
            return nextOrReleaseSlot()
        }
    }

    /// How long an idle worker waits for ready work (see ``linger(since:)``): 3 µs, the time of
    /// some ten operations added one at a time on the benchmark's machine. Longer watches slowed
    /// the threads doing the work (10 µs: a workflow's chain 1.45x its operations' time instead of
    /// 1.25x; 30 µs: S4 with layers), and did not keep more one-by-one adds.
    static let lingerTime: Duration = .microseconds(3)

    /// Under `lock`: the next operation to run, or `nil` after giving the worker's slot back.
    func nextOrReleaseSlot() -> ConcurrentOperation? {
        if !_isSuspended && activeSlots <= _maxConcurrentOperationCount, let operation = ready.pop() {
            return operation
        }
        activeSlots -= 1
        return nil
    }
}
