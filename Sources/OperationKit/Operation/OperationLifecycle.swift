/// The pure transition logic of an ``OperationStateMachine``: state × event → new state + action.
///
/// It holds no lock and calls nothing, so it is tested without threads, exhaustively over every
/// state and event (`OperationLifecycleTests`). `OperationStateMachine` runs it under its lock
/// and performs the returned action after releasing the lock.
///
///     ready ──start──▶ executing ──finish──▶ finishing ──finalized──▶ finished
///     cancel: sets `isCancelled` once, in ready or executing; changes no state.
///
/// `finishing` is the short window in which the finalization block runs: the operation still
/// reports executing, and a second `finish()` is already refused.
struct OperationLifecycle: Hashable, Sendable {
    enum State: Hashable, Sendable, CaseIterable {
        case ready
        case executing
        case finishing
        case finished
    }

    /// What to do after `start()`.
    enum StartAction: Hashable, Sendable {
        /// Run the execution block.
        case execute
        /// The machine was cancelled before it started: do not execute, finish at once.
        case finishWithoutExecuting
        /// The event is illegal in this state; nothing changed.
        case refuse(OperationError.Code)
    }

    /// What to do after `finish()`.
    enum FinishAction: Hashable, Sendable {
        /// Run the finalization block, then report `finalized()`.
        case finalize
        /// The event is illegal in this state; nothing changed.
        case refuse(OperationError.Code)
    }

    /// What to do after `cancel()`.
    enum CancelAction: Hashable, Sendable {
        /// The flag was set by this call: run the cancellation block (once).
        case runCancellationBlock
        /// Already cancelled, or already finishing or finished: nothing changed.
        case none
    }

    private(set) var state: State = .ready
    private(set) var isCancelled = false

    init() {}

    /// A lifecycle in an arbitrary state, for tests.
    init(state: State, isCancelled: Bool) {
        self.state = state
        self.isCancelled = isCancelled
    }

    var isReady: Bool { state == .ready }
    var isExecuting: Bool { state == .executing || state == .finishing }
    var isFinished: Bool { state == .finished }

    /// Blocks may be configured only before start.
    var canConfigure: Bool { state == .ready }

    mutating func start() -> StartAction {
        switch state {
        case .ready:
            state = .executing
            return isCancelled ? .finishWithoutExecuting : .execute
        case .executing, .finishing:
            return .refuse(.alreadyStarted)
        case .finished:
            return .refuse(.alreadyFinished)
        }
    }

    mutating func finish() -> FinishAction {
        switch state {
        case .ready:
            return .refuse(.notStarted)
        case .executing:
            state = .finishing
            return .finalize
        case .finishing, .finished:
            return .refuse(.alreadyFinished)
        }
    }

    /// The finalization block has run: the state becomes finished. Only the machine sends this,
    /// and only after `finish()` returned `.finalize`, so any other state is an internal bug.
    mutating func finalized() {
        guard state == .finishing else {
            preconditionFailure("Internal inconsistency: state \(state) received finalized()")
        }
        state = .finished
    }

    mutating func cancel() -> CancelAction {
        switch state {
        case .ready, .executing:
            if isCancelled { return .none }
            isCancelled = true
            return .runCancellationBlock
        case .finishing, .finished:
            return .none
        }
    }
}
