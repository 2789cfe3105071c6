/// A ``ProcedureOperation`` that finishes with a value of type `Output`.
///
/// ```swift
/// final class Download: ResultProcedure<Data>, @unchecked Sendable {
///     override func execute() {
///         client.get(url) { data, error in
///             if let data { self.finish(withValue: data) } else { self.finish(with: error) }
///         }
///     }
/// }
/// ```
///
/// Another procedure can take the value as its input with ``ProcedureOperation/injectResult(from:_:)``
/// (or a ``TransformProcedure``'s ``TransformProcedure/injectInput(from:)``): the compiler checks
/// the types.
open class ResultProcedure<Output: Sendable>: ProcedureOperation, @unchecked Sendable {
    // protected by machine.lock
    private var _output: Output?

    /// Creates a procedure. Subclasses override ``execute()`` and finish with
    /// ``finish(withValue:)``.
    public override init(name: String? = nil) {
        super.init(name: name)
    }

    /// The value the procedure finished with, or `nil` (not finished, failed, cancelled before
    /// executing, or finished without a value).
    public var output: Output? { machine.lock.withLock { _output } }

    /// The outcome once finished: the value, or the first error; `nil` before it finished, and
    /// for a procedure that finished without a value or an error.
    public var result: Result<Output, any Error>? {
        machine.lock.withLock {
            if let error = _errors.first { return .failure(error) }
            return _output.map { .success($0) }
        }
    }

    /// Finishes the procedure with `value`. Only the first finish counts.
    /// - Returns: `true` if this call finished the procedure.
    @discardableResult
    public func finish(withValue value: Output) -> Bool {
        finishCollecting([]) { self._output = value }
    }

    /// Finishes the procedure with `result`: its value, or its error.
    /// - Returns: `true` if this call finished the procedure.
    @discardableResult
    public func finish(withResult result: Result<Output, any Error>) -> Bool {
        switch result {
        case .success(let value): finish(withValue: value)
        case .failure(let error): finish(with: error)
        }
    }
}

/// A ``ResultProcedure`` whose work is a closure: synchronous (its return value or thrown error
/// finishes the procedure), or asynchronous (handed the procedure, it finishes it later).
public final class ClosureProcedure<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    private enum Body {
        case synchronous(@Sendable () throws -> Output)
        case asynchronous(@Sendable (ClosureProcedure<Output>) -> Void)
    }

    // Set in init, read by `execute()` (which runs at most once), cleared when the procedure finishes.
    private var body: Body?

    /// A procedure that runs `body` and finishes with its value, or with the error it throws.
    public init(name: String? = nil, _ body: @escaping @Sendable () throws -> Output) {
        self.body = .synchronous(body)
        super.init(name: name)
    }

    /// A procedure that hands itself to `body`, which must finish it — now or later, from any
    /// thread — with ``ResultProcedure/finish(withValue:)`` or ``ProcedureOperation/finish(with:)``.
    public init(name: String? = nil, asynchronous body: @escaping @Sendable (ClosureProcedure<Output>) -> Void) {
        self.body = .asynchronous(body)
        super.init(name: name)
    }

    public override func execute() {
        let body = self.body
        self.body = nil
        switch body {
        case .synchronous(let work):
            do {
                finish(withValue: try work())
            } catch {
                finish(with: error)
            }
        case .asynchronous(let work):
            work(self)
        case nil:
            finish()
        }
    }

    override func didFinishWithoutExecuting() {
        body = nil
    }
}

/// A ``ResultProcedure`` that turns an `Input` into an `Output` with a closure. The input is set
/// before it runs — usually injected from another procedure with ``injectInput(from:)``; without
/// one it fails with ``OperationError/Code-swift.struct/inputUnavailable``.
public final class TransformProcedure<Input: Sendable, Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    // protected by machine.lock
    private var _input: Input?
    private let transform: @Sendable (Input) throws -> Output

    /// - Parameters:
    ///   - input: The input, if known now.
    ///   - transform: Runs on the worker; its value or thrown error finishes the procedure.
    public init(name: String? = nil, input: Input? = nil, _ transform: @escaping @Sendable (Input) throws -> Output) {
        _input = input
        self.transform = transform
        super.init(name: name)
    }

    /// The input, until the procedure finishes.
    public var input: Input? {
        get { machine.lock.withLock { _input } }
        set { machine.lock.withLock { _input = newValue } }
    }

    /// Makes this procedure depend on `producer` and take its value as input. See
    /// ``ProcedureOperation/injectResult(from:_:)``.
    public func injectInput(from producer: ResultProcedure<Input>) throws(OperationError) {
        try injectResult(from: producer) { consumer, value in consumer.input = value }
    }

    public override func execute() {
        let input = machine.lock.withLock { () -> Input? in
            defer { _input = nil }
            return _input
        }
        guard let input else {
            finish(with: OperationError(.inputUnavailable, operations: [displayName], "no input was set"))
            return
        }
        do {
            finish(withValue: try transform(input))
        } catch {
            finish(with: error)
        }
    }
}

/// Gives every ``ProcedureOperation`` ``injectResult(from:_:)`` with its own type as the first
/// argument of the injection closure. (A protocol extension can name `Self` there; a class cannot.)
public protocol ResultConsuming: ProcedureOperation {}

extension ProcedureOperation: ResultConsuming {}

extension ResultConsuming {
    /// Result injection: makes this procedure depend on `producer` and, once `producer` has
    /// finished, calls `inject` with this procedure and the producer's value — before this
    /// procedure's conditions are evaluated.
    ///
    /// If the producer failed, was cancelled or finished without a value, `inject` is not called
    /// and this procedure is cancelled with ``OperationError/Code-swift.struct/inputUnavailable``
    /// (its underlying errors are the producer's) instead of running.
    ///
    /// `inject` receives this procedure as an argument, so it need not capture it: the injection
    /// makes no retain cycle. It is released once this procedure has finished.
    ///
    /// - Throws: what ``ConcurrentOperation/addDependency(_:)`` or ``addCondition(_:)`` throw.
    public func injectResult<Value: Sendable>(
        from producer: ResultProcedure<Value>,
        _ inject: @escaping @Sendable (Self, Value) -> Void
    ) throws(OperationError) {
        try addCondition(InjectionCondition(producer: producer) { consumer, value in
            // Called with this very procedure, whose type is `Self`.
            if let consumer = consumer as? Self { inject(consumer, value) }
        }, first: true)
        try addDependency(producer)
    }
}

/// The condition behind result injection: satisfied once the value is handed over.
struct InjectionCondition<Value: Sendable>: OperationCondition {
    let producer: ResultProcedure<Value>
    let inject: @Sendable (ProcedureOperation, Value) -> Void

    var name: String { "InjectResult<\(producer.displayName)>" }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        if let value = producer.output, !producer.isCancelled, producer.errors.isEmpty {
            inject(procedure, value)
            completion(.satisfied)
            return
        }
        let why = producer.isCancelled ? "was cancelled" : producer.errors.isEmpty ? "produced no value" : "failed"
        completion(.failed(OperationError(
            .inputUnavailable, operations: [procedure.displayName, producer.displayName],
            "the producer \(why)", underlying: producer.errors)))
    }
}
