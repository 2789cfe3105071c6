/// A list that holds a single element without allocating.
///
/// Most operations have one dependency or one dependent (a chain, a fan-in), so `dependencies`
/// and `dependents` keep one element inline and only allocate an array for two or more.
///
/// The element is stored in a non-generic enum (``SmallListStorage``): a generic enum with two
/// payloads cannot use the spare bits of a reference for its tag and would take 9 bytes (16 in a
/// class), where these take 8. An empty list is a case of its own, not an empty array: making,
/// copying and dropping one costs no reference counting (a finish passes several along).
struct SmallList<Storage: SmallListStorage>: RandomAccessCollection, RangeReplaceableCollection {
    typealias Element = Storage.Element

    private var storage: Storage

    init() {
        storage = Storage.none
    }

    init<Elements: Sequence<Element>>(_ elements: Elements) {
        self.init(array: Array(elements))
    }

    private init(array: [Element]) {
        switch array.count {
        case 0: storage = Storage.none
        case 1: storage = Storage(one: array[0])
        default: storage = Storage(many: array)
        }
    }

    var startIndex: Int { 0 }

    var endIndex: Int {
        switch storage.shape {
        case .none: 0
        case .one: 1
        case .many(let elements): elements.count
        }
    }

    subscript(position: Int) -> Element {
        switch storage.shape {
        case .none:
            preconditionFailure("Internal inconsistency: index \(position) of an empty SmallList")
        case .one(let element):
            precondition(position == 0, "Internal inconsistency: index \(position) of a one-element SmallList")
            return element
        case .many(let elements):
            return elements[position]
        }
    }

    /// The elements as an array.
    var array: [Element] {
        switch storage.shape {
        case .none: []
        case .one(let element): [element]
        case .many(let elements): elements
        }
    }

    mutating func append(_ element: consuming Element) {
        storage.append(element)
    }

    /// Appends an array in one step. Onto an empty list the array's buffer is shared, not
    /// copied: operations given the same dependencies (a layer of S4, `addDependencies(_:)` with
    /// one array) hold one buffer between them, with one retain each instead of one per element.
    /// (The generic `append(contentsOf:)` appended element by element, with a uniqueness check
    /// and a retain each.)
    mutating func append(contentsOf newElements: [Element]) {
        switch newElements.count {
        case 0: return
        case 1:
            append(newElements[0])
            return
        default: break
        }
        switch storage.shape {
        case .none:
            storage = Storage(many: newElements)
        case .one(let element):
            var elements: [Element] = []
            elements.reserveCapacity(1 + newElements.count)
            elements.append(element)
            elements.append(contentsOf: newElements)
            storage = Storage(many: elements)
        case .many(var elements):
            if elements.isEmpty {
                storage = Storage(many: newElements)
                return
            }
            storage = Storage.none
            elements.append(contentsOf: newElements)
            storage = Storage(many: elements)
        }
    }

    mutating func replaceSubrange<Elements: Collection<Element>>(_ subrange: Range<Int>, with newElements: Elements) {
        var elements = array
        storage = Storage.none
        elements.replaceSubrange(subrange, with: newElements)
        self = SmallList(array: elements)
    }

    mutating func removeAll(where shouldBeRemoved: (Element) throws -> Bool) rethrows {
        switch storage.shape {
        case .none:
            // (The usual case: a finish with no dependents.)
            return
        case .one(let element):
            if try shouldBeRemoved(element) { storage = Storage.none }
        case .many(var elements):
            // `Array.removeAll(where:)` would make a shared empty buffer unique first, which allocates.
            if elements.isEmpty { return }
            storage = Storage.none
            try elements.removeAll(where: shouldBeRemoved)
            self = SmallList(array: elements)
        }
    }
}

/// The two shapes of a ``SmallList``, as a transient value.
enum SmallListShape<Element> {
    case none
    case one(Element)
    case many([Element])
}

/// The storage of a ``SmallList``: a non-generic enum with an empty case, a one-element case and
/// an array case.
protocol SmallListStorage {
    associatedtype Element
    static var none: Self { get }
    init(one: Element)
    init(many: [Element])
    var shape: SmallListShape<Element> { get }
    /// Appends in place (written for each concrete enum: only a non-generic `switch` lets the
    /// optimiser grow the array without copying it or its references).
    mutating func append(_ element: consuming Element)
}

