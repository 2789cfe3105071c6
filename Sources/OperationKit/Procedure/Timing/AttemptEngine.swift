// AttemptEngine: the machinery RetryOperation and RepeatProcedure share — attempts run one at a
// time on a queue of the owner's, waits between them on a clock timer, cancels between and during.

/// What the owner of an ``AttemptEngine`` decides once an attempt has finished (and neither the
/// owner nor the attempt was cancelled without an error).
enum AttemptVerdict {
    /// End the owner with this attempt's result: its errors, else its value, else none.
    case finish
    /// Start the next attempt after this wait (none if not positive).
    case again(after: Duration)
}

/// The owner's side of an ``AttemptEngine``: it builds the attempts and judges them.
protocol AttemptDriver<Output>: AnyObject, Sendable {
    associatedtype Output: Sendable
    /// Builds attempt `number` (from 1), or returns `nil` for no further attempt: the owner then
    /// ends with the previous attempt's result (without one before the first).
    func makeAttempt(_ number: Int) -> ResultProcedure<Output>?
    /// Whether the owner ends with attempt `number`, or waits and makes another.
    func verdict(on attempt: ResultProcedure<Output>, number: Int) -> AttemptVerdict
}

/// Runs the attempts of its owner (a ``RetryOperation`` or a ``RepeatProcedure``), one at a time,
/// on a queue of its own whose operations are descendants of the owner.
///
/// Its state is protected by the owner's `lock` (nothing else is taken under it). The
/// owner holds the engine; the engine holds the owner unowned, and keeps it for the length of
/// each call that may outlive the owner's finish (an attempt's finish; a timer's action holds it
/// weakly and does nothing once it is gone).
final class AttemptEngine<Output: Sendable>: @unchecked Sendable {
    unowned let owner: ResultProcedure<Output>
    unowned let driver: any AttemptDriver<Output>
    /// The attempts' queue.
    let queue: ConcurrentOperationQueue
    /// The clock given to the owner, if any.
    let givenClock: (any OperationClock)?

    // protected by owner.lock
    private(set) var count = 0
    // protected by owner.lock: the running attempt
    private var current: ResultProcedure<Output>?
    // protected by owner.lock: the last attempt that finished
    private var previous: ResultProcedure<Output>?
    // protected by owner.lock: waiting between two attempts; the wait, its end, its timer
    private var waiting = false
    private var waitDelay: Duration = .zero
    private var waitDeadline: ContinuousClock.Instant?
    private var timer: OperationTimer?
    // protected by owner.lock: the clock the waits use, fixed when the owner executes
    private var clock: (any OperationClock)?

    init(owner: ResultProcedure<Output>, driver: any AttemptDriver<Output>, queueName: String, clock: (any OperationClock)?) {
        self.owner = owner
        self.driver = driver
        self.givenClock = clock
        queue = ConcurrentOperationQueue(name: queueName, clock: clock ?? SystemOperationClock())
        // Attempts are descendants of the owner: they may take its MutuallyExclusive categories.
        queue.owningProcedure = owner
    }

    private func withLock<T>(_ body: () throws -> T) rethrows -> T {
        try owner.lock.withLock(body)
    }

    /// How many attempts have been started.
    var attemptCount: Int { withLock { count } }

    /// The owner executes: fix the clock (the given one, else the owner's queue's, else real
    /// time; the attempts' queue takes it too) and start the first attempt.
    func start() {
        let resolved: any OperationClock
        if let givenClock {
            resolved = givenClock
        } else {
            let ownerQueue = withLock { owner.queue }
            resolved = ownerQueue?.clock ?? SystemOperationClock()
            // The attempts' timeouts follow the same clock.
            queue.lock.withLock { queue._clock = resolved }
        }
        withLock { clock = resolved }
        startAttempt(1)
    }

    private func startAttempt(_ number: Int) {
        if owner.isCancelled {
            owner.finish()
            return
        }
        guard let attempt = driver.makeAttempt(number) else {
            finishWithPrevious()
            return
        }
        let proceed = withLock { () -> Bool in
            guard !owner.procedureLifecycle.isCancelled else { return false }
            count = number
            current = attempt
            waiting = false
            timer = nil
            return true
        }
        guard proceed else {
            owner.finish()
            return
        }
        do {
            try attempt.addObserver(ClosureObserver(didFinish: { [self] attempt, _ in
                guard let attempt = attempt as? ResultProcedure<Output> else { return }
                attemptFinished(attempt, number: number)
            }))
            try queue.addOperation(attempt)
        } catch {
            owner.finish(with: error)
        }
    }

