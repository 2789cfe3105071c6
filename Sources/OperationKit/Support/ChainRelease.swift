/// Releases dependency lists one at a time instead of recursively.
///
/// An operation that never finished still holds its dependencies, each of which may hold its
/// own: dropping the last reference to a chain of a million operations that never ran would
/// otherwise deinitialise them recursively, a million frames deep, and overflow the stack. Each
/// `ConcurrentOperation.deinit` hands its dependencies here instead; on each thread, the first
/// call drains a list in a loop, and calls made by the deinitialisers it triggers only add to it.
/// (An operation that finished has already let go of its dependencies.)
enum ChainRelease {
    /// The lists waiting to be released on one thread. Confined to that thread.
    private final class Pending {
        var lists: [OperationList] = []
        var isDraining = false
    }

    private static let perThread = ThreadLocalReference<Pending>(ownsValues: true)

    private static var pending: Pending {
        if let pending = perThread.value { return pending }
        let pending = Pending()
        perThread.setRetained(pending)
        return pending
    }

    /// Releases `list` on this thread, without recursion. The caller must hold no other
    /// reference to it (hence `consuming`, and `consume` below: no copy may outlive the drain).
    static func release(_ list: consuming OperationList) {
        let pending = self.pending
        pending.lists.append(consume list)
        if pending.isDraining { return }
        pending.isDraining = true
        while let next = pending.lists.popLast() {
            _ = next  // dropping it may deinitialise operations, whose lists are appended above
        }
        pending.isDraining = false
    }
}
