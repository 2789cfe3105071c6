// The workflow locks: one per workflow, guarding its structure and the state of its tasks, and
// the way a task finds the lock that guards it — a shared one before it is added, its workflow's after.

import Synchronization

/// The lock of one workflow: its structure and counts, and every field of its tasks. The tasks in
/// no workflow share one (``WorkflowTaskLockPointer/unattached``, ``WorkflowTask/withTaskLock(_:)``).
///
/// Two workflows never share a lock, and no code takes two workflow locks at once, except
/// ``Workflow/add(_:prerequisites:keyedPrerequisites:)``, which takes the shared lock of the tasks
/// in no workflow inside the workflow's to move the task in; nothing takes that lock and then
/// another, so the order cannot deadlock. A sub-workflow has its own lock: what a ``SubworkflowTask`` does to its
/// sub-workflow (start, cancel, retry, reset, reading its state) happens with no other workflow
/// lock held — in the effects of a change, after the change released its lock.
final class WorkflowLock: @unchecked Sendable {  // `workflow` is set once, before the lock is shared
    private let mutex = Lock()
    /// The workflow that owns the lock, held weakly; `nil` for the shared lock of the tasks in no
    /// workflow. Set by the workflow's initialiser, before any task can move under the lock. Its
    /// tasks reach their workflow through it (``WorkflowTask/workflow``): one weak reference per
    /// workflow instead of one per task.
    weak var workflow: Workflow?
    /// Whether this is the shared lock of the tasks in no workflow (``WorkflowTaskLockPointer/unattached``):
    /// read through an unretained reference, it tells the two kinds apart without touching the
    /// static (a `swift_once`) or retaining either lock.
    let isShared: Bool

    init(isShared: Bool = false) {
        self.isShared = isShared
    }

    @inline(__always)
    func lock() { mutex.lock() }

    @inline(__always)
    func unlock() { mutex.unlock() }

    /// Runs `body` with the lock held and returns its result. No code of users runs under it.
    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        mutex.lock()
        defer { mutex.unlock() }
        return try body()
    }
}

/// Which lock guards a task: the lock shared by all the tasks in no workflow until it is added
/// to a workflow, then its workflow's, for good. The task holds its workflow's lock strongly
/// (through a retain taken by the move and given back by `deinit`); the shared one lives forever.
///
/// Sharing one lock among the tasks not yet added costs a task nothing it needs (a task is read
/// and set up there only briefly, before it is added) and saves every task a lock of its own.
/// The order argument above still holds: no code takes the shared lock and then another.
struct WorkflowTaskLockPointer: ~Copyable {
    /// The lock of every task in no workflow.
    static let unattached = WorkflowLock(isShared: true)
    /// The lock that guards the task now: `unattached`, then its workflow's (retained).
    private let current: Atomic<Unmanaged<WorkflowLock>>

    /// `unattached`, guarding the task while it is in no workflow.
    var own: WorkflowLock { Self.unattached }

    init() {
        current = Atomic(Unmanaged.passUnretained(Self.unattached))
    }

    deinit {
        let lock = current.load(ordering: .acquiring)
        if !lock._withUnsafeGuaranteedRef({ $0.isShared }) { lock.release() }
    }

    /// The lock that guards the task now. Under the workflow's lock, comparing it with that lock
    /// tells whether the task is in that workflow (it changes only under its new lock).
    var lock: WorkflowLock {
        current.load(ordering: .acquiring).takeUnretainedValue()
    }

    /// Whether `lock` guards the task now, compared by address: neither lock is retained. Under
    /// `lock`, this tells whether the task is in that lock's workflow.
    @inline(__always)
    func isGuarded(by lock: WorkflowLock) -> Bool {
        current.load(ordering: .acquiring).toOpaque() == Unmanaged.passUnretained(lock).toOpaque()
    }

    /// Runs `body` under the lock that guards the task. A lock read before the task moved is
    /// re-checked once held: the move happens under the shared lock, so once that lock is
    /// held the pointer is either still `own` (the move has not begun) or has moved (try again
    /// with the workflow's lock, which never changes).
    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        // The lock is used unretained: the shared one lives forever, and a workflow's is
        // retained by the pointer (the task, which the caller holds, keeps it) once it moved there.
        while true {
            let lock = current.load(ordering: .acquiring)
            lock._withUnsafeGuaranteedRef { $0.lock() }
            if current.load(ordering: .relaxed).toOpaque() == lock.toOpaque() {
                defer { lock._withUnsafeGuaranteedRef { $0.unlock() } }
                return try body()
            }
            lock._withUnsafeGuaranteedRef { $0.unlock() }
        }
    }

    /// Under the workflow's lock `lock`: moves the task under it, unless it was already moved
    /// (added to a workflow before). Takes the shared lock inside the workflow's, so a reader
    /// holding it never sees a half-done move.
    func move(to lock: WorkflowLock, _ prepare: () -> Bool) -> Bool {
        let shared = Unmanaged.passUnretained(own)
        shared._withUnsafeGuaranteedRef { $0.lock() }
        defer { shared._withUnsafeGuaranteedRef { $0.unlock() } }
        guard current.load(ordering: .relaxed).toOpaque() == shared.toOpaque(), prepare() else { return false }
        current.store(Unmanaged.passRetained(lock), ordering: .releasing)
        return true
    }
}
