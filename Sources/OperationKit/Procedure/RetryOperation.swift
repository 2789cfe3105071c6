/// A procedure that runs attempts of some work until one succeeds, building a fresh attempt
/// each time (a procedure runs only once).
///
/// ```swift
/// let fetch = RetryOperation<Data>(maxAttempts: 4, wait: .exponential(initial: .milliseconds(100), jitter: 0.2)) { attempt in
///     Download(url)   // a ResultProcedure<Data>
/// }
/// ```
///
/// The retry goes through one lifecycle (one will-execute, one did-finish), however many attempts
/// it takes. The attempts run one at a time, on a queue of the retry's own. Attempts are
/// descendants of the retry: they may take its ``MutuallyExclusive`` categories; and once its
/// `execute()` has returned, the retry holds no concurrency slot of its queue.
///
/// - An attempt that finishes without errors and is not cancelled ends the retry with its value
///   (``ResultProcedure/output``), or without one.
/// - An attempt with errors — including one cancelled with an error, by a failed condition or a
///   ``TimeoutObserver`` for instance — is followed by another while attempts remain and
///   `shouldRetry` agrees, after the wait; otherwise the retry finishes with that attempt's errors.
/// - An attempt cancelled without an error (by someone else, or by an ignored condition) ends the
///   retry, cancelled, without another attempt.
/// - Cancelling the retry cancels the running attempt and starts no other; the retry finishes
///   once that attempt has, with its errors. Cancelled while waiting between attempts, it
///   finishes at once.
///
/// The waits run on a timer of `clock` if one was given, else of the clock of the queue the retry
/// runs in (``ConcurrentOperationQueue/clock``), else of real time; the attempts' queue uses the
/// same clock (so an attempt's ``TimeoutObserver`` follows it). For a one-liner, see
/// ``retrying(_:wait:clock:_:)``; ``RepeatProcedure`` runs attempts on the same machinery.
public final class RetryOperation<Output: Sendable>: ResultProcedure<Output>, AttemptDriver, @unchecked Sendable {
    /// How long to wait before the next attempt: the shared ``OperationKit/WaitStrategy`` (this
    /// name is kept for source compatibility). The wait runs on a timer and holds no thread and
    /// no concurrency slot (like a group waiting for its children, a retry whose `execute()` has
    /// returned holds no slot of its queue).
    public typealias WaitStrategy = OperationKit.WaitStrategy

    /// The most attempts that run (at least 1).
    public let maxAttempts: Int
    /// The wait between attempts.
    public let wait: WaitStrategy
    private let shouldRetry: @Sendable (_ error: any Error, _ attempt: Int) -> Bool
    private let attemptMaker: @Sendable (_ attempt: Int) -> ResultProcedure<Output>
    // Set once in init (it needs `self`); read-only afterwards.
    private(set) var engine: AttemptEngine<Output>!

    /// Creates the retry. No attempt is made before it executes.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - maxAttempts: The most attempts; values below 1 mean 1.
    ///   - wait: How long to wait between attempts; ``WaitStrategy/immediate`` by default.
    ///   - clock: The clock of the waits; `nil` (the default) for the clock of the queue the
    ///     retry runs in, or real time outside a queue.
    ///   - shouldRetry: Whether a failure with this error (the attempt's first), in this attempt
    ///     (from 1), is worth another attempt; by default every failure is. Not asked after the
    ///     last attempt. Called on the thread that finished the attempt.
    ///   - makeAttempt: Builds attempt number `attempt` (from 1): a new procedure each time, in no
    ///     queue. Called on the thread that executes the retry for the first attempt, then on the
    ///     thread that finished the previous attempt or on a timer thread after a wait. The attempt
    ///     may have conditions and observers of its own.
    public init(
        name: String? = nil,
        maxAttempts: Int,
        wait: WaitStrategy = .immediate,
        clock: (any OperationClock)? = nil,
        shouldRetry: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> Bool = { _, _ in true },
        makeAttempt: @escaping @Sendable (_ attempt: Int) -> ResultProcedure<Output>
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.wait = wait
        self.shouldRetry = shouldRetry
        self.attemptMaker = makeAttempt
        super.init(name: name)
        engine = AttemptEngine(owner: self, driver: self, queueName: "\(name ?? "RetryOperation").attempts", clock: clock)
        hookEvents = .didCancel  // the only hook it overrides (the class is final)
    }

    /// How many attempts have been started so far.
    public var attemptCount: Int { engine.attemptCount }

    /// The attempts' queue.
    var attemptQueue: ConcurrentOperationQueue { engine.queue }

    /// Starts the first attempt.
    public override func execute() {
        engine.start()
    }

    /// A retry whose `execute()` has returned only waits for its attempts: it gives its slot back.
    override var waitsWithoutSlot: Bool { true }

    func makeAttempt(_ number: Int) -> ResultProcedure<Output>? {
        attemptMaker(number)
    }

    func verdict(on attempt: ResultProcedure<Output>, number: Int) -> AttemptVerdict {
        guard let error = attempt.errors.first else { return .finish }
        guard number < maxAttempts, shouldRetry(error, number) else { return .finish }
        return .again(after: wait.delay(after: number))
    }

    /// The attempts' queue takes the instrument of the queue the retry was added to.
    override func adoptInstrument(_ instrument: any OperationInstrument) {
        engine.queue.adoptInstrument(instrument, tellHeld: true)
    }

    /// The attempts' queue takes the executor and clock of the queue the retry was added to.
    override func adoptQueueSettings(of queue: ConcurrentOperationQueue) {
        attemptQueue.adoptSettings(of: queue)
    }

    /// Cancels the running attempt, or, while waiting between attempts, finishes the retry.
    ///
    /// - Parameter error: The error the retry was cancelled with, or `nil`.
    public override func procedureDidCancel(with error: (any Error)?) {
        engine.ownerCancelled()
    }
}
