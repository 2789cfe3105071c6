// MapProcedure and FilterProcedure: result procedures that map or filter the elements of an
// array input, set directly or injected from a procedure producing any sequence.

/// A ``ResultProcedure`` that maps each element of its input with a throwing closure and
/// finishes with the array of results.
///
/// ```swift
/// let ids = ClosureProcedure<[Int]>(name: "ids") { [1, 2, 3] }
/// let names = MapProcedure<Int, String>(name: "names") { "user \($0)" }
/// try names.injectInput(from: ids)
/// try queue.addOperations([ids, names], waitUntilFinished: false)
/// ```
///
/// - The input is set in the initialiser, through ``input``, or injected with
///   ``injectInput(from:)`` from a procedure whose value is any sequence of `Element`s. Run
///   without one, the procedure finishes with an
///   ``OperationError/Code-swift.struct/inputUnavailable`` error, as ``TransformProcedure`` does.
/// - The closure runs on the thread that executes the procedure, once per element, in order. The
///   first error it throws finishes the procedure with that error; no later element is mapped.
/// - Cancelled while it maps, the procedure stops before the next element and finishes without a
///   value (cancelled). Cancelled before it executes, it never runs the closure.
public final class MapProcedure<Element: Sendable, Mapped: Sendable>: ResultProcedure<[Mapped]>, @unchecked Sendable {
    // protected by lock
    private var _input: [Element]?
    private let transform: @Sendable (Element) throws -> Mapped

    /// Creates the procedure.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - input: The elements, if known now.
    ///   - transform: Maps one element; its thrown error finishes the procedure.
    public init(name: String? = nil, input: [Element]? = nil, _ transform: @escaping @Sendable (Element) throws -> Mapped) {
        _input = input
        self.transform = transform
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// The elements to map. Set it before the procedure executes; the procedure lets go of it
    /// when it runs (so it reads `nil` afterwards). Readable and writable from any thread.
    public var input: [Element]? {
        get { lock.withLock { _input } }
        set { lock.withLock { _input = newValue } }
    }

    /// Makes this procedure depend on `producer` and take its value, as an array, as ``input``.
    /// See ``ResultConsuming/injectResult(from:_:)``: if the producer fails, is cancelled or
    /// finishes without a value, this procedure is cancelled with
    /// ``OperationError/Code-swift.struct/inputUnavailable`` instead of running.
    ///
    /// - Parameter producer: The procedure whose elements become the input.
    /// - Throws: What ``ResultConsuming/injectResult(from:_:)`` throws.
    public func injectInput<Source: Sequence & Sendable>(
        from producer: ResultProcedure<Source>
    ) throws(OperationError) where Source.Element == Element {
        try injectResult(from: producer) { consumer, value in consumer.input = Array(value) }
    }

    /// Maps the input and finishes with the results, or with the first error thrown.
    public override func execute() {
        guard let elements = takeInput() else {
            finish(with: missingInputError())
            return
        }
        var mapped: [Mapped] = []
        mapped.reserveCapacity(elements.count)
        do {
            for element in elements {
                if isCancelled {
                    finish()
                    return
                }
                mapped.append(try transform(element))
            }
        } catch {
            finish(with: error)
            return
        }
        finish(withValue: mapped)
    }

    private func takeInput() -> [Element]? {
        lock.withLock {
            defer { _input = nil }
            return _input
        }
    }
}

/// A ``ResultProcedure`` that keeps the elements of its input for which a throwing predicate
/// returns `true`, in order, and finishes with them.
///
/// ```swift
/// let even = FilterProcedure<Int>(name: "even", input: Array(1...10)) { $0.isMultiple(of: 2) }
/// try queue.addOperation(even)
/// ```
///
/// The input, missing input, errors and cancellation behave as in ``MapProcedure``.
public final class FilterProcedure<Element: Sendable>: ResultProcedure<[Element]>, @unchecked Sendable {
    // protected by lock
    private var _input: [Element]?
    private let isIncluded: @Sendable (Element) throws -> Bool

    /// Creates the procedure.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - input: The elements, if known now.
    ///   - isIncluded: Whether to keep an element; its thrown error finishes the procedure.
    public init(name: String? = nil, input: [Element]? = nil, _ isIncluded: @escaping @Sendable (Element) throws -> Bool) {
        _input = input
        self.isIncluded = isIncluded
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// The elements to filter. Set it before the procedure executes; the procedure lets go of it
    /// when it runs. Readable and writable from any thread.
    public var input: [Element]? {
        get { lock.withLock { _input } }
        set { lock.withLock { _input = newValue } }
    }

    /// Makes this procedure depend on `producer` and take its value, as an array, as ``input``;
    /// as ``MapProcedure/injectInput(from:)``.
    ///
    /// - Parameter producer: The procedure whose elements become the input.
    /// - Throws: What ``ResultConsuming/injectResult(from:_:)`` throws.
    public func injectInput<Source: Sequence & Sendable>(
        from producer: ResultProcedure<Source>
    ) throws(OperationError) where Source.Element == Element {
        try injectResult(from: producer) { consumer, value in consumer.input = Array(value) }
    }

    /// Filters the input and finishes with the elements kept, or with the first error thrown.
    public override func execute() {
        let elements = lock.withLock { () -> [Element]? in
            defer { _input = nil }
            return _input
        }
        guard let elements else {
            finish(with: missingInputError())
            return
        }
        var kept: [Element] = []
        do {
            for element in elements {
                if isCancelled {
                    finish()
                    return
                }
                if try isIncluded(element) { kept.append(element) }
            }
        } catch {
            finish(with: error)
            return
        }
        finish(withValue: kept)
    }
}

extension ResultProcedure {
    /// The error of a transform procedure that executes without an input.
    func missingInputError() -> OperationError {
        OperationError(.inputUnavailable, operations: [displayName], "no input was set")
    }
}