    private func attemptFinished(_ attempt: ResultProcedure<Output>, number: Int) {
        // A cancel while the wait below is being set up finishes the owner at once (see
        // `ownerCancelled`), and then nothing else need hold it: keep it to the end of this call.
        withExtendedLifetime(owner) { handleFinished(attempt, number: number) }
    }

    private func handleFinished(_ attempt: ResultProcedure<Output>, number: Int) {
        let (cancelled, ownerQueue) = withLock {
            current = nil
            previous = attempt
            return (owner.procedureLifecycle.isCancelled, owner.queue)
        }
        if cancelled {
            owner.finish(withErrors: attempt.errors)
            return
        }
        if attempt.isCancelled && attempt.errors.isEmpty {
            // Cancelled by someone else, without an error: stop.
            owner.cancel()
            owner.finish()
            return
        }
        switch driver.verdict(on: attempt, number: number) {
        case .finish:
            finish(like: attempt)
        case .again(let wait):
            let delay = max(wait, .zero)
            if let instrument = ConcurrentOperation.instrumentSlot(of: ownerQueue).current {
                owner.tell(.retrying(attempt: number + 1, delay: delay), queue: ownerQueue, to: instrument)
            }
            if delay <= .zero {
                startAttempt(number + 1)
                return
            }
            // A cancel since the look above (from the driver's verdict, say) found neither a
            // running attempt nor a wait, and left the owner to this step: the look for it and
            // the start of the wait are one critical section, so it is either seen here or sees
            // the wait.
            let clock = withLock { () -> (any OperationClock)? in
                guard !owner.procedureLifecycle.isCancelled else { return nil }
                let clock = self.clock ?? SystemOperationClock()
                waiting = true
                waitDelay = delay
                waitDeadline = clock.now.advanced(by: delay)
                return clock
            }
            guard let clock else {
                owner.finish(withErrors: attempt.errors)
                return
            }
            let timer = clock.schedule(after: delay) { [self, weak owner] in
                // A timer that fired before the cancel could stop it (as it fired, or inside
                // `schedule`) may find its owner gone: then there is nothing to do.
                guard let owner else { return }
                withExtendedLifetime(owner) {
                    // The wait ends here, in one critical section with the look for a cancel: a
                    // cancel that saw the wait finishes the owner (see `ownerCancelled`), and one
                    // that comes after finds no wait and leaves it to `startAttempt`. The owner
                    // is finished once either way.
                    let ends = withLock { () -> Bool in
                        guard stillWaitingLocked(after: number) else { return false }
                        waiting = false
                        self.timer = nil
                        return true
                    }
                    if ends { startAttempt(number + 1) }
                }
            }
            // Kept only if still waiting (a clock that fired at once ended the wait). A cancel
            // since the wait began found no timer to stop (`ownerCancelled` finished the owner,
            // or will): stop it here, or it would fire for the finished owner at the end of the
            // wait.
            let kept = withLock { () -> Bool in
                guard stillWaitingLocked(after: number) else { return false }
                self.timer = timer
                return true
            }
            if !kept { timer.cancel() }
        }
    }

    /// Under the owner's lock: whether the wait after attempt `number` is still on — not ended by
    /// its timer, by a clock that fired at once, or by a cancel of the owner.
    private func stillWaitingLocked(after number: Int) -> Bool {
        waiting && count == number && !owner.procedureLifecycle.isCancelled
    }

    /// Ends the owner with `attempt`'s result.
    private func finish(like attempt: ResultProcedure<Output>) {
        let errors = attempt.errors
        if !errors.isEmpty {
            owner.finish(withErrors: errors)
        } else if let value = attempt.output {
            owner.finish(withValue: value)
        } else {
            owner.finish()
        }
    }

    private func finishWithPrevious() {
        if let previous = withLock({ previous }) { finish(like: previous) } else { owner.finish() }
    }

    /// The owner was cancelled: cancel the running attempt, or, while waiting between attempts,
    /// stop the timer and finish the owner at once.
    func ownerCancelled() {
        let (attempt, waiting, timer) = withLock { (current, self.waiting, self.timer) }
        attempt?.cancel()
        if waiting {
            timer?.cancel()
            owner.finish()
        }
    }

    /// What the owner waits for, for its snapshot: the running attempt, or the wait before the next.
    func waitBlockers() -> [OperationSnapshot.Blocker] {
        let (number, current, waiting, delay, deadline, clock) = withLock {
            (count, self.current, self.waiting, waitDelay, waitDeadline, self.clock)
        }
        if waiting {
            let now = clock?.now ?? ContinuousClock.now
            let remaining = deadline.map { max(.zero, min(delay, $0 - now)) } ?? delay
            return [.retryDelay(nextAttempt: number + 1, delay: delay, remaining: remaining)]
        }
        guard let current else { return [] }
        return [.retryAttempt(number, OperationReference(current))]
    }
}
