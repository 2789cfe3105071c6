// WorkflowIndices: the indices of a task's prerequisites or of its dependents.

/// The indices of a task's prerequisites or dependents, in order: one is kept inline, more in an
/// array. A task of a chain has one prerequisite and one dependent, so it allocates nothing for
/// them (two arrays of one element were two allocations per task, and two frees).
///
/// The array is in use once it has storage (the empty array has none), and is then mutated in
/// place exactly like a plain `[Int]`, so a task with many prerequisites or dependents costs what
/// it did with arrays.
struct WorkflowIndices: RandomAccessCollection, Sendable {
    /// The only index, while there is one and the array is not in use; -1 otherwise.
    private var single = -1
    /// Every index, once there are two or more (or room was reserved for them).
    private var all: [Int] = []

    init() {}

    /// Whether the indices are in `all` (which then has storage), not in `single`.
    @inline(__always)
    private var usesArray: Bool { all.capacity > 0 }

    var startIndex: Int { 0 }
    var endIndex: Int { usesArray ? all.count : (single >= 0 ? 1 : 0) }
    var isEmpty: Bool { usesArray ? all.isEmpty : single < 0 }
    var last: Int? { usesArray ? all.last : (single >= 0 ? single : nil) }

    subscript(position: Int) -> Int {
        if usesArray { return all[position] }
        precondition(position == 0 && single >= 0, "index out of range")
        return single
    }

    /// Makes room for `count` indices, if more than one (one needs no room).
    mutating func reserveCapacity(_ count: Int) {
        guard count > 1 else { return }
        all.reserveCapacity(count)
        if single >= 0 {
            all.insert(single, at: 0)
            single = -1
        }
    }

    mutating func append(_ index: Int) {
        if usesArray {
            all.append(index)
        } else if single < 0 {
            single = index
        } else {
            all = [single, index]
            single = -1
        }
    }

    /// Appends `index` unless it is already the last one (a task added with a prerequisite given
    /// twice is that prerequisite's last dependent already), in one access. Returns whether it
    /// was appended, and whether there were none before.
    @inline(__always)
    mutating func appendUnlessLast(_ index: Int) -> (appended: Bool, wasEmpty: Bool) {
        if usesArray {
            if all.last == index { return (false, false) }
            let wasEmpty = all.isEmpty
            all.append(index)
            return (true, wasEmpty)
        }
        if single == index { return (false, false) }
        let wasEmpty = single < 0
        append(index)
        return (true, wasEmpty)
    }

    /// The indices as an array.
    var array: [Int] { usesArray ? all : (single >= 0 ? [single] : []) }

    /// Calls `body` with each index in order, as fast as iterating an array.
    @inline(__always)
    func forEachIndex(_ body: (Int) throws -> Void) rethrows {
        if usesArray {
            for index in all { try body(index) }
        } else if single >= 0 {
            try body(single)
        }
    }
}
