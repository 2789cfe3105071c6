/// The process-wide register of ``MutuallyExclusive`` categories: which procedures hold each, and
/// who waits.
///
/// A procedure asks for all its categories at once, after its dependencies finished and its
/// conditions were satisfied, and holds them until it has finished.
///
/// **A hold covers the holder's subtree.** The descendants of a ``GroupOperation`` (its children,
/// their produced operations, the children of nested groups: every operation whose queue is,
/// directly or through other groups, the child queue of the group; likewise a ``RetryOperation``'s
/// attempts) may take a category the group
/// holds: each category has a stack of holders, and a request may take a category that is free
/// or whose top holder is one of the requester's ancestors; the requester is then pushed on the
/// stack, and its release pops the category back to the ancestor. So descendants still exclude
/// each other, under the group's hold.
///
/// Requests are granted in the order they were made: a request also waits while one of its
/// categories is wanted by an earlier waiting request that is a *contender* — one that waits only
/// for earlier requests or for holders that are not groups (so a procedure with many categories
/// is not starved by a stream of procedures with one). A request waiting for a category held by a
/// group outside its ancestors is not a contender: the group may be waiting for a descendant that
/// wants the category, and that descendant must not queue behind the request.
///
/// A waiting procedure holds nothing, a holder that is not a group waits for nothing but its own
/// work, and a group waits for its descendants, which may take its categories; a procedure that
/// waits for a queue's concurrency slot leaves no category waiting on it for long, since a group
/// waiting for its children holds no slot. So procedures do not deadlock over categories —
/// unless two holders each wait for the other's category: a descendant of group A wanting a
/// category of group B while a descendant of B wants one of A (as with two nested locks taken in
/// opposite orders), or a holder's own work waiting for another procedure of its category.
enum ExclusivityController {
    private struct Request {
        let owner: ObjectIdentifier
        /// The requester, for snapshots; alive while the request waits (its grant holds it).
        let object: Unmanaged<AnyObject>?
        let lineage: Lineage
        let categories: Set<String>
        let grant: @Sendable () -> Void
    }

    /// Who a requester is: its ancestors (innermost first) and whether it is a group (or a
    /// retry: a procedure that waits for descendants).
    struct Lineage: Sendable {
        var ancestors: [ObjectIdentifier] = []
        var isGroup = false
    }

    private struct Holder {
        let owner: ObjectIdentifier
        /// The holder, for snapshots; alive while it holds (it gives its categories back in its
        /// finish, before its queue lets it go).
        let object: Unmanaged<AnyObject>?
        let isGroup: Bool
    }

    private static let lock = Lock()
    // protected by lock: per category, its holders, outermost first
    nonisolated(unsafe) private static var holders: [String: [Holder]] = [:]
    // protected by lock
    nonisolated(unsafe) private static var waiting: [Request] = []

    /// Takes `categories` for `procedure` now and returns `true`, or queues the request and
    /// returns `false`; `grant` is then called once, later, without any lock held, on the thread
    /// whose `release` (or `withdraw` of an earlier request) let the request through — unless the
    /// request is withdrawn first.
    static func request(
        _ categories: Set<String>, for procedure: ProcedureOperation, grant: @escaping @Sendable () -> Void
    ) -> Bool {
        // Worked out before taking `lock`: it takes the locks of operations and queues.
        let lineage = Lineage(ancestors: procedure.exclusivityAncestors, isGroup: procedure.waitsWithoutSlot)
        return request(
            categories, for: ObjectIdentifier(procedure), object: Unmanaged<AnyObject>.passUnretained(procedure),
            lineage: lineage, grant: grant)
    }

    static func request(
        _ categories: Set<String>, for owner: ObjectIdentifier, object: Unmanaged<AnyObject>? = nil,
        lineage: Lineage, grant: @escaping @Sendable () -> Void
    ) -> Bool {
        lock.withLock {
            let request = Request(owner: owner, object: object, lineage: lineage, categories: categories, grant: grant)
            var blocked = Set<String>()
            for earlier in waiting where isContenderLocked(earlier) { blocked.formUnion(earlier.categories) }
            if isFreeLocked(request) && categories.isDisjoint(with: blocked) {
                takeLocked(request)
                return true
            }
            waiting.append(request)
            return false
        }
    }

