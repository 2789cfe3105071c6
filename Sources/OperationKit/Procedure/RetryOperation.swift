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
/// An attempt that finishes without errors ends the retry with its value. A failed one is retried
/// while attempts remain and `shouldRetry` agrees, after the wait; otherwise the retry finishes
/// with that attempt's errors. An attempt cancelled by someone else ends the retry, cancelled.
/// Cancelling the retry cancels the running attempt and starts no other.
public final class RetryOperation<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    /// How long to wait before the next attempt.
    public enum WaitStrategy: Sendable, Hashable {
        /// Retry at once.
        case immediate
        /// Wait the same time before each retry.
        case fixed(Duration)
        /// Wait `initial`, then `multiplier` times longer each time, at most `maximum`, each wait
        /// scaled by a random factor in `1 - jitter ... 1 + jitter`.
        case exponential(initial: Duration, multiplier: Double = 2, maximum: Duration? = nil, jitter: Double = 0)

        /// The wait before attempt `attempt + 1`, after attempt `attempt` (from 1) failed.
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
                // Clamped: a huge exponential wait must not overflow (about 292 years at most).
                let nanoseconds = min((seconds * 1e9).rounded(), Double(Int64.max / 2))
                return .nanoseconds(Int64(max(0, nanoseconds)))
            }
        }
    }

    /// The most attempts that run.
    public let maxAttempts: Int
    /// The wait between attempts.
    public let wait: WaitStrategy
    private let shouldRetry: @Sendable (_ error: any Error, _ attempt: Int) -> Bool
    private let makeAttempt: @Sendable (_ attempt: Int) -> ResultProcedure<Output>
    private let attemptQueue: ConcurrentOperationQueue
    // protected by machine.lock
    private var _attemptCount = 0
    // protected by machine.lock
    private var current: ResultProcedure<Output>?
    // protected by machine.lock: waiting between two attempts
    private var waiting = false

    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - maxAttempts: The most attempts (at least 1).
    ///   - wait: How long to wait between attempts.
    ///   - shouldRetry: Whether a failure with this error, in this attempt (from 1), is worth
    ///     another attempt; by default every failure is.
    ///   - makeAttempt: Builds attempt number `attempt` (from 1): a new procedure each time.
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
    }

    /// How many attempts have started.
    public var attemptCount: Int { machine.lock.withLock { _attemptCount } }

    public override func execute() {
        startAttempt(1)
    }

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
        let cancelled = machine.lock.withLock {
            current = nil
            return procedureLifecycle.isCancelled
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
            if delay <= .zero {
                startAttempt(number + 1)
            } else {
                machine.lock.withLock { waiting = true }
                DispatchQueue.global().asyncAfter(deadline: .now() + delay.dispatchInterval) {
                    self.startAttempt(number + 1)
                }
            }
        } else {
            finish(withErrors: errors)
        }
    }

    public override func procedureDidCancel(with error: (any Error)?) {
        let (attempt, waiting) = machine.lock.withLock { (current, self.waiting) }
        attempt?.cancel()
        // Waiting between attempts: no attempt will report back, so finish now (the timer then
        // finds the retry cancelled and does nothing).
        if waiting { finish() }
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
