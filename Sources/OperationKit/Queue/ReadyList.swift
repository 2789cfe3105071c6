/// The ready operations of one queue: one intrusive FIFO per priority, linked through
/// `ConcurrentOperation.readyNext`. Push and pop are O(1). Protected by the queue's lock.
///
/// An entry may be stale: an operation that was given a new dependency after it was pushed, or
/// one that a worker already took. `pop` skips those, so no event ever has to search the list.
struct ReadyList {
    // Unretained: every listed operation is also in its queue's operation list, which retains it.
    // Inline (not `Array`s): no uniqueness check or heap access on each push and pop.
    private var heads = InlineArray<5, Unmanaged<ConcurrentOperation>?>(repeating: nil)
    private var tails = InlineArray<5, Unmanaged<ConcurrentOperation>?>(repeating: nil)
    /// Entries in the list, stale ones included.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Appends `operation` at the end of its priority's FIFO, unless it is already listed or a
    /// worker has already taken it.
    mutating func push(_ operation: ConcurrentOperation) {
        if operation.isInReadyList || operation.isDispatched { return }
        operation.isInReadyList = true
        let index = operation.queuedPriority.readyIndex
        let entry = Unmanaged.passUnretained(operation)
        if let tail = tails[index] {
            tail._withUnsafeGuaranteedRef { $0.readyNext = entry }
        } else {
            heads[index] = entry
        }
        tails[index] = entry
        count += 1
    }

    /// Removes and returns the first runnable operation of the highest priority, marking it taken.
    mutating func pop() -> ConcurrentOperation? {
        for index in 0..<5 {
            while let entry = heads[index] {
                let operation = entry.takeUnretainedValue()
                heads[index] = operation.readyNext
                if heads[index] == nil { tails[index] = nil }
                operation.readyNext = nil
                operation.isInReadyList = false
                count -= 1
                // A dependency added after the push makes the entry stale; the operation is
                // pushed again when that dependency finishes.
                guard Readiness.isRunnable(operation.readiness.load(ordering: .acquiring)) else { continue }
                operation.isDispatched = true
                return operation
            }
        }
        return nil
    }
}
