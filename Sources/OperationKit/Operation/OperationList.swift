/// A list of operations that holds a single operation without allocating.
///
/// Most operations have one dependency or one dependent (a chain, a fan-in), so `dependencies`
/// and `dependents` keep one element inline and only allocate an array for two or more.
struct OperationList: RandomAccessCollection, RangeReplaceableCollection {
    private enum Storage {
        case one(ConcurrentOperation)
        case many([ConcurrentOperation])
    }

    private var storage: Storage

    init() {
        storage = .many([])
    }

    init<Operations: Sequence<ConcurrentOperation>>(_ operations: Operations) {
        self.init(array: Array(operations))
    }

    private init(array: [ConcurrentOperation]) {
        storage = array.count == 1 ? .one(array[0]) : .many(array)
    }

    var startIndex: Int { 0 }

    var endIndex: Int {
        switch storage {
        case .one: 1
        case .many(let operations): operations.count
        }
    }

    subscript(position: Int) -> ConcurrentOperation {
        switch storage {
        case .one(let operation):
            precondition(position == 0, "Internal inconsistency: index \(position) of a one-element OperationList")
            return operation
        case .many(let operations):
            return operations[position]
        }
    }

    /// The operations as an array.
    var array: [ConcurrentOperation] {
        switch storage {
        case .one(let operation): [operation]
        case .many(let operations): operations
        }
    }

    mutating func append(_ operation: ConcurrentOperation) {
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

    mutating func replaceSubrange<Operations: Collection<ConcurrentOperation>>(
        _ subrange: Range<Int>, with newElements: Operations
    ) {
        var operations = array
        storage = .many([])
        operations.replaceSubrange(subrange, with: newElements)
        self = OperationList(array: operations)
    }

    mutating func removeAll(where shouldBeRemoved: (ConcurrentOperation) throws -> Bool) rethrows {
        switch storage {
        case .one(let operation):
            if try shouldBeRemoved(operation) { storage = .many([]) }
        case .many(var operations):
            storage = .many([])
            try operations.removeAll(where: shouldBeRemoved)
            self = OperationList(array: operations)
        }
    }
}
