// Result injection beyond injectResult(from:_:): an Optional value into a non-optional input, an
// injection that also gets the producer's error, bind(to:)/bind(from:), and map/flatMap/reduce.

extension ResultProcedure {
    /// What ``value`` would return or throw, for a procedure that has finished: the value, or
    /// its first error, or ``OperationError`` with ``OperationError/Code-swift.struct/cancelled``
    /// (cancelled without a value or an error) or ``OperationError/Code-swift.struct/noValue``.
    var settledResult: Result<Output, any Error> {
        if let result { return result }
        if isCancelled {
            return .failure(OperationError(.cancelled, operations: [displayName], "cancelled before it produced a value"))
        }
        return .failure(OperationError(.noValue, operations: [displayName], "finished without a value"))
    }

    /// The value to inject, or why there is none: the rule of ``ResultConsuming/injectResult(from:_:)``
    /// (a value counts only from a producer that neither failed nor was cancelled).
    func injectableValue(for consumer: ProcedureOperation) -> Result<Output, OperationError> {
        if let value = output, !isCancelled, errors.isEmpty { return .success(value) }
        let why = isCancelled ? "was cancelled" : errors.isEmpty ? "produced no value" : "failed"
        return .failure(OperationError(
            .inputUnavailable, operations: [consumer.displayName, displayName],
            "the producer \(why)", underlying: errors))
    }
}

/// The condition behind the injections of this file: `handOff` gets the consumer and decides.
struct HandOffCondition<Value: Sendable>: OperationCondition {
    let producer: ResultProcedure<Value>
    let label: String
    let handOff: @Sendable (ProcedureOperation) -> ConditionResult

    var name: String { "\(label)<\(producer.displayName)>" }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(handOff(procedure))
    }
}

extension ProcedureOperation {
    /// Adds the dependency on `producer`, then `condition` before the others; if the condition
    /// is refused, the dependency is taken back. What ``ResultConsuming/injectResult(from:_:)`` does.
    func addInjection(from producer: ConcurrentOperation, _ condition: any OperationCondition) throws(OperationError) {
        try addDependency(producer)
        do {
            try addCondition(condition, first: true)
        } catch {
            removeDependency(producer)
            throw error
        }
    }
}

extension ResultConsuming {
    /// Result injection from a producer whose value is optional into a consumer that needs a
    /// value: as ``injectResult(from:_:)``, but a `nil` value is no value. ProcedureKit's
    /// injection of an `Optional` output into a non-optional input.
    ///
    /// ```swift
    /// let lookUp = ClosureProcedure<String?>(name: "look up") { directory["ada"] }
    /// try greet.injectNonNilResult(from: lookUp) { greet, name in greet.input = "Hello, \(name)" }
    /// ```
    ///
    /// If the producer finished with `nil`, `inject` is not called and this procedure is
    /// cancelled with ``OperationError/Code-swift.struct/inputUnavailable``, naming this
    /// procedure and the producer, instead of running; as it is when the producer failed, was
    /// cancelled or finished without a value.
    ///
    /// - Parameters:
    ///   - producer: The procedure whose value is injected; it becomes a dependency.
    ///   - inject: Called once, with this procedure and the unwrapped value, on the queue worker
    ///     that evaluates this procedure's conditions.
    /// - Throws: What ``injectResult(from:_:)`` throws. Nothing was added then.
    public func injectNonNilResult<Value: Sendable>(
        from producer: ResultProcedure<Value?>,
        _ inject: @escaping @Sendable (Self, Value) -> Void
    ) throws(OperationError) {
        try addInjection(from: producer, HandOffCondition(producer: producer, label: "InjectNonNilResult") { consumer in
            switch producer.injectableValue(for: consumer) {
            case .success(let value?):
                if let consumer = consumer as? Self { inject(consumer, value) }
                return .satisfied
            case .success(nil):
                return .failed(OperationError(
                    .inputUnavailable, operations: [consumer.displayName, producer.displayName],
                    "the producer's value was nil"))
            case .failure(let error):
                return .failed(error)
            }
        })
    }

