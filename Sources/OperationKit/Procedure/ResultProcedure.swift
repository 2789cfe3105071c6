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
/// Another procedure can take the value as its input with ``ResultConsuming/injectResult(from:_:)``
/// (or a ``TransformProcedure``'s ``TransformProcedure/injectInput(from:)``): the compiler checks
/// the types.
open class ResultProcedure<Output: Sendable>: ProcedureOperation, @unchecked Sendable {
    /// Under `lock`: the value, type-erased, kept in the procedure's `outcome` (see
    /// `ProcedureOutcome.output`); `()` — the output of every `ClosureProcedure<Void>` — is a flag
    /// instead (`ProcedureFlags.voidOutput`: setting it makes no outcome). Read through
    /// `outputLocked`.
    private var _output: ProcedureOutputSlot {
        get { outcome?.output ?? .none }
        set {
            if case .void = newValue { flags.insert(.voidOutput) } else { outcomeLocked.output = newValue }
        }
    }

    /// Creates a procedure. Subclasses override ``ConcurrentOperation/execute()`` and finish with
    /// ``finish(withValue:)``.
    ///
    /// - Parameter name: A name for logs and errors.
    public override init(name: String? = nil) {
        super.init(name: name)
    }

    /// Creates a procedure with its conditions and observers, as
    /// ``ProcedureOperation/init(name:conditions:observers:)`` describes. Subclasses override
    /// ``ConcurrentOperation/execute()`` and finish with ``finish(withValue:)``.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - conditions: Conditions, evaluated in this order (see ``ProcedureOperation/addCondition(_:)``).
    ///   - observers: Observers, told in this order (see ``ProcedureOperation/addObserver(_:)``).
    public override init(
        name: String? = nil, conditions: borrowing [any OperationCondition] = [], observers: borrowing [any OperationObserver] = []
    ) {
        super.init(name: name, conditions: conditions, observers: observers)
    }

    /// See `ProcedureOperation.init(name:hookEvents:)`.
    override init(name: String?, hookEvents: ProcedureEventKinds, outcome: ProcedureOutcome? = nil) {
        super.init(name: name, hookEvents: hookEvents, outcome: outcome)
    }

    /// See `ProcedureOperation.init(name:hookEvents:conditions:observers:)` (inlined as it is).
    @inline(__always)
    override init(
        name: String?, hookEvents: ProcedureEventKinds, outcome: ProcedureOutcome? = nil,
        conditions: borrowing [any OperationCondition], observers: borrowing [any OperationObserver]
    ) {
        super.init(name: name, hookEvents: hookEvents, outcome: outcome, conditions: conditions, observers: observers)
    }

    /// The value the procedure finished with, or `nil` (not finished, finished with
    /// ``ProcedureOperation/finish(with:)`` or without a value, or cancelled before executing).
    /// Set in the same step as the finish counts, before will-finish observers run. Readable from
    /// any thread.
    public var output: Output? { lock.withLock { outputLocked }.value(as: Output.self) }

    /// Under `lock`: the output's slot (see `ProcedureFlags.voidOutput`).
    private var outputLocked: ProcedureOutputSlot { flags.contains(.voidOutput) ? .void : _output }

    /// The outcome: `.failure` with the first of ``ProcedureOperation/errors`` as soon as there is
    /// one (an error given to ``ProcedureOperation/cancel(with:)`` counts at once, and wins over a
    /// value given later); otherwise `.success` with ``output`` once the procedure has finished
    /// with a value; otherwise `nil` (not finished, or finished without a value or an error).
    /// Readable from any thread.
    public var result: Result<Output, any Error>? {
        lock.withLock {
            if let error = _errors.first { return .failure(error) }
            return outputLocked.value(as: Output.self).map { .success($0) }
        }
    }

    /// Finishes the procedure with `value`, which becomes ``output``. Only the first finish counts;
    /// it runs as ``ProcedureOperation/finish(withErrors:)`` describes.
    ///
    /// On a procedure cancelled before it executed, it counts as ``ProcedureOperation/finish()``
    /// does there, but the value is dropped: a procedure that never executed has no ``output``.
    ///
    /// - Parameter value: The procedure's result.
    /// - Returns: `true` if this call counted (see ``ProcedureOperation/finish(withErrors:)``);
    ///   `false` if it was ignored (the value is then dropped).
    @discardableResult
    public func finish(withValue value: Output) -> Bool {
        finishCollecting([]) { self._output = ProcedureOutputSlot(value) }  // boxed as is: a nil `Output` stays a value
    }

