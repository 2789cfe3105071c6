import Dispatch

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
public final class RetryOperation<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    /// How long to wait before the next attempt. The wait runs on a timer and holds no thread
    /// and no concurrency slot (like a group waiting for its children, a retry whose `execute()`
    /// has returned holds no slot of its queue).
    public enum WaitStrategy: Sendable, Hashable {
        /// Retry at once, on the thread that finished the failed attempt.
        case immediate
        /// Wait the same time before each retry.
        case fixed(Duration)
        /// Wait `initial` after the first attempt, then `multiplier` times longer after each
        /// further one, at most `maximum`; then each wait is scaled by a random factor in
        /// `max(0, 1 - jitter) ... 1 + jitter`, so with jitter a wait may exceed `maximum` by up
        /// to that factor. Waits are clamped to about 146 years, so a late attempt cannot
        /// overflow.
        case exponential(initial: Duration, multiplier: Double = 2, maximum: Duration? = nil, jitter: Double = 0)

        /// The wait before attempt `attempt + 1`, once attempt `attempt` has failed.
        ///
        /// - Parameter attempt: The number of the attempt that failed, from 1 (0 counts as 1).
        /// - Returns: The wait; `.zero` for ``immediate``. With jitter, a new random value each
        ///   call.
        public func delay(after attempt: Int) -> Duration {
            switch self {
            case .immediate:
                return .zero
            case .fixed(let duration):
                return duration
            case .exponential(let initial, let multiplier, let maximum, let jitter):
                var seconds = initial.seconds
                for _ in 1..<max(1, attempt) { seconds *= multiplier }
                if let maximum { seconds = min(seconds, maximum.seconds) }
                if jitter > 0 { seconds *= Double.random(in: max(0, 1 - jitter)...(1 + jitter)) }
                // Clamped: a huge exponential wait must not overflow (about 146 years at most).
                let nanoseconds = min((seconds * 1e9).rounded(), Double(Int64.max / 2))
                return .nanoseconds(Int64(max(0, nanoseconds)))
            }
        }
    }

    /// The most attempts that run (at least 1).
    public let maxAttempts: Int
    /// The wait between attempts.
    public let wait: WaitStrategy
    private let shouldRetry: @Sendable (_ error: any Error, _ attempt: Int) -> Bool
    private let makeAttempt: @Sendable (_ attempt: Int) -> ResultProcedure<Output>
    let attemptQueue: ConcurrentOperationQueue
    // protected by machine.lock
    var _attemptCount = 0
    // protected by machine.lock
    var current: ResultProcedure<Output>?
    // protected by machine.lock: waiting between two attempts
    var waiting = false
    // protected by machine.lock: the wait between two attempts, and when it began (snapshots)
    var waitingDelay: Duration = .zero
    var waitingStamp: UInt32 = 0

    /// Creates the retry. No attempt is made before it executes.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - maxAttempts: The most attempts; values below 1 mean 1.
    ///   - wait: How long to wait between attempts; ``WaitStrategy/immediate`` by default.
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
        shouldRetry: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> Bool = { _, _ in true },
        makeAttempt: @escaping @Sendable (_ attempt: Int) -> ResultProcedure<Output>
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.wait = wait
        self.shouldRetry = shouldRetry
        self.makeAttempt = makeAttempt
        attemptQueue = ConcurrentOperationQueue(name: "\(name ?? "RetryOperation").attempts")
        super.init(name: name)
        // Attempts are descendants of the retry: they may take its MutuallyExclusive categories.
        attemptQueue.owningProcedure = self
        hookEvents = .didCancel  // the only hook it overrides (the class is final)
    }

    /// How many attempts have been started so far.
    public var attemptCount: Int { machine.lock.withLock { _attemptCount } }

    /// Starts the first attempt.
    public override func execute() {
        startAttempt(1)
    }

    /// A retry whose `execute()` has returned only waits for its attempts: it gives its slot back.
    override var waitsWithoutSlot: Bool { true }

    private func startAttempt(_ number: Int) {
        if isCancelled {
            finish()
            return
        }
        let attempt = makeAttempt(number)
        let proceed = machine.lock.withLock { () -> Bool in
            guard !procedureLifecycle.isCancelled else { return false }
            _attemptCount = number
            current = attempt
            waiting = false
            return true
        }
        guard proceed else {
            finish()
            return
        }
        do {
            try attempt.addObserver(ClosureObserver(didFinish: { [self] attempt, _ in
                guard let attempt = attempt as? ResultProcedure<Output> else { return }
                attemptFinished(attempt, number: number)
            }))
        } catch {
            finish(with: error)
            return
        }
        do {
            try attemptQueue.addOperation(attempt)
        } catch {
            finish(with: error)
        }
    }

    private func attemptFinished(_ attempt: ResultProcedure<Output>, number: Int) {
        let (cancelled, queue) = machine.lock.withLock {
            current = nil
            return (procedureLifecycle.isCancelled, self.queue)
        }
        let errors = attempt.errors
        if cancelled {
            finish(withErrors: errors)
        } else if errors.isEmpty && !attempt.isCancelled {
            if let value = attempt.output { finish(withValue: value) } else { finish() }
        } else if attempt.isCancelled && errors.isEmpty {
            // Cancelled by someone else, without an error: stop.
            cancel()
            finish()
        } else if number < maxAttempts, let error = errors.first, shouldRetry(error, number) {
            let delay = wait.delay(after: number)
            if let instrument = Self.instrumentSlot(of: queue).current {
                tell(.retrying(attempt: number + 1, delay: max(delay, .zero)), queue: queue, to: instrument)
            }
            if delay <= .zero {
                startAttempt(number + 1)
            } else {
                machine.lock.withLock {
                    waiting = true
                    waitingDelay = delay
                    waitingStamp = CoarseClock.stamp()
                }
                DispatchQueue.global().asyncAfter(deadline: .now() + delay.dispatchInterval) {
                    self.startAttempt(number + 1)
                }
            }
        } else {
            finish(withErrors: errors)
        }
    }

    /// The attempts' queue takes the instrument of the queue the retry was added to.
    override func adoptInstrument(_ instrument: any OperationInstrument) {
        attemptQueue.adoptInstrument(instrument, tellHeld: true)
    }

    /// The attempts' queue takes the executor and clock of the queue the retry was added to.
    override func adoptQueueSettings(of queue: ConcurrentOperationQueue) {
        attemptQueue.adoptSettings(of: queue)
    }

    /// Cancels the running attempt, or, while waiting between attempts, finishes the retry.
    ///
    /// - Parameter error: The error the retry was cancelled with, or `nil`.
    public override func procedureDidCancel(with error: (any Error)?) {
        let (attempt, waiting) = machine.lock.withLock { (current, self.waiting) }
        attempt?.cancel()
        // Waiting between attempts: no attempt will report back, so finish now (the timer then
        // finds the retry cancelled and does nothing).
        if waiting { finish() }
    }
}