    /// Result injection that also hands over failures: makes this procedure depend on `producer`
    /// and, once `producer` has finished, calls `inject` with this procedure and the producer's
    /// outcome — whatever it is. ProcedureKit's `inject(dependency:block:)`.
    ///
    /// ```swift
    /// try report.injectOutcome(from: download) { report, outcome in
    ///     switch outcome {
    ///     case .success(let data): report.input = "\(data.count) bytes"
    ///     case .failure(let error): report.input = "failed: \(error)"
    ///     }
    /// }
    /// ```
    ///
    /// The outcome is what awaiting the producer's ``ResultProcedure/value`` gives: `.success`
    /// with its value; `.failure` with its first error; `.failure` with
    /// ``OperationError/Code-swift.struct/cancelled`` if it was cancelled without a value or an
    /// error, with ``OperationError/Code-swift.struct/noValue`` if it finished with neither. This
    /// procedure then goes on as usual (its other conditions, then its work), unless `inject`
    /// cancels it. Like ``injectResult(from:_:)``, it is the first condition evaluated, and it
    /// holds no reference to this procedure.
    ///
    /// - Parameters:
    ///   - producer: The procedure whose outcome is handed over; it becomes a dependency.
    ///   - inject: Called once, with this procedure and the outcome, on the queue worker that
    ///     evaluates this procedure's conditions.
    /// - Throws: What ``injectResult(from:_:)`` throws. Nothing was added then.
    public func injectOutcome<Value: Sendable>(
        from producer: ResultProcedure<Value>,
        _ inject: @escaping @Sendable (Self, Result<Value, any Error>) -> Void
    ) throws(OperationError) {
        try addInjection(from: producer, HandOffCondition(producer: producer, label: "InjectOutcome") { consumer in
            if let consumer = consumer as? Self { inject(consumer, producer.settledResult) }
            return .satisfied
        })
    }
}

extension TransformProcedure {
    /// ``injectInput(from:)`` from a producer whose value is optional: the value, unwrapped,
    /// becomes the input; a `nil` value cancels this procedure with
    /// ``OperationError/Code-swift.struct/inputUnavailable`` (see
    /// ``ResultConsuming/injectNonNilResult(from:_:)``).
    ///
    /// - Parameter producer: The procedure whose value, unwrapped, becomes the input.
    /// - Throws: What ``ResultConsuming/injectResult(from:_:)`` throws.
    public func injectNonNilInput(from producer: ResultProcedure<Input?>) throws(OperationError) {
        try injectNonNilResult(from: producer) { consumer, value in consumer.input = value }
    }

    /// Binds this procedure's input to `producer`'s value: ``injectInput(from:)`` (this procedure
    /// depends on `producer` and takes its value), and a cancel of `producer` cancels this
    /// procedure at once — with ``OperationError/Code-swift.struct/inputUnavailable``, whose
    /// underlying error is the cancel's — rather than when `producer` finishes.
    ///
    /// ```swift
    /// let decode = TransformProcedure<Data, Image>(name: "decode") { try Image(data: $0) }
    /// try decode.bind(from: download)
    /// ```
    ///
    /// The cancel is passed on by an observer of `producer`: bound once `producer` has started
    /// executing, a cancel reaches this procedure only when `producer` finishes, as with
    /// ``injectInput(from:)``. A `producer` already cancelled cancels this procedure now.
    /// Cancelling this procedure does not cancel `producer`, which may feed others.
    ///
    /// - Parameter producer: The procedure whose value becomes the input.
    /// - Returns: This procedure.
    /// - Throws: What ``ResultConsuming/injectResult(from:_:)`` throws. Nothing was bound then.
    @discardableResult
    public func bind(from producer: ResultProcedure<Input>) throws(OperationError) -> Self {
        try injectInput(from: producer)
        let consumerName = displayName
        let passCancel = ClosureObserver(didCancel: { [weak self] producer, error in
            self?.cancel(with: OperationError(
                .inputUnavailable, operations: [consumerName, producer.displayName],
                "the producer was cancelled", underlying: error.map { [$0] } ?? []))
        })
        // Refused once the producer executes: the injection then passes the cancel on at its finish.
        _ = try? producer.addObserver(passCancel)
        // A cancel before the observer was added is not told to it.
        if producer.isCancelled {
            cancel(with: OperationError(
                .inputUnavailable, operations: [consumerName, producer.displayName], "the producer was cancelled",
                underlying: producer.errors))
        }
        return self
    }
}

