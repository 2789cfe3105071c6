// RepeatProcedure: runs a procedure made by a closure or an iterator again and again, one at a
// time, with waits between them, until a maximum, a failure, a predicate or the iterator stops it.

/// A procedure that runs attempts of some work again and again — each a new procedure, from a
/// closure or an iterator — one at a time, with a wait between them, and ends with the last one's
/// result.
///
/// ```swift
/// let poll = RepeatProcedure<Status>(max: 10, wait: .fixed(.seconds(5)), while: { status, _ in
///     status?.isDone != true
/// }) { _ in
///     ClosureProcedure { try fetchStatus() }
/// }
/// ```
///
/// Attempt *n* (from 1) is built by `body(n)`. After each attempt the repeat ends when:
/// - `body` returns `nil` for the next one (the iterator is exhausted): with the last attempt's
///   result (without a value or error if there was none);
/// - the attempt failed (has errors, including a cancel with an error) and
///   ``stopsOnFailure`` is set (the default): with that attempt's errors;
/// - ``maxCount`` attempts have run, or the `while` predicate returns `false`: with that
///   attempt's result — its value, or its errors if it failed.
///
/// Otherwise the next attempt starts after the wait of ``wait`` (the wait after attempt *n* is
/// `wait.delay(after: n)`), on a timer of `clock` if one was given, else of the clock of the
/// queue the repeat runs in, else of real time. It holds no thread and no concurrency slot
/// while it waits or while an attempt runs.
///
/// - An attempt cancelled without an error (by someone else) ends the repeat, cancelled.
/// - Cancelling the repeat cancels the running attempt and starts no other; the repeat finishes
///   once that attempt has, with its errors. Cancelled while waiting between attempts, it
///   finishes at once.
///
/// The repeat goes through one lifecycle however many attempts it runs; before each wait, an
/// instrument of its queue is told ``OperationEvent/Kind-swift.enum/retrying(attempt:delay:)``.
/// Attempts are descendants of the repeat (they may take its ``MutuallyExclusive`` categories),
/// and snapshots show the running attempt or the wait, as for a ``RetryOperation``.
public final class RepeatProcedure<Output: Sendable>: ResultProcedure<Output>, AttemptDriver, @unchecked Sendable {
    /// The most attempts that run (at least 1), or `nil` for no limit.
    public let maxCount: Int?
    /// The wait between attempts.
    public let wait: WaitStrategy
    /// Whether a failed attempt ends the repeat (`true`), or is followed by the next one.
    public let stopsOnFailure: Bool
    private let shouldRepeat: @Sendable (_ output: Output?, _ count: Int) -> Bool
    private let body: @Sendable (_ attempt: Int) -> ResultProcedure<Output>?
    private(set) var engine: AttemptEngine<Output>!

    /// Creates the repeat. No attempt is made before it executes.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - max: The most attempts; `nil` (the default) for no limit; values below 1 mean 1.
    ///   - wait: How long to wait between attempts; ``WaitStrategy/immediate`` by default.
    ///   - clock: The clock of the waits; `nil` (the default) for the clock of the queue the
    ///     repeat runs in, or real time outside a queue.
    ///   - stopsOnFailure: Whether an attempt that fails ends the repeat with its errors (the
    ///     default); with `false` the next attempt follows a failure as it follows a success.
    ///   - shouldRepeat: Asked after each attempt that did not end the repeat otherwise, with its
    ///     value (`nil` if it failed or had none) and the number of attempts so far; `false`
    ///     ends the repeat with that attempt's result. Always `true` by default. Called on the
    ///     thread that finished the attempt.
    ///   - body: Builds attempt number `attempt` (from 1): a new procedure each time, in no
    ///     queue; or `nil` for no further attempt. Called on the thread that executes the repeat
    ///     for the first attempt, then on the thread that finished the previous attempt or on a
    ///     timer's thread after a wait; never twice at once.
    public init(
        name: String? = nil,
        max: Int? = nil,
        wait: WaitStrategy = .immediate,
        clock: (any OperationClock)? = nil,
        stopsOnFailure: Bool = true,
        while shouldRepeat: @escaping @Sendable (_ output: Output?, _ count: Int) -> Bool = { _, _ in true },
        body: @escaping @Sendable (_ attempt: Int) -> ResultProcedure<Output>?
    ) {
        maxCount = max.map { Swift.max(1, $0) }
        self.wait = wait
        self.stopsOnFailure = stopsOnFailure
        self.shouldRepeat = shouldRepeat
        self.body = body
        super.init(name: name)
        engine = AttemptEngine(owner: self, driver: self, queueName: "\(name ?? "RepeatProcedure").attempts", clock: clock)
        hookEvents = .didCancel  // the only hook it overrides (the class is final)
    }