    /// ``finish(withValue:)`` from this module's own `execute()`, which returns right after.
    func finishAsLastStep(withValue value: Output) {
        lock.lock()
        // Nobody to tell before the finish (the usual `ClosureProcedure`): no general steps.
        switch beginQuickFinishLocked() {
        case .plain?:
            _output = ProcedureOutputSlot(value)
            finishPlainly(asLastStep: true)
        case .inStep?:
            _output = ProcedureOutputSlot(value)
            finishQuicklyInStep()
        case nil:
            finishAsLastStepCollecting(ProcedureOutputSlot(value))
        }
    }

    /// The general finish of ``finishAsLastStep(withValue:)`` and ``finishAsLastStepWithVoid()``,
    /// with `lock` held. (Out of line, as the quick ways: the callers stay small.)
    @inline(never)
    private func finishAsLastStepCollecting(_ slot: ProcedureOutputSlot) {
        _ = finishCollecting([], asLastStep: true, lockHeld: true) { self._output = slot }
    }

    /// ``finish(withValue:)`` with `()`, for `Output == Void`, from this module's own
    /// `execute()`: the value is stored type-erased, as `()`.
    func finishAsLastStepWithVoid() {
        lock.lock()
        // (As in `finishAsLastStep(withValue:)`.)
        switch beginQuickFinishLocked() {
        case .plain?:
            flags.insert(.voidOutput)
            finishPlainly(asLastStep: true)
        case .inStep?:
            flags.insert(.voidOutput)
            finishQuicklyInStep()
        case nil:
            finishAsLastStepCollecting(.void)
        }
    }

    /// Finishes the procedure with `result`: with its value (``finish(withValue:)``), or with its
    /// error (``ProcedureOperation/finish(with:)``).
    ///
    /// - Parameter result: The procedure's result.
    /// - Returns: `true` if this call counted (see ``ProcedureOperation/finish(withErrors:)``).
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
///
/// ```swift
/// let parse = ClosureProcedure<Config>(name: "parse") { try Config(parsing: text) }
/// let fetch = ClosureProcedure<Data>(name: "fetch", asynchronous: { procedure in
///     client.get(url) { result in procedure.finish(withResult: result) }
/// })
/// ```
///
/// The closure runs at most once, on the thread that executes the procedure; a procedure
/// cancelled before it executes never runs it. The procedure lets go of the closure once it has
/// run, or once the procedure finished without running it.
public final class ClosureProcedure<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    // Set in init, read by `execute()` (which runs at most once), cleared when the procedure
    // finishes.
    /// The body of a `ClosureProcedure<Void>`, stored as given: in a `() throws -> Output` field
    /// a closure returning `Void` is wrapped in a reabstraction thunk (an allocation per
    /// procedure, freed on the worker that runs it).
    @exclusivity(unchecked) var voidBody: (@Sendable () throws -> Void)?
    // Any other body is kept in the procedure's outcome, made for it in `init` (see
    // `ClosureBodyOutcome`): no field in every procedure for the bodies that the usual one,
    // `ClosureProcedure<Void>`, does not have.

    /// The outcome holding a body other than a `Void` one, if the procedure was made with one.
    /// (Read without the lock: such an outcome is set in `init`, and never replaced.)
    var otherBody: ClosureBodyOutcome<Output>? {
        guard let outcome, outcome.holdsClosureBody else { return nil }
        return unsafeDowncast(outcome, to: ClosureBodyOutcome<Output>.self)
    }

    /// A procedure that runs `body` and finishes with its value, or with the error it throws.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work, run on the thread that executes the procedure.
    public init(name: String? = nil, _ body: @escaping @Sendable () throws -> Output) {
        super.init(name: name, hookEvents: [], outcome: ClosureBodyOutcome(synchronous: body))  // overrides no hook
    }

    /// A procedure that hands itself to `body`, which must finish it — now or later, from any
    /// thread — with ``ResultProcedure/finish(withValue:)`` or ``ProcedureOperation/finish(with:)``.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work, run on the thread that executes the procedure. Every path must finish
    ///     the procedure, including a cancellation (see ``ProcedureOperation/procedureDidCancel(with:)``
    ///     or a did-cancel observer).
    public init(name: String? = nil, asynchronous body: @escaping @Sendable (ClosureProcedure<Output>) -> Void) {
        super.init(name: name, hookEvents: [], outcome: ClosureBodyOutcome(asynchronous: body))  // overrides no hook
    }