/// Operations, retained.
typealias OperationList = SmallList<RetainedOperations>

/// Operations, not retained: for `dependents`, whose entries are kept alive by their queues (see
/// `ConcurrentOperation.dependents`).
typealias UnretainedOperationList = SmallList<UnretainedOperations>

enum RetainedOperations: SmallListStorage {
    case none
    case one(ConcurrentOperation)
    case many([ConcurrentOperation])

    init(one: ConcurrentOperation) { self = .one(one) }
    init(many: [ConcurrentOperation]) { self = .many(many) }

    var shape: SmallListShape<ConcurrentOperation> {
        switch self {
        case .none: .none
        case .one(let operation): .one(operation)
        case .many(let operations): .many(operations)
        }
    }

    mutating func append(_ operation: consuming ConcurrentOperation) {
        switch self {
        case .none:
            self = .one(operation)
        case .one(let first):
            self = .many([first, operation])
        case .many(var operations):
            if operations.isEmpty {
                self = .one(operation)
                return
            }
            self = .none  // keep the array uniquely referenced while it grows
            operations.append(operation)
            self = .many(operations)
        }
    }
}

enum UnretainedOperations: SmallListStorage {
    case none
    case one(Unmanaged<ConcurrentOperation>)
    case many([Unmanaged<ConcurrentOperation>])

    init(one: Unmanaged<ConcurrentOperation>) { self = .one(one) }
    init(many: [Unmanaged<ConcurrentOperation>]) { self = .many(many) }

    var shape: SmallListShape<Unmanaged<ConcurrentOperation>> {
        switch self {
        case .none: .none
        case .one(let operation): .one(operation)
        case .many(let operations): .many(operations)
        }
    }

    mutating func append(_ operation: Unmanaged<ConcurrentOperation>) {
        switch self {
        case .none:
            self = .one(operation)
        case .one(let first):
            self = .many([first, operation])
        case .many(var operations):
            if operations.isEmpty {
                self = .one(operation)
                return
            }
            self = .none  // keep the array uniquely referenced while it grows
            operations.append(operation)
            self = .many(operations)
        }
    }
}

extension SmallList where Storage == UnretainedOperations {
    /// Calls `body` with each element in order, without an iterator (whose subscript checks the
    /// shape for each element).
    @inline(__always)
    func forEachEntry(_ body: (Unmanaged<ConcurrentOperation>) -> Void) {
        switch storage {
        case .none: return
        case .one(let entry): body(entry)
        case .many(let entries): for index in entries.indices { body(entries[index]) }
        }
    }
}

extension SmallList where Storage == RetainedOperations {
    /// Calls `body` with the elements from index `start` on, in order, until it returns a value;
    /// returns that value. The elements are lent without being retained (the list holds them), so
    /// a scan of many elements costs no reference counting.
    @inline(__always)
    func firstResult<Result>(from start: Int, _ body: (ConcurrentOperation) -> Result?) -> Result? {
        switch storage {
        case .none:
            return nil
        case .one(let operation):
            return start == 0 ? body(operation) : nil
        case .many(let operations):
            return operations.firstResult(from: start, body)
        }
    }
}

extension Array where Element == ConcurrentOperation {
    /// Calls `body` with the elements from index `start` on, in order, until it returns a value;
    /// returns that value. The elements are lent without being retained (the array holds them),
    /// so a scan costs no reference counting; `body` must not change the array.
    @inline(__always)
    func firstResult<Result>(from start: Int, _ body: (ConcurrentOperation) -> Result?) -> Result? {
        withUnsafeBufferPointer { buffer -> Result? in
            let raw = UnsafeRawBufferPointer(buffer)
            let stride = MemoryLayout<ConcurrentOperation>.stride
            var index = start
            while index < buffer.count {
                let pointer = raw.load(fromByteOffset: index &* stride, as: UnsafeRawPointer.self)
                let result = Unmanaged<ConcurrentOperation>.fromOpaque(pointer)._withUnsafeGuaranteedRef(body)
                if let result { return result }
                index &+= 1
            }
            return nil
        }
    }

    /// Calls `body` with each element, in order, lent without a retain (see
    /// ``firstResult(from:_:)``).
    @inline(__always)
    func forEachLent(_ body: (ConcurrentOperation) -> Void) {
        _ = firstResult(from: 0) { operation -> Void? in
            body(operation)
            return nil
        }
    }
}
