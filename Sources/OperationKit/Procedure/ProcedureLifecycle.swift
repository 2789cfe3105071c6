/// The states of a ``ProcedureOperation``, in lifecycle order.
///
///     initialized ─added to a queue─▶ pending ─dependencies finished─▶ evaluatingConditions ─▶ ready
///       ─▶ executing ─finish─▶ finishing ─▶ finished
///
/// A procedure without conditions (or one cancelled before its conditions were evaluated) goes
/// from pending straight to ready. One that was cancelled, or whose conditions failed, goes from
/// ready to finishing without executing. A procedure started by hand with
/// ``ConcurrentOperation/start()`` goes from initialized to executing (or, if it was cancelled, to
/// finishing). States only move forward; finished is final.
public enum ProcedureState: Int, Hashable, Sendable, CaseIterable, Comparable, CustomStringConvertible {
    /// Created, not in a queue yet.
    case initialized
    /// In a queue, waiting for its dependencies (not for the dependencies its conditions
    /// produced: each condition waits for its own).
    case pending
    /// Its dependencies have finished; its conditions are being evaluated, each once the
    /// dependency it produced (if any) has finished. ``ProcedureOperation/isReady`` is `false`
    /// meanwhile.
    case evaluatingConditions
    /// Its conditions are satisfied (or it has none): waiting for a queue worker, and for its
    /// ``MutuallyExclusive`` categories if it has any. A procedure that was cancelled, or whose
    /// conditions failed, is also ready: it finishes without executing when a worker takes it.
    case ready
    /// Executing: will-execute observers, ``ConcurrentOperation/execute()``, and whatever work
    /// it started, until a finish is accepted.
    case executing
    /// A finish was accepted (or it is finishing without executing): the queue's will-finish
    /// and the will-finish observers are being told; the completion block and did-finish follow.
    case finishing
    /// Finished: ``ConcurrentOperation/isFinished`` is `true`. The completion block, the release
    /// of dependents, the did-finish observers and then the release of waiters follow on the
    /// finishing thread, so they may still be running (no wait has returned yet).
    case finished

    /// Orders the states along the lifecycle, from ``initialized`` to ``finished``.
    ///
    /// - Parameters:
    ///   - lhs: A state.
    ///   - rhs: Another state.
    /// - Returns: Whether `lhs` comes before `rhs` in the lifecycle.
    public static func < (lhs: ProcedureState, rhs: ProcedureState) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The case's name, for example `evaluatingConditions`.
    public var description: String {
        switch self {
        case .initialized: "initialized"
        case .pending: "pending"
        case .evaluatingConditions: "evaluatingConditions"
        case .ready: "ready"
        case .executing: "executing"
        case .finishing: "finishing"
        case .finished: "finished"
        }
    }
}

/// The transition function of a ``ProcedureOperation``: its ``ProcedureState`` and whether it was
/// cancelled or its conditions failed. One `mutating func` per event, each returning what to do.
/// Holds no lock and calls nothing; unit-tested without threads over every state and event.
struct ProcedureLifecycle: Hashable, Sendable {
    private(set) var state: ProcedureState = .initialized
    private(set) var isCancelled = false
    /// Whether a condition failed (or was ignored): the procedure finishes without executing.
    private(set) var conditionsFailed = false

    init() {}

    init(state: ProcedureState, isCancelled: Bool, conditionsFailed: Bool = false) {
        self.state = state
        self.isCancelled = isCancelled
        self.conditionsFailed = conditionsFailed
    }

    /// Whether conditions and observers may still be added.
    var acceptsConditions: Bool { state < .evaluatingConditions }
    var acceptsObservers: Bool { state < .executing }

    // MARK: Events

    /// Added to a queue.
    mutating func enqueue() -> Bool {
        guard state == .initialized else { return false }
        state = .pending
        return true
    }

    /// The queue's claim was undone (registering a dependency failed): back to initialized,
    /// keeping the cancelled flag.
    mutating func unenqueue() {
        if state == .pending { state = .initialized }
    }