    /// A procedure without a result (`ClosureProcedure<Void>`) that runs `body` and finishes,
    /// with the error it throws if it throws.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work, run on the thread that executes the procedure.
    public init(name: String? = nil, _ body: @escaping @Sendable () throws -> Void) where Output == Void {
        voidBody = consume body  // (Moved in: no retain and release of its context.)
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// A procedure that runs `body` and finishes with its value, or with the error it throws, with
    /// its conditions and observers given here (as
    /// ``ProcedureOperation/init(name:conditions:observers:)`` describes: the same as adding them
    /// right after, but cheaper).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - conditions: Conditions, evaluated in this order (see ``ProcedureOperation/addCondition(_:)``).
    ///   - observers: Observers, told in this order (see ``ProcedureOperation/addObserver(_:)``).
    ///   - body: The work, run on the thread that executes the procedure.
    public init(
        name: String? = nil, conditions: borrowing [any OperationCondition] = [], observers: borrowing [any OperationObserver] = [],
        _ body: @escaping @Sendable () throws -> Output
    ) {
        super.init(name: name, hookEvents: [], outcome: ClosureBodyOutcome(synchronous: body), conditions: conditions, observers: observers)  // overrides no hook
    }

    /// A procedure that hands itself to `body`, which must finish it (see
    /// ``init(name:asynchronous:)``), with its conditions and observers given here (as
    /// ``ProcedureOperation/init(name:conditions:observers:)`` describes).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - conditions: Conditions, evaluated in this order (see ``ProcedureOperation/addCondition(_:)``).
    ///   - observers: Observers, told in this order (see ``ProcedureOperation/addObserver(_:)``).
    ///   - body: The work, run on the thread that executes the procedure. Every path must finish
    ///     the procedure, including a cancellation.
    public init(
        name: String? = nil, conditions: borrowing [any OperationCondition] = [], observers: borrowing [any OperationObserver] = [],
        asynchronous body: @escaping @Sendable (ClosureProcedure<Output>) -> Void
    ) {
        super.init(name: name, hookEvents: [], outcome: ClosureBodyOutcome(asynchronous: body), conditions: conditions, observers: observers)  // overrides no hook
    }

    /// A procedure without a result (`ClosureProcedure<Void>`) that runs `body` and finishes, with
    /// its conditions and observers given here (as
    /// ``ProcedureOperation/init(name:conditions:observers:)`` describes: the same as adding them
    /// right after, but cheaper).
    ///
    /// ```swift
    /// let signedIn = ClosureCondition(name: "signed in") { _ in session.isSignedIn ? .satisfied : .ignored }
    /// let sync = ClosureProcedure<Void>(name: "sync", conditions: [signedIn], observers: [logger]) {
    ///     try store.sync()
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - conditions: Conditions, evaluated in this order (see ``ProcedureOperation/addCondition(_:)``).
    ///   - observers: Observers, told in this order (see ``ProcedureOperation/addObserver(_:)``).
    ///   - body: The work, run on the thread that executes the procedure.
    public init(
        name: String? = nil, conditions: borrowing [any OperationCondition] = [], observers: borrowing [any OperationObserver] = [],
        _ body: @escaping @Sendable () throws -> Void
    ) where Output == Void {
        voidBody = consume body  // (Moved in: no retain and release of its context.)
        super.init(name: name, hookEvents: [], conditions: conditions, observers: observers)  // overrides no hook
    }

    /// Runs the closure: a synchronous one finishes the procedure with its value or error; an
    /// asynchronous one is handed the procedure.
    public override func execute() {
        if let work = voidBody {
            voidBody = nil
            do {
                try work()
                finishAsLastStepWithVoid()
            } catch {
                _ = finishCollecting([error], asLastStep: true)
            }
        } else {
            executeOtherBody()
        }
    }

    /// ``execute()`` with a body other than a `Void` one. (Out of line: the usual `Void` body
    /// runs without the generic `Output` value's stack space.)
    @inline(never)
    private func executeOtherBody() {
        guard let other = otherBody, other.hasBody else {
            finish()
            return
        }
        if let work = other.synchronous {
            other.synchronous = nil
            do {
                finishAsLastStep(withValue: try work())
            } catch {
                _ = finishCollecting([error], asLastStep: true)
            }
        } else if let work = other.asynchronous {
            other.asynchronous = nil
            work(self)
        }
    }

    override func didFinishWithoutExecuting() {
        // (A procedure with a `Void` body has no `ClosureBodyOutcome`: its outcome, which a late
        // call may be making under the lock meanwhile, is not read.)
        if voidBody != nil {
            voidBody = nil
        } else if let other = otherBody {
            other.synchronous = nil
            other.asynchronous = nil
        }
    }
}

/// The outcome of a ``ClosureProcedure`` made with a body other than a `Void` one, which holds
/// that body: a synchronous or an asynchronous closure, set in `init`, let go of when it runs or
/// when the procedure finishes without running it (by the thread that does so: without the lock,
/// as the procedure's own fields were).
final class ClosureBodyOutcome<Output: Sendable>: ProcedureOutcome, @unchecked Sendable {
    var synchronous: (@Sendable () throws -> Output)?
    var asynchronous: (@Sendable (ClosureProcedure<Output>) -> Void)?