    /// Creates a repeat whose attempts come from `iterator`: it ends when the iterator does (or
    /// as the other parameters say, see ``init(name:max:wait:clock:stopsOnFailure:while:body:)``).
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - max: The most attempts; `nil` (the default) for no limit.
    ///   - wait: How long to wait between attempts; ``WaitStrategy/immediate`` by default.
    ///   - clock: The clock of the waits; `nil` for the queue's.
    ///   - stopsOnFailure: Whether an attempt that fails ends the repeat (the default).
    ///   - iterator: Makes the attempts, each a new procedure in no queue. Advanced one attempt
    ///     at a time (never twice at once), from the threads `body` is called on.
    public convenience init<Attempts: IteratorProtocol>(
        name: String? = nil,
        max: Int? = nil,
        wait: WaitStrategy = .immediate,
        clock: (any OperationClock)? = nil,
        stopsOnFailure: Bool = true,
        iterator: Attempts
    ) where Attempts.Element: ResultProcedure<Output> {
        let box = AttemptIterator<Output>(iterator)
        self.init(name: name, max: max, wait: wait, clock: clock, stopsOnFailure: stopsOnFailure) { _ in box.next() }
    }

    /// How many attempts have been started so far.
    public var attemptCount: Int { engine.attemptCount }

    /// Starts the first attempt.
    public override func execute() {
        engine.start()
    }

    /// A repeat whose `execute()` has returned only waits for its attempts: it gives its slot back.
    override var waitsWithoutSlot: Bool { true }

    func makeAttempt(_ number: Int) -> ResultProcedure<Output>? {
        body(number)
    }

    func verdict(on attempt: ResultProcedure<Output>, number: Int) -> AttemptVerdict {
        let failed = !attempt.errors.isEmpty
        if failed && stopsOnFailure { return .finish }
        if let maxCount, number >= maxCount { return .finish }
        guard shouldRepeat(failed ? nil : attempt.output, number) else { return .finish }
        return .again(after: wait.delay(after: number))
    }

    /// The attempts' queue takes the instrument of the queue the repeat was added to.
    override func adoptInstrument(_ instrument: any OperationInstrument) {
        engine.queue.adoptInstrument(instrument, tellHeld: true)
    }

    /// The inner queue takes the executor and clock of the queue the repeat was added to.
    override func adoptQueueSettings(of queue: ConcurrentOperationQueue) {
        engine.queue.adoptSettings(of: queue)
    }

    /// Cancels the running attempt, or, while waiting between attempts, finishes the repeat.
    ///
    /// - Parameter error: The error the repeat was cancelled with, or `nil`.
    public override func procedureDidCancel(with error: (any Error)?) {
        engine.ownerCancelled()
    }
}

extension RepeatProcedure: ChildQueueOwning {
    var childQueueForSnapshot: ConcurrentOperationQueue { engine.queue }

    func waitBlockers(children: QueueSnapshot, now: UInt32) -> [OperationSnapshot.Blocker] {
        engine.waitBlockers()
    }
}

/// An iterator of attempts. No lock: the engine asks for one attempt at a time, each call after
/// the previous attempt has finished (ordered by the queue and the observer, or the clock's timer),
/// so calls never overlap and each sees the last one's changes; and a lock held around the
/// iterator would hold one while user code runs.
final class AttemptIterator<Output: Sendable>: @unchecked Sendable {
    // Touched by one call at a time (see above).
    private var advance: () -> ResultProcedure<Output>?

    init<Attempts: IteratorProtocol>(_ iterator: Attempts) where Attempts.Element: ResultProcedure<Output> {
        var iterator = iterator
        advance = { iterator.next() }
    }

    func next() -> ResultProcedure<Output>? {
        advance()
    }
}
