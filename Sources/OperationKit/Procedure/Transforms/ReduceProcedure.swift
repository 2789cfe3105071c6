// ReduceProcedure: a result procedure that combines the elements of an array input into one
// value, the input set directly or injected from a procedure producing any sequence.

/// A ``ResultProcedure`` that combines the elements of its input, from an initial value, with a
/// throwing closure, and finishes with the result.
///
/// ```swift
/// let sizes = ClosureProcedure<[Int]>(name: "sizes") { [120, 80, 40] }
/// let total = ReduceProcedure<Int, Int>(name: "total", initial: 0) { $0 + $1 }
/// try total.injectInput(from: sizes)
/// try queue.addOperations([sizes, total], waitUntilFinished: false)
/// ```
///
/// An empty input finishes with `initial`. The input, missing input, errors and cancellation
/// behave as in ``MapProcedure``.
public final class ReduceProcedure<Element: Sendable, Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    // protected by lock
    private var _input: [Element]?
    private let initial: Output
    private let nextPartialResult: @Sendable (Output, Element) throws -> Output

    /// Creates the procedure.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - input: The elements, if known now.
    ///   - initial: The value to start from, and the result for an empty input.
    ///   - nextPartialResult: Combines the result so far with the next element; its thrown error
    ///     finishes the procedure.
    public init(
        name: String? = nil, input: [Element]? = nil, initial: Output,
        _ nextPartialResult: @escaping @Sendable (Output, Element) throws -> Output
    ) {
        _input = input
        self.initial = initial
        self.nextPartialResult = nextPartialResult
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// The elements to combine. Set it before the procedure executes; the procedure lets go of
    /// it when it runs. Readable and writable from any thread.
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

    /// Combines the input and finishes with the result, or with the first error thrown.
    public override func execute() {
        let elements = lock.withLock { () -> [Element]? in
            defer { _input = nil }
            return _input
        }
        guard let elements else {
            finish(with: missingInputError())
            return
        }
        var partial = initial
        do {
            for element in elements {
                if isCancelled {
                    finish()
                    return
                }
                partial = try nextPartialResult(partial, element)
            }
        } catch {
            finish(with: error)
            return
        }
        finish(withValue: partial)
    }
}
