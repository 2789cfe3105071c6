// DelayProcedure: a procedure that finishes after a duration or at a deadline, on a timer of a
// clock (its own, else its queue's, else real time); a cancel ends it at once.

/// A procedure that does nothing but finish after a duration, or at a deadline.
///
/// ```swift
/// let pause = DelayProcedure(by: .seconds(2))
/// try send.addDependency(pause)   // send runs two seconds after the pause starts
/// ```
///
/// It holds no thread and no concurrency slot while it waits: its `execute()` starts a timer of
/// its clock — the one given, else the clock of the queue it runs in
/// (``ConcurrentOperationQueue/clock``), else real time — and returns.
///
/// - A duration that is not positive, or a deadline already passed when it executes, finishes
///   it at once, without a timer.
/// - A cancel while it waits stops the timer and finishes it at once (cancelled, without an
///   error unless the cancel gave one). Cancelled before it executes, it finishes without ever
///   starting a timer.
/// - ``delay`` may be set until it executes: from result injection, for instance
///   (`try pause.injectResult(from: backOff) { pause, wait in pause.delay = .by(wait) }`).
public final class DelayProcedure: ProcedureOperation, @unchecked Sendable {
    /// How long a ``DelayProcedure`` waits.
    public enum Delay: Sendable, Hashable {
        /// For this long from when it executes.
        case by(Duration)
        /// Until this instant of its clock.
        case until(ContinuousClock.Instant)
    }

    private let clock: (any OperationClock)?
    // protected by lock
    private var _delay: Delay
    // protected by lock: the timer of an executing delay
    private var timer: OperationTimer?

    /// Creates a delay of `duration`.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; `"Delay by <duration>"` by default.
    ///   - duration: How long it waits once it executes; zero or less finishes at once.
    ///   - clock: The clock of its timer; `nil` (the default) for its queue's, or real time.
    public convenience init(name: String? = nil, by duration: Duration, clock: (any OperationClock)? = nil) {
        self.init(name: name ?? "Delay by \(duration)", delay: .by(duration), clock: clock)
    }

    /// Creates a delay until `deadline`.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors; `"Delay until <deadline>"` by default.
    ///   - deadline: When it finishes, on its clock; a deadline already passed when it executes
    ///     finishes it at once.
    ///   - clock: The clock of its timer; `nil` (the default) for its queue's, or real time.
    public convenience init(name: String? = nil, until deadline: ContinuousClock.Instant, clock: (any OperationClock)? = nil) {
        self.init(name: name ?? "Delay until \(deadline)", delay: .until(deadline), clock: clock)
    }

    /// Creates a delay.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - delay: How long it waits (``Delay/by(_:)``) or until when (``Delay/until(_:)``).
    ///   - clock: The clock of its timer; `nil` (the default) for its queue's, or real time.
    public init(name: String? = nil, delay: Delay, clock: (any OperationClock)? = nil) {
        self.clock = clock
        _delay = delay
        super.init(name: name, hookEvents: .didCancel)  // the only hook it overrides (the class is final)
    }

    /// How long it waits, or until when. Setting it once it executes changes nothing.
    public var delay: Delay {
        get { lock.withLock { _delay } }
        set { lock.withLock { _delay = newValue } }
    }

    /// A waiting delay holds no slot of its queue.
    override var waitsWithoutSlot: Bool { true }

    /// Starts the timer, or finishes at once if there is nothing to wait for.
    public override func execute() {
        let (delay, queue, cancelled) = lock.withLock { (_delay, self.queue, procedureLifecycle.isCancelled) }
        guard !cancelled else {
            finish()
            return
        }
        let clock = self.clock ?? queue?.clock ?? SystemOperationClock()
        let deadline: ContinuousClock.Instant
        switch delay {
        case .by(let duration):
            guard duration > .zero else {
                finish()
                return
            }
            deadline = clock.now.advanced(by: duration)
        case .until(let instant):
            guard instant > clock.now else {
                finish()
                return
            }
            deadline = instant
        }
        let timer = clock.schedule(at: deadline) { [weak self] in self?.finish() }
        let cancelledMeanwhile = lock.withLock { () -> Bool in
            guard !procedureLifecycle.isCancelled else { return true }
            self.timer = timer
            return false
        }
        if cancelledMeanwhile {
            timer.cancel()
            finish()
        }
    }

    /// A cancel while it waits: stops the timer and finishes.
    ///
    /// - Parameter error: The error it was cancelled with, or `nil`.
    public override func procedureDidCancel(with error: (any Error)?) {
        // No timer yet: not executing (it finishes without executing), or `execute()` is about
        // to see the cancel.
        guard let timer = lock.withLock({ self.timer.take() }) else { return }
        timer.cancel()
        finish()
    }
}