    init(synchronous: @escaping @Sendable () throws -> Output) {
        self.synchronous = synchronous
        super.init(holdsClosureBody: true)
    }

    init(asynchronous: @escaping @Sendable (ClosureProcedure<Output>) -> Void) {
        self.asynchronous = asynchronous
        super.init(holdsClosureBody: true)
    }

    /// Whether it still holds its body (it has not run).
    var hasBody: Bool { synchronous != nil || asynchronous != nil }
}

/// A ``ResultProcedure`` that turns an `Input` into an `Output` with a closure. The input is set
/// before it runs — usually injected from another procedure with ``injectInput(from:)``; run
/// without one, it finishes with an ``OperationError/Code-swift.struct/inputUnavailable`` error
/// (it is not cancelled).
///
/// ```swift
/// let download = ClosureProcedure<Data>(name: "download", asynchronous: { … })
/// let decode = TransformProcedure<Data, Image>(name: "decode") { try Image(data: $0) }
/// try decode.injectInput(from: download)   // decode depends on download and takes its value
/// try queue.addOperations([download, decode], waitUntilFinished: false)
/// ```
public final class TransformProcedure<Input: Sendable, Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    // protected by lock
    private var _input: Input?
    private let transform: @Sendable (Input) throws -> Output

    /// Creates the procedure.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - input: The input, if known now.
    ///   - transform: Runs once, on the thread that executes the procedure; its value or thrown
    ///     error finishes the procedure.
    public init(name: String? = nil, input: Input? = nil, _ transform: @escaping @Sendable (Input) throws -> Output) {
        _input = input
        self.transform = transform
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// The input. Set it before the procedure executes; the procedure lets go of it when its
    /// transform runs (so it reads `nil` afterwards). Readable and writable from any thread.
    public var input: Input? {
        get { lock.withLock { _input } }
        set { lock.withLock { _input = newValue } }
    }

    /// Makes this procedure depend on `producer` and take its value as ``input``. See
    /// ``ResultConsuming/injectResult(from:_:)``: if the producer fails, is cancelled or finishes
    /// without a value, this procedure is cancelled with
    /// ``OperationError/Code-swift.struct/inputUnavailable`` instead of running.
    ///
    /// - Parameter producer: The procedure whose value becomes the input.
    /// - Throws: What ``ResultConsuming/injectResult(from:_:)`` throws.
    public func injectInput(from producer: ResultProcedure<Input>) throws(OperationError) {
        try injectResult(from: producer) { consumer, value in consumer.input = value }
    }

    /// Takes the input and finishes with the transform's value or error, or with
    /// ``OperationError/Code-swift.struct/inputUnavailable`` if there is no input.
    public override func execute() {
        let input = lock.withLock { () -> Input? in
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
/// ``ProcedureOperation`` already conforms; there is nothing to implement.
public protocol ResultConsuming: ProcedureOperation {}

extension ProcedureOperation: ResultConsuming {}

extension ResultConsuming {
    /// Result injection: makes this procedure depend on `producer` and, once `producer` has
    /// finished, calls `inject` with this procedure and the producer's value — before any other
    /// condition of this procedure is evaluated.
    ///
    /// ```swift
    /// try upload.injectResult(from: compress) { upload, data in upload.payload = data }
    /// ```
    ///
    /// The injection is a condition (the first ones evaluated), so it follows the rules of
    /// conditions: it runs on a worker of this procedure's queue, and a procedure with an
    /// injection cannot be started by hand (``OperationError/Code-swift.struct/requiresQueue``).
    /// The compiler checks that `Value` is the producer's `Output`.
    ///
    /// If the producer failed (has errors), was cancelled or finished without a value, `inject` is
    /// not called and this procedure is cancelled with ``OperationError/Code-swift.struct/inputUnavailable``
    /// (whose underlying errors are the producer's) instead of running.
    ///
    /// `inject` receives this procedure as an argument, so it need not capture it: the injection
    /// makes no retain cycle. It is released once this procedure has finished.
    ///
    /// - Parameters:
    ///   - producer: The procedure whose value is injected; it becomes a dependency.
    ///   - inject: Called once, with this procedure and the value, on the queue worker that
    ///     evaluates this procedure's conditions.
    /// - Throws: what ``ConcurrentOperation/addDependency(_:)`` throws, or
    ///   ``OperationError/Code-swift.struct/tooLateToAddCondition`` once this procedure's
    ///   conditions are being evaluated (or it has started). Nothing was added then.
    public func injectResult<Value: Sendable>(
        from producer: ResultProcedure<Value>,
        _ inject: @escaping @Sendable (Self, Value) -> Void
    ) throws(OperationError) {
        // The dependency first: if it is refused (a cycle, too late), nothing was added.
        try addDependency(producer)
        do {
            try addCondition(InjectionCondition(producer: producer) { consumer, value in
                // Called with this very procedure, whose type is `Self`.
                if let consumer = consumer as? Self { inject(consumer, value) }
            }, first: true)
        } catch {
            removeDependency(producer)
            throw error
        }
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

/// What a procedure keeps about how it ended beyond its state — its errors, its diagnostics and
/// a ``ResultProcedure``'s output other than `()` — and a start parked for `performExecute`, in
/// one object made when first needed (most procedures end without any of them: they pay one
/// pointer instead of three words). Every
/// field is protected by the procedure's `lock`. Kept once the procedure has finished (these are
/// its public results).
class ProcedureOutcome: @unchecked Sendable {
    /// Whether this is a `ClosureBodyOutcome` (read without the lock: set when made).
    let holdsClosureBody: Bool

    init(holdsClosureBody: Bool = false) {
        self.holdsClosureBody = holdsClosureBody
    }

    /// The errors (see ``ProcedureOperation/errors``), `nil` while there are none. Read as
    /// `_errors`; appended to with `appendErrorsLocked`.
    var errors: [any Error]?
    /// The diagnostics (see ``ProcedureOperation/diagnostics``), `nil` while there are none.
    var diagnostics: [String]?
    /// A ``ResultProcedure``'s output (never `.void`: see `ProcedureFlags.voidOutput`). Boxed
    /// (see `ProcedureOutput`): an `Any` field is copied and destroyed through value witnesses.
    var output = ProcedureOutputSlot.none
    /// A start with a payload, parked here by the start step for `performExecute` (see
    /// `ProcedureOperation.StartSlot`).
    var parkedStart: ProcedureOperation.Start?
}

/// The value a ``ResultProcedure`` finished with, type-erased, in a box of its own (see
/// `ProcedureOutcome.output`). Immutable once made.
final class ProcedureOutput: @unchecked Sendable {  // `value` is a `Sendable` output, never mutated
    let value: Any

    init(erased value: Any) {
        self.value = value
    }
}

/// A ``ResultProcedure``'s output as it stores it: none yet, `()`, or any other value in a box.
/// One word. `()` — the output of every `ClosureProcedure<Void>` — is a case of its own rather
/// than a shared box: setting it and destroying it touch no reference count (a shared box's
/// count is written by every procedure on every thread), and need no lazy global.
enum ProcedureOutputSlot {
    case none
    /// `()`: made only for `Output == Void`.
    case void
    case boxed(ProcedureOutput)

    /// The slot of `value` (`.void` for `()`).
    init<Output: Sendable>(_ value: Output) {
        self = Output.self == Void.self ? .void : .boxed(ProcedureOutput(erased: value))
    }

    /// The value, as the procedure's `Output`, or `nil` if there is none.
    func value<Output: Sendable>(as type: Output.Type) -> Output? {
        switch self {
        case .none: nil
        case .void: (() as Any) as? Output
        case .boxed(let box): (box.value as! Output)
        }
    }
}