    /// Withdraws a waiting request of `owner`. Returns `true` if there was one (its grant will
    /// never be called); `false` if it was granted already or never made.
    static func withdraw(_ owner: ObjectIdentifier) -> Bool {
        let (withdrawn, granted): (Bool, [@Sendable () -> Void]) = lock.withLock {
            guard let index = waiting.firstIndex(where: { $0.owner == owner }) else { return (false, []) }
            waiting.remove(at: index)
            return (true, grantLocked())
        }
        for grant in granted { grant() }
        return withdrawn
    }

    /// Gives back every category `owner` holds (each falls back to the holder below it, if any)
    /// and grants the requests that can now proceed.
    static func release(_ owner: ObjectIdentifier) {
        let granted = lock.withLock { () -> [@Sendable () -> Void] in
            for (category, stack) in holders where stack.contains(where: { $0.owner == owner }) {
                let rest = stack.filter { $0.owner != owner }
                holders[category] = rest.isEmpty ? nil : rest
            }
            return grantLocked()
        }
        for grant in granted { grant() }
    }

    /// Under `lock`: whether each category of `request` is free or held (on top) by an ancestor.
    private static func isFreeLocked(_ request: Request) -> Bool {
        request.categories.allSatisfy { category in
            guard let top = holders[category]?.last else { return true }
            return request.lineage.ancestors.contains(top.owner)
        }
    }

    /// Under `lock`: whether a waiting request holds back later requests for its categories: it
    /// waits for nothing but earlier requests and holders that are not groups.
    private static func isContenderLocked(_ request: Request) -> Bool {
        request.categories.allSatisfy { category in
            guard let top = holders[category]?.last else { return true }
            return !top.isGroup || request.lineage.ancestors.contains(top.owner)
        }
    }

    private static func takeLocked(_ request: Request) {
        for category in request.categories {
            holders[category, default: []].append(
                Holder(owner: request.owner, object: request.object, isGroup: request.lineage.isGroup))
        }
    }

    /// Under `lock`: grants waiting requests in order, each unless one of its categories is held
    /// by a procedure that is not its ancestor, or wanted by an earlier contender still waiting.
    private static func grantLocked() -> [@Sendable () -> Void] {
        var granted: [@Sendable () -> Void] = []
        var blocked = Set<String>()
        var index = 0
        while index < waiting.count {
            let request = waiting[index]
            if isFreeLocked(request) && request.categories.isDisjoint(with: blocked) {
                takeLocked(request)
                granted.append(request.grant)
                waiting.remove(at: index)
            } else {
                if isContenderLocked(request) { blocked.formUnion(request.categories) }
                index += 1
            }
        }
        return granted
    }

    /// What one waiting request of a snapshot waits for: per category, the holders that keep it
    /// out (not its ancestors), or — when none does — the earlier waiting requests it queues
    /// behind. The objects are retained for the caller.
    struct WaitingRequest {
        var category: String
        var heldBy: [AnyObject]
        var queuedBehind: [AnyObject]
    }

    /// For each of `owners` that has a waiting request, what it waits for, read in one critical
    /// section (no other lock is taken under it; the objects are alive while they hold or wait).
    static func waits(of owners: Set<ObjectIdentifier>) -> [ObjectIdentifier: [WaitingRequest]] {
        if owners.isEmpty { return [:] }
        return lock.withLock {
            var result: [ObjectIdentifier: [WaitingRequest]] = [:]
            for (position, request) in waiting.enumerated() where owners.contains(request.owner) {
                var waits: [WaitingRequest] = []
                for category in request.categories.sorted() {
                    let stack = holders[category] ?? []
                    let heldBy: [Holder] = stack.last.map { top in
                        request.lineage.ancestors.contains(top.owner) ? [] : [top]
                    } ?? []
                    var behind: [AnyObject] = []
                    if heldBy.isEmpty {
                        for earlier in waiting[..<position] where earlier.categories.contains(category) {
                            if let object = earlier.object { behind.append(object.takeUnretainedValue()) }
                        }
                    }
                    waits.append(WaitingRequest(
                        category: category, heldBy: heldBy.compactMap { $0.object?.takeUnretainedValue() },
                        queuedBehind: behind))
                }
                result[request.owner] = waits.filter { !$0.heldBy.isEmpty || !$0.queuedBehind.isEmpty }
            }
            return result
        }
    }
}