    enum DependenciesAction: Hashable, Sendable {
        /// Evaluate the conditions; then call ``conditionsEvaluated(satisfied:)``.
        case evaluateConditions
        /// Go on to start (the procedure is ready).
        case proceed
    }

    /// Its dependencies have finished (a queue worker took it). `hasConditions`: whether there is
    /// anything to evaluate. A cancelled procedure skips evaluation.
    mutating func dependenciesFinished(hasConditions: Bool) -> DependenciesAction {
        switch state {
        case .initialized:
            // A queue worker takes only enqueued procedures, which are pending.
            preconditionFailure("Internal inconsistency: state \(state) received dependenciesFinished()")
        case .pending:
            if hasConditions && !isCancelled {
                state = .evaluatingConditions
                return .evaluateConditions
            }
            state = .ready
            return .proceed
        case .evaluatingConditions:
            // Taken by a worker again while evaluating: not possible, evaluation holds it back.
            preconditionFailure("Internal inconsistency: state \(state) received dependenciesFinished()")
        case .ready, .executing, .finishing, .finished:
            // Conditions already evaluated (the procedure was pushed back to its queue).
            return .proceed
        }
    }

    /// The conditions are all evaluated. Returns `false` when the result came too late (the
    /// procedure was cancelled meanwhile and no longer waits for it).
    mutating func conditionsEvaluated(satisfied: Bool) -> Bool {
        guard state == .evaluatingConditions else { return false }
        state = .ready
        if !satisfied { conditionsFailed = true }
        return true
    }

    enum StartAction: Hashable, Sendable {
        case execute
        case finishWithoutExecuting
        case refuse
    }

    /// The procedure starts (on a queue worker, or by hand).
    mutating func start() -> StartAction {
        switch state {
        case .initialized, .ready:
            // From initialized: `start()` by hand, without a queue (and so without conditions).
            if isCancelled || conditionsFailed {
                state = .finishing
                return .finishWithoutExecuting
            }
            state = .executing
            return .execute
        case .pending, .evaluatingConditions, .executing, .finishing, .finished:
            // Pending: its queue has not taken it (its dependencies and conditions come first).
            return .refuse
        }
    }

    enum FinishAction: Hashable, Sendable {
        /// Go on finishing: will-finish observers, then ``finished()``.
        case finish
        /// Not executing yet: nothing changes.
        case refuseNotStarted
        /// A finish already counted: this one is ignored.
        case ignoreAlreadyFinishing
    }

    /// `finish()` from the procedure's work.
    mutating func finish() -> FinishAction {
        switch state {
        case .executing:
            state = .finishing
            return .finish
        case .initialized, .pending, .evaluatingConditions, .ready:
            return .refuseNotStarted
        case .finishing, .finished:
            return .ignoreAlreadyFinishing
        }
    }

    /// The finish is complete.
    mutating func finished() {
        guard state == .finishing else {
            preconditionFailure("Internal inconsistency: state \(state) received finished()")
        }
        state = .finished
    }

    enum CancelAction: Hashable, Sendable {
        /// Already cancelled, finishing or finished: nothing happens.
        case none
        /// Cancelled before executing; it will finish without executing.
        case cancelledBeforeExecuting
        /// Cancelled while its conditions were being evaluated: stop waiting for them and put it
        /// back in its queue, where it finishes without executing.
        case abandonEvaluation
        /// Cancelled while executing: tell it (it finishes itself).
        case cancelledWhileExecuting
    }

    mutating func cancel() -> CancelAction {
        if isCancelled { return .none }
        switch state {
        case .finishing, .finished:
            return .none
        case .initialized, .pending, .ready:
            isCancelled = true
            return .cancelledBeforeExecuting
        case .evaluatingConditions:
            isCancelled = true
            state = .ready
            return .abandonEvaluation
        case .executing:
            isCancelled = true
            return .cancelledWhileExecuting
        }
    }
}
