// OperationLayer: a set of operations that dependents wait for through one edge each — a
// body-less operation whose dependencies are the members, registered once, that finishes itself
// on the thread of its last member's finish. It is in no queue and takes no slot.

import Synchronization

/// A set of operations that other operations can wait for as one dependency: a dependent that
/// adds the layer with ``ConcurrentOperation/addDependency(_:)`` waits until every member has
/// finished, and costs one dependency edge instead of one per member.
///
/// ```swift
/// let queue = ConcurrentOperationQueue(name: "layers")
/// var previous: OperationLayer?
/// for _ in 0..<100 {
///     let members = (0..<100).map { _ in ClosureOperation { work() } }
///     if let previous {
///         for member in members { try member.addDependency(previous) }
///     }
///     try queue.addOperations(members, waitUntilFinished: false)
///     previous = OperationLayer(members)
/// }
/// await queue.waitUntilAllOperationsAreFinished()
/// ```
///
/// Each member registers one edge to the layer and each dependent one edge from it, so `n`
/// members and `m` dependents cost `n + m` edges where depending on each member would cost
/// `n × m` (the 100 layers of 100 above: about 20,000 edges instead of 990,000).
///
/// - **Members are fixed** when the layer is made. To wait for more operations, make another
///   layer; a layer may be a member of another. ``ConcurrentOperation/removeDependency(_:)`` on a
///   layer does nothing, and ``ConcurrentOperation/addDependency(_:)`` on one throws
///   ``OperationError/Code-swift.struct/dependentAlreadyExecuting``.
/// - **It runs by itself.** A layer is never added to a queue (adding one throws
///   ``OperationError/Code-swift.struct/alreadyStarted``) and never takes a concurrency slot: it
///   is executing from the moment it is made, and it finishes on the thread that finishes its last
///   member, before that finish returns, releasing its dependents to their queues there. Its
///   completion block runs on that thread. A layer with no members, or whose members have all
///   finished, finishes in its initialiser.
/// - **A finished member is a finished member**, whatever its outcome: a cancelled member counts
///   once its queue has reached it, as for any dependency (a cancelled operation that is in no
///   queue never finishes, so a layer of it never does either). A failed procedure counts too.
/// - **Members may be in any queues, or in none yet**; dependents may be in any queues. A member
///   added to a queue after the layer was made is waited for like any other.
/// - **Cycles**: an edge that would make a member wait, directly or not, for a dependent of its
///   layer is refused with ``OperationError/Code-swift.struct/dependencyCycle``, naming the
///   cycle through the layer — when the member is added to its queue, or when the edge is added
///   if the member is in one already.
/// - **Cancelling the layer** releases its dependents at once, without waiting for the members,
///   as cancelling any dependency does; the members are not cancelled (cancel them yourself to
///   stop them). ``ConcurrentOperation/finish()`` does nothing on a layer.
/// - **Seen from outside**: ``ConcurrentOperation/dependencies`` lists the members until the
///   layer finishes; ``unfinishedMembers`` those still running or waiting. A queue snapshot
///   explains a dependent that waits for a layer with a
///   ``OperationSnapshot/Blocker/layer(_:unfinishedMembers:)`` blocker naming those members, and
///   so does the stall watchdog's report.
/// - A layer keeps itself alive until it finishes (its members' edges point at it).
public final class OperationLayer: ConcurrentOperation, @unchecked Sendable {
    // (Its own state is `memberCount`, immutable, and `completed`, an atomic.)
    /// The number of members the layer was made with (an operation given twice counts twice).
    public let memberCount: Int

    /// Set by the one call that completes the layer (see `complete()`).
    private let completed = Atomic<Bool>(false)

    /// Makes a layer of `members`: operations that wait for it wait for every one of them.
    ///
    /// The layer registers one edge from each member at once; members that have finished are
    /// counted as finished. If every member has finished (or there are none), the layer finishes
    /// before this returns.
    ///
    /// - Parameters:
    ///   - members: The operations of the set, in any queues or in none. Giving one twice is
    ///     harmless.
    ///   - name: A name for logs, errors and snapshots.
    @inlinable
    public convenience init<Members: Sequence>(_ members: Members, name: String? = nil)
    where Members.Element: ConcurrentOperation {
        // Inlined, so that the copy is specialised for the caller's sequence (unspecialised, it
        // cost more than registering the edges).
        self.init(memberArray: members.map { $0 as ConcurrentOperation }, name: name)
    }

    /// Makes a layer of `members` (see ``init(_:name:)``).
    @usableFromInline
    init(memberArray members: [ConcurrentOperation], name: String?) {
        let list = OperationList(members)
        memberCount = list.count
        super.init(name: name)
        // Held while the edges are registered, as a queue holds it while it enqueues: a member
        // that finishes meanwhile cannot complete the layer.
        readiness.store(Readiness.enqueuing, ordering: .releasing)
        lock.withLock {
            _dependencies = list
            _ = startStepLocked()
        }
        // Members list the layer unretained until they release it: it keeps itself alive until
        // it completes.
        _ = Unmanaged.passUnretained(self).retain()
        do {
            try DependencyGraph.registerDependencies(of: self)
        } catch {
            // A new layer has no dependents, so no edge into it can close a cycle.
            preconditionFailure("Internal inconsistency: a new layer's members closed a cycle: \(error)")
        }
        let value = readiness.bitwiseAnd(~Readiness.enqueuing, ordering: .acquiringAndReleasing).newValue
        if Readiness.isRunnable(value) { complete() }
    }

    /// The members that have not finished (empty once the layer has finished).
    public var unfinishedMembers: [ConcurrentOperation] {
        lock.withLock { _dependencies.array }.filter { !$0.hasFinished }
    }

    /// Cancels the layer: its dependents stop waiting for it and are released at once (on the
    /// calling thread, before this returns); the members are not cancelled and carry on.
    /// Cancelling a finished layer does nothing.
    public override func cancel() {
        super.cancel()
        guard isCancelled else { return }
        let old = readiness.bitwiseOr(Readiness.cancelled, ordering: .acquiringAndReleasing).oldValue
        // Only if the members had not released the layer yet (else their last finish completes it).
        guard Readiness.becameRunnableByCancelling(old) else { return }
        // It leaves its members' lists before it lets itself go.
        leaveDependents(of: lock.withLock { _dependencies })
        complete()
    }

    /// Does nothing and returns `false`: a layer finishes by itself when its last member does.
    /// To release its dependents early, ``cancel()`` it.
    @discardableResult
    public override func finish() -> Bool { false }

    override func refusalOfManualStart() -> OperationError? {
        OperationError(
            isFinished ? .alreadyFinished : .alreadyStarted, operations: [displayName],
            "a layer starts when it is made and finishes when its last member finishes")
    }

    override var allowsRemovingDependencies: Bool { false }

    /// A layer runs nothing: no instrument is told of it (its members and dependents are).
    override var tellsDefaultInstrument: Bool { false }

    override func lastDependencyDidFinishOutsideQueue() {
        complete()
    }

    /// Finishes the layer (releasing its dependents) and gives back the retain it held on itself;
    /// the caller holds another. Only the first call does anything.
    private func complete() {
        guard completed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            return
        }
        finishAfterStart()
        Unmanaged.passUnretained(self).release()
    }
}
