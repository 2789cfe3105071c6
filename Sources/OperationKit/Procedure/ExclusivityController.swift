/// The process-wide register of ``MutuallyExclusive`` categories: which procedure holds each, and
/// who waits.
///
/// A procedure asks for all its categories at once, after its dependencies finished and its
/// conditions were satisfied, and holds them until it has finished. Requests are granted in the
/// order they were made: a request waits while any of its categories is held, or is wanted by an
/// earlier waiting request (so a procedure with many categories is not starved by a stream of
/// procedures with one). Since a waiting procedure holds nothing, and a holder waits for nothing
/// but a slot in its queue, procedures cannot deadlock over categories — unless a holder's own
/// work waits for another procedure of one of its categories (a ``GroupOperation`` whose child
/// shares the group's category never finishes).
enum ExclusivityController {
    private struct Request {
        let owner: ObjectIdentifier
        let categories: Set<String>
        let grant: @Sendable () -> Void
    }

    private static let lock = Lock()
    // protected by lock
    nonisolated(unsafe) private static var holders: [String: ObjectIdentifier] = [:]
    // protected by lock
    nonisolated(unsafe) private static var waiting: [Request] = []

    /// Takes `categories` for `owner` now and returns `true`, or queues the request and returns
    /// `false`; `grant` is then called once, later, without any lock held, on the thread whose
    /// `release` (or `withdraw` of an earlier request) let the request through — unless the
    /// request is withdrawn first.
    static func request(_ categories: Set<String>, for owner: ObjectIdentifier, grant: @escaping @Sendable () -> Void) -> Bool {
        lock.withLock {
            let blocked = waiting.reduce(into: Set<String>()) { $0.formUnion($1.categories) }
            if categories.allSatisfy({ holders[$0] == nil }) && categories.isDisjoint(with: blocked) {
                for category in categories { holders[category] = owner }
                return true
            }
            waiting.append(Request(owner: owner, categories: categories, grant: grant))
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

    /// Gives back every category `owner` holds and grants the requests that can now proceed.
    static func release(_ owner: ObjectIdentifier) {
        let granted = lock.withLock { () -> [@Sendable () -> Void] in
            holders = holders.filter { $0.value != owner }
            return grantLocked()
        }
        for grant in granted { grant() }
    }

    /// Under `lock`: grants waiting requests in order, each unless one of its categories is held
    /// or wanted by an earlier request still waiting.
    private static func grantLocked() -> [@Sendable () -> Void] {
        var granted: [@Sendable () -> Void] = []
        var blocked = Set<String>()
        var index = 0
        while index < waiting.count {
            let request = waiting[index]
            if request.categories.allSatisfy({ holders[$0] == nil }) && request.categories.isDisjoint(with: blocked) {
                for category in request.categories { holders[category] = request.owner }
                granted.append(request.grant)
                waiting.remove(at: index)
            } else {
                blocked.formUnion(request.categories)
                index += 1
            }
        }
        return granted
    }
}
