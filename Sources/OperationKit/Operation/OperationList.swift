/// A list that holds a single element without allocating.
///
/// Most operations have one dependency or one dependent (a chain, a fan-in), so `dependencies`
/// and `dependents` keep one element inline and only allocate an array for two or more.
struct SmallList<Element>: RandomAccessCollection, RangeReplaceableCollection {
    private enum Storage {
        case one(Element)
        case many([Element])
    }

    private var storage: Storage

    init() {
        storage = .many([])
    }

    init<Elements: Sequence<Element>>(_ operations: Elements) {
        self.init(array: Array(operations))
    }

    private init(array: [Element]) {
        storage = array.count == 1 ? .one(array[0]) : .many(array)
    }

    var startIndex: Int { 0 }

    var endIndex: Int {
        switch storage {
        case .one: 1
        case .many(let operations): operations.count
        }
    }

    subscript(position: Int) -> Element {
        switch storage {
        case .one(let operation):
            precondition(position == 0, "Internal inconsistency: index \(position) of a one-element SmallList")
            return operation
        case .many(let operations):
            return operations[position]
        }
    }

    /// The elements as an array.
    var array: [Element] {
        switch storage {
        case .one(let operation): [operation]
        case .many(let operations): operations
        }
    }

    mutating func append(_ operation: Element) {
        switch storage {
        case .one(let first):
            storage = .many([first, operation])
        case .many(var operations):
            if operations.isEmpty {
                storage = .one(operation)
                return
            }
            storage = .many([])  // keep the array uniquely referenced while it grows
            operations.append(operation)
            storage = .many(operations)
        }
    }

    mutating func replaceSubrange<Elements: Collection<Element>>(
        _ subrange: Range<Int>, with newElements: Elements
    ) {
        var operations = array
        storage = .many([])
        operations.replaceSubrange(subrange, with: newElements)
        self = SmallList(array: operations)
    }

    mutating func removeAll(where shouldBeRemoved: (Element) throws -> Bool) rethrows {
        switch storage {
        case .one(let operation):
            if try shouldBeRemoved(operation) { storage = .many([]) }
        case .many(var operations):
            storage = .many([])
            try operations.removeAll(where: shouldBeRemoved)
            self = SmallList(array: operations)
        }
    }
}

/// Operations, retained.
typealias OperationList = SmallList<ConcurrentOperation>

/// Operations, not retained: for `dependents`, whose entries are kept alive by their queues (see
/// `ConcurrentOperation.dependents`).
typealias UnretainedOperationList = SmallList<Unmanaged<ConcurrentOperation>>