extension ResultProcedure {
    /// Binds `consumer`'s input to this procedure's value, and returns `consumer`: the same as
    /// `consumer.bind(from: self)` (see ``TransformProcedure/bind(from:)``), spelt from the
    /// producer, for fluent chains.
    ///
    /// ```swift
    /// try download.bind(to: decode).bind(to: thumbnail)
    /// ```
    ///
    /// - Parameter consumer: The procedure whose input this procedure's value becomes.
    /// - Returns: `consumer`.
    /// - Throws: What ``TransformProcedure/bind(from:)`` throws. Nothing was bound then.
    @discardableResult
    public func bind<NextOutput: Sendable>(
        to consumer: TransformProcedure<Output, NextOutput>
    ) throws(OperationError) -> TransformProcedure<Output, NextOutput> {
        try consumer.bind(from: self)
    }

    /// A ``TransformProcedure`` that depends on this procedure and turns its value into a new
    /// one; not added to a queue.
    ///
    /// ```swift
    /// let length = download.map(name: "length") { $0.count }   // TransformProcedure<Data, Int>
    /// ```
    ///
    /// Its input is injected (``TransformProcedure/injectInput(from:)``): if this procedure
    /// fails, is cancelled or has no value, the new one is cancelled with
    /// ``OperationError/Code-swift.struct/inputUnavailable``.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default this procedure's name followed by `.map`.
    ///   - transform: Runs once, on the thread that executes the new procedure; its value or
    ///     thrown error finishes it.
    /// - Returns: The new procedure.
    public func map<NewOutput: Sendable>(
        name: String? = nil, _ transform: @escaping @Sendable (Output) throws -> NewOutput
    ) -> TransformProcedure<Output, NewOutput> {
        TransformProcedure(name: name ?? "\(displayName).map", transform).injectingFresh(from: self)
    }

    /// A ``TransformProcedure`` that depends on this procedure and turns its value into a new
    /// one, or into none: a `nil` from `transform` finishes the new procedure with
    /// ``OperationError/Code-swift.struct/noValue`` (naming it), an error it throws with that
    /// error. Otherwise as ``map(name:_:)``.
    ///
    /// ```swift
    /// let port = text.flatMap(name: "port") { Int($0) }   // fails with noValue on "abc"
    /// ```
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default this procedure's name followed by `.flatMap`.
    ///   - transform: Runs once, on the thread that executes the new procedure.
    /// - Returns: The new procedure.
    public func flatMap<NewOutput: Sendable>(
        name: String? = nil, _ transform: @escaping @Sendable (Output) throws -> NewOutput?
    ) -> TransformProcedure<Output, NewOutput> {
        let name = name ?? "\(displayName).flatMap"
        return TransformProcedure(name: name) { input in
            guard let value = try transform(input) else {
                throw OperationError(.noValue, operations: [name], "the transform returned nil")
            }
            return value
        }.injectingFresh(from: self)
    }

