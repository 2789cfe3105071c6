// ConcurrentOperation: reporting progress (completed / total units) from any thread, reading it,
// and its weight in an aggregate — kept in a side table, so that an operation has no field for it.

import Synchronization

extension ConcurrentOperation {
    /// Reports how far the operation's work has come, from any thread: `completed` of `total`
    /// units (for example bytes, or items). ``progress`` then says so, and the operation's queue
    /// (a group's, a workflow's) counts the fraction in its aggregate while the operation runs.
    ///
    /// ```swift
    /// final class Copy: ConcurrentOperation, @unchecked Sendable {
    ///     override func execute() {
    ///         for index in files.indices {
    ///             copyFile(files[index])
    ///             reportProgress(completed: Int64(index + 1), total: Int64(files.count))
    ///         }
    ///         finish()
    ///     }
    /// }
    /// ```
    ///
    /// Each report replaces the previous one. Reports made after the operation finished change
    /// ``progress``'s units but not its aggregate, where a finished operation counts as complete.
    ///
    /// An operation that never reports pays nothing for this: no stored property, and nothing in
    /// its steps (its reports live in a process-wide side table, found through a flag bit).
    ///
    /// - Parameters:
    ///   - completed: The units done, from 0 to `total`.
    ///   - total: The units of the whole work; 0 if not known yet.
    public func reportProgress(completed: Int64, total: Int64) {
        ReportedProgressTable.update(self) { entry in
            entry.completed = completed
            entry.total = total
            entry.fraction = OperationProgress(completed: completed, total: total).fractionCompleted
            entry.hasReported = true
        }
        progressDidChange()
    }

    /// How far the operation has come: what it last reported with
    /// ``reportProgress(completed:total:)`` — complete once it has finished (a cancelled
    /// operation finishes too) — or, if it never reported, one unit: `0/1`, then `1/1`. A
    /// ``GroupOperation``'s is the aggregate of its children (see ``GroupOperation/childrenProgress``).
    /// Readable from any thread.
    public var progress: OperationProgress {
        if let group = self as? GroupOperation { return group.childrenProgress }
        return ownProgress
    }

    /// The operation's own progress (for a group, what its children's aggregate reported last).
    var ownProgress: OperationProgress {
        let finished = isFinished
        guard let entry = ReportedProgressTable.entry(for: self), entry.hasReported else {
            return OperationProgress(completed: finished ? 1 : 0, total: 1, isFinished: finished)
        }
        if finished {
            let completed = max(entry.completed, entry.total)
            return OperationProgress(completed: completed, total: entry.total, fractionCompleted: 1, isFinished: true)
        }
        return OperationProgress(completed: entry.completed, total: entry.total, fractionCompleted: entry.fraction)
    }

    /// The operation's weight in the progress of the queue, group or workflow it is added to:
    /// how many units it counts for there (1 by default; 0 leaves it out). Set it before adding
    /// the operation: the queue reads it when the operation is added. Readable and writable from
    /// any thread. A weight outside 0 to ``OperationProgress/maximumWeight`` is clamped to that
    /// range (a negative weight counts as 0): a weight is no reason to stop the work.
    public var progressWeight: Int64 {
        get { ReportedProgressTable.entry(for: self)?.weight ?? 1 }
        set {
            let weight = OperationProgress.clampedWeight(newValue)
            ReportedProgressTable.update(self) { $0.weight = weight }
        }
    }

    /// Tells the operation's queue that its reported progress changed, if the queue aggregates
    /// progress (one atomic load when it does not).
    func progressDidChange() {
        guard let queue = lock.withLock({ self.queue }) else { return }
        queue.operationProgressDidChange(self)
    }

    /// Whether the operation may have an entry in the reported-progress side table: whether
    /// the table has any (one atomic load).
    var mayHaveReportedProgress: Bool { ReportedProgressTable.hasEntries }
}

/// The process-wide side table of what operations reported with
/// ``ConcurrentOperation/reportProgress(completed:total:)`` and their
/// ``ConcurrentOperation/progressWeight``, by identity, so that an operation has no field for
/// them, nor a flag bit (the operation's flag byte is full, and a wider one would take the
/// instance into the next allocation size: 256 heap bytes per pending operation instead of 240).
/// `entryCount`, changed under the lock, tells whether the table has entries at all: while it has
/// none, an operation's `deinit` and a read of its progress cost one atomic load; while it has
/// some, every operation's `deinit` looks its identity up under the lock.
///
/// Locking: `lock` is a leaf: under it no other lock is taken and no code of the user's runs. It
/// may be taken under any lock (a queue's, a progress broadcaster's, an operation's `deinit`).
enum ReportedProgressTable {
    struct Entry {
        var completed: Int64 = 0
        var total: Int64 = 0
        /// `completed / total` clamped, or a group's children's aggregate fraction.
        var fraction: Double = 0
        var hasReported = false
        var weight: Int64 = 1
        /// A group whose children's progress is forwarded to this entry.
        var forwardsChildren = false
    }

    private static let lock = Lock()
    /// The number of entries (changed under `lock`; read without it).
    private static let entryCount = Atomic<Int>(0)

    /// Whether any operation has an entry.
    static var hasEntries: Bool { entryCount.load(ordering: .acquiring) > 0 }
    // protected by lock. The key's operation is alive: its deinit removes its entry.
    nonisolated(unsafe) private static var entries: [ObjectIdentifier: Entry] = [:]

    /// Changes `operation`'s entry (made if missing) and returns `body`'s result.
    @discardableResult
    static func update<Result>(_ operation: ConcurrentOperation, _ body: (inout Entry) -> Result) -> Result {
        lock.withLock {
            let id = ObjectIdentifier(operation)
            if entries[id] == nil {
                entries[id] = Entry()
                entryCount.add(1, ordering: .releasing)
            }
            return body(&entries[id, default: Entry()])
        }
    }

    /// `operation`'s entry, if it has one (one atomic load if not).
    static func entry(for operation: ConcurrentOperation) -> Entry? {
        guard operation.mayHaveReportedProgress else { return nil }
        return lock.withLock { entries[ObjectIdentifier(operation)] }
    }

    /// From the deinit of an operation, while the table has entries.
    static func operationWillDeallocate(_ id: ObjectIdentifier) {
        lock.withLock {
            if entries.removeValue(forKey: id) != nil { entryCount.subtract(1, ordering: .releasing) }
        }
    }

    /// Whether the table has an entry for the operation with this identity (for tests).
    static func hasEntry(for id: ObjectIdentifier) -> Bool {
        lock.withLock { entries[id] != nil }
    }
}
