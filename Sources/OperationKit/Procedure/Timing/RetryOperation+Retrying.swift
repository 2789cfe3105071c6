// The retry one-liners: `RetryOperation.retrying(3) { makeAttempt() }`, and `.retry(3)` on a
// ClosureProcedure used as the template of its attempts.

extension RetryOperation {
    /// A retry of up to `retries` more attempts after the first: `retrying(3)` runs the work at
    /// most 4 times, like Overdrive's `retry(3)`.
    ///
    /// ```swift
    /// let fetch = RetryOperation.retrying(3) { ClosureProcedure { try download(url) } }
    /// ```
    ///
    /// - Parameters:
    ///   - retries: How many attempts may follow a failed one; below 0 means 0 (one attempt).
    ///   - wait: How long to wait between attempts; ``WaitStrategy/immediate`` by default.
    ///   - clock: The clock of the waits; `nil` for the queue's.
    ///   - makeAttempt: Builds each attempt, a new procedure each time.
    /// - Returns: A ``RetryOperation`` of at most `retries + 1` attempts, retrying every failure.
    public static func retrying(
        _ retries: Int,
        wait: WaitStrategy = .immediate,
        clock: (any OperationClock)? = nil,
        _ makeAttempt: @escaping @Sendable () -> ResultProcedure<Output>
    ) -> RetryOperation<Output> {
        let attempts = retries >= Int.max - 1 ? Int.max : max(0, retries) + 1
        return RetryOperation(maxAttempts: attempts, wait: wait, clock: clock) { _ in makeAttempt() }
    }
}

extension ClosureProcedure {
    /// A retry whose attempts run this procedure's closure: up to `retries` more times after a
    /// first failure (`retry(3)` runs it at most 4 times, like Overdrive's `retry(3)`).
    ///
    /// ```swift
    /// let fetch = ClosureProcedure { try download(url) }.retry(3)
    /// try queue.addOperation(fetch)   // add the retry, not the closure procedure
    /// ```
    ///
    /// This procedure is only a template: each attempt is a new ``ClosureProcedure`` with its
    /// closure and name; its observers, conditions and dependencies are not copied, and it
    /// should not be added to a queue itself. The retry takes its name.
    ///
    /// - Parameters:
    ///   - retries: How many attempts may follow a failed one; below 0 means 0 (one attempt).
    ///   - wait: How long to wait between attempts; ``WaitStrategy/immediate`` by default.
    ///   - clock: The clock of the waits; `nil` for the queue's.
    /// - Returns: The retry. If this procedure has already run (its closure is gone), each
    ///   attempt fails with ``OperationError/Code-swift.struct/alreadyFinished``, and so does the
    ///   retry.
    public func retry(_ retries: Int, wait: WaitStrategy = .immediate, clock: (any OperationClock)? = nil) -> RetryOperation<Output> {
        let name = self.name
        let attempts = retries >= Int.max - 1 ? Int.max : max(0, retries) + 1
        // Read once, here: the template is not running (see above).
        let other = otherBody
        let (synchronous, asynchronous, void) = (other?.synchronous, other?.asynchronous, voidBody)
        let make: @Sendable (Int) -> ResultProcedure<Output>
        if synchronous == nil && asynchronous == nil && void == nil {
            let error = OperationError(
                .alreadyFinished, operations: [displayName], "retry(_:) needs a ClosureProcedure that has not run")
            make = { _ in ClosureProcedure(name: name) { () throws -> Output in throw error } }
        } else {
            make = { _ in
                // A new procedure (not shared yet) given the template's work.
                let attempt = ClosureProcedure(name: name, asynchronous: { $0.finish() })
                // (Its outcome, made by that initialiser, holds the asynchronous body.)
                let body = attempt.otherBody.unsafelyUnwrapped
                body.asynchronous = asynchronous
                body.synchronous = synchronous
                attempt.voidBody = void
                return attempt
            }
        }
        return RetryOperation(name: name, maxAttempts: attempts, wait: wait, clock: clock, makeAttempt: make)
    }
}