    /// A ``TransformProcedure`` that depends on this procedure and combines the elements of its
    /// value, a sequence, into one: `nextPartialResult` is called with `initialResult` and the
    /// first element, then with its result and the next element, and so on. Otherwise as
    /// ``map(name:_:)``; a throw finishes the new procedure with the error.
    ///
    /// ```swift
    /// let total = [small, large].gathered().reduce(name: "total", 0) { $0 + $1 }
    /// ```
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; by default this procedure's name followed by `.reduce`.
    ///   - initialResult: The result for an empty sequence, and the first partial result.
    ///   - nextPartialResult: Combines a partial result and an element into the next one.
    /// - Returns: The new procedure.
    public func reduce<Partial: Sendable>(
        name: String? = nil, _ initialResult: Partial,
        _ nextPartialResult: @escaping @Sendable (Partial, Output.Element) throws -> Partial
    ) -> TransformProcedure<Output, Partial> where Output: Sequence {
        TransformProcedure(name: name ?? "\(displayName).reduce") { sequence in
            try sequence.reduce(initialResult, nextPartialResult)
        }.injectingFresh(from: self)
    }
}

extension TransformProcedure {
    /// Injects `producer`'s value into this procedure, new and in no queue (which cannot refuse
    /// it; should it ever, it is cancelled with the error instead of trapping), and returns it.
    func injectingFresh(from producer: ResultProcedure<Input>) -> Self {
        do {
            try injectInput(from: producer)
        } catch {
            cancel(with: error)
        }
        return self
    }
}

extension Sequence {
    /// A procedure that depends on every procedure of this sequence and finishes with the array
    /// of their values, in the sequence's order; not added to a queue.
    ///
    /// ```swift
    /// let pages = [first, second, third].gathered(name: "pages")   // a ResultProcedure<[Data]>
    /// ```
    ///
    /// All or nothing: if any of them failed, was cancelled or finished without a value, the
    /// gathering procedure does not run; it is cancelled with
    /// ``OperationError/Code-swift.struct/inputUnavailable``, which names it and then those
    /// procedures (in order) and whose underlying errors are theirs. An empty sequence gathers
    /// `[]`. Like result injection, the check is a condition: the procedure runs on a queue.
    ///
    /// For ProcedureKit's `flatMap` and `reduce` over a collection of procedures, follow it with
    /// ``ResultProcedure/map(name:_:)`` or ``ResultProcedure/reduce(name:_:_:)``.
    ///
    /// - Parameter name: A name for logs and errors; by default `gathered(<count>)`.
    /// - Returns: The gathering procedure.
    public func gathered<Value: Sendable>(name: String? = nil) -> ResultProcedure<[Value]> where Element: ResultProcedure<Value> {
        let producers = map { $0 as ResultProcedure<Value> }
        let gather = ClosureProcedure<[Value]>(name: name ?? "gathered(\(producers.count))") {
            // The condition checked that each has a value; they have finished, so it stays.
            try producers.map { producer throws(OperationError) -> Value in
                guard let value = producer.output else {
                    throw OperationError(.inputUnavailable, operations: [producer.displayName], "no value to gather")
                }
                return value
            }
        }
        do {
            try gather.addDependencies(producers)
            if !producers.isEmpty {
                try gather.addCondition(GatherCondition(producers: producers), first: true)
            }
        } catch {
            gather.cancel(with: error)  // new, in no queue: cannot happen
        }
        return gather
    }
}

/// The condition of ``Swift/Sequence/gathered(name:)``: satisfied when every producer has a value.
struct GatherCondition<Value: Sendable>: OperationCondition {
    let producers: [ResultProcedure<Value>]

    var name: String { "Gather<\(producers.map(\.displayName).joined(separator: ", "))>" }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        var missing: [String] = []
        var errors: [any Error] = []
        for producer in producers {
            if case .failure = producer.injectableValue(for: procedure) {
                missing.append(producer.displayName)
                errors.append(contentsOf: producer.errors)
            }
        }
        if missing.isEmpty {
            completion(.satisfied)
        } else {
            completion(.failed(OperationError(
                .inputUnavailable, operations: [procedure.displayName] + missing,
                "\(missing.count) of \(producers.count) producers failed, were cancelled or have no value",
                underlying: errors)))
        }
    }
}
