import Dispatch

/// A composable object that owns one concurrent operation's lifecycle.
///
/// Any class can own an `OperationStateMachine` and so become a correct concurrent operation:
/// the machine keeps the state (ready → executing → finished, plus a separate cancelled flag),
/// refuses illegal events, and runs the blocks you give it on its dispatch queue. It is the Swift
/// counterpart of RestKit's `RKOperationStateMachine`.
///
/// ```swift
/// final class Download: @unchecked Sendable {
///     private(set) var machine: OperationStateMachine!
///     init() {
///         machine = OperationStateMachine(operation: self, dispatchQueue: .global())
///         try! machine.setExecutionBlock { [weak self] in self?.run() }
///     }
/// }
/// ```
///
/// - `start()`: ready → executing, then the execution block runs asynchronously on
///   ``dispatchQueue``. If the machine was cancelled before it started, the execution block does
///   not run; the machine finishes instead (the finalization block still runs).
/// - `finish()`: executing → finished. The finalization block runs on the calling thread just
///   before the state changes, whether or not the machine was cancelled.
/// - `cancel()`: sets ``isCancelled`` once and runs the cancellation block once, asynchronously on
///   ``dispatchQueue``. It changes no state: the owner must still call `finish()`.
///
/// Illegal events (start twice, finish before start, finish twice, start after finish) change
/// nothing, run no block and throw an ``OperationError`` whose code says why. No block is ever
/// called while the machine's lock is held. After finishing, the machine releases its blocks, so
/// blocks that capture the owner form no lasting retain cycle.
public final class OperationStateMachine {
    /// The operation whose lifecycle this machine models. Held weakly.
    public var operation: AnyObject? { lock.withLock { _operation } }

    /// The dispatch queue on which the execution and cancellation blocks run.
    public let dispatchQueue: DispatchQueue

    /// A recursive lock, so that ``withLock(_:)`` may be re-entered.
    let lock = RecursiveLock()

    // protected by `lock`
    private weak var _operation: AnyObject?
    @exclusivity(unchecked) private var lifecycle = OperationLifecycle()
    // protected by `lock`; released when the machine finishes
    private var executionBlock: (@Sendable () -> Void)?
    private var cancellationBlock: (@Sendable () -> Void)?
    private var finalizationBlock: (@Sendable () -> Void)?

    /// Creates a state machine for `operation`, running its blocks on `dispatchQueue`.
    ///
    /// (A ``ConcurrentOperation`` does not use one: it is its own state machine, with the same
    /// `OperationLifecycle` in its own allocation.)
    ///
    /// - Parameters:
    ///   - operation: The object whose lifecycle the machine models; held weakly.
    ///   - dispatchQueue: The queue on which the execution and cancellation blocks run.
    public init(operation: AnyObject, dispatchQueue: DispatchQueue) {
        _operation = operation
        self.dispatchQueue = dispatchQueue
    }

    // MARK: State

    /// Whether the machine has not started yet. Readable from any thread.
    public var isReady: Bool { lock.withLock { lifecycle.isReady } }
    /// Whether the machine has started and not yet finished. Readable from any thread.
    public var isExecuting: Bool { lock.withLock { lifecycle.isExecuting } }
    /// Whether ``cancel()`` has been called before the machine finished. Readable from any thread.
    public var isCancelled: Bool { lock.withLock { lifecycle.isCancelled } }
    /// Whether the machine has finished. Readable from any thread.
    public var isFinished: Bool { lock.withLock { lifecycle.isFinished } }

    // MARK: Configuration

    /// Sets the block that runs on ``dispatchQueue`` once the machine starts executing.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/alreadyStarted`` once the machine has started.
    public func setExecutionBlock(_ block: @escaping @Sendable () -> Void) throws(OperationError) {
        try configure { $0.executionBlock = block }
    }

    /// Sets the block that runs once, on ``dispatchQueue``, when the machine is cancelled.
    /// The machine does not finish by itself: the block, or the owner, must call ``finish()``.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/alreadyStarted`` once the machine has started.
    public func setCancellationBlock(_ block: @escaping @Sendable () -> Void) throws(OperationError) {
        try configure { $0.cancellationBlock = block }
    }

    /// Sets the block that runs just before the machine becomes finished, whether or not it was
    /// cancelled. It runs on the thread that called ``finish()``.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/alreadyStarted`` once the machine has started.
    public func setFinalizationBlock(_ block: @escaping @Sendable () -> Void) throws(OperationError) {
        try configure { $0.finalizationBlock = block }
    }

    private func configure(_ body: (OperationStateMachine) -> Void) throws(OperationError) {
        let allowed = lock.withLock {
            guard lifecycle.canConfigure else { return false }
            body(self)
            return true
        }
        if !allowed {
            throw OperationError(.alreadyStarted, operations: [ownerName], "blocks must be set before start()")
        }
    }

    // MARK: Events

    /// Starts the machine: ready → executing before this returns; then the execution block runs
    /// asynchronously on ``dispatchQueue``. A machine cancelled before it started does not run its
    /// execution block: it finishes on ``dispatchQueue`` instead.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/noExecutionBlock`` if no execution block was
    ///   set; ``OperationError/Code-swift.struct/alreadyStarted`` or
    ///   ``OperationError/Code-swift.struct/alreadyFinished`` if it has already started. In every
    ///   case nothing changed.
    public func start() throws(OperationError) {
        let outcome: (OperationLifecycle.StartAction, (@Sendable () -> Void)?) = lock.withLock {
            guard lifecycle.canConfigure == false || executionBlock != nil else {
                return (.refuse(.noExecutionBlock), nil)
            }
            return (lifecycle.start(), executionBlock)
        }
        switch outcome {
        case (.execute, let block?):
            dispatchQueue.async(execute: block)
        case (.finishWithoutExecuting, _), (.execute, nil):
            dispatchQueue.async { try? self.finish() }
        case (.refuse(let code), _):
            throw OperationError(code, operations: [ownerName], "start() refused")
        }
    }

    /// Finishes the machine: executing → finished. The finalization block runs on the calling
    /// thread just before the state changes. Callable from any thread.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/notStarted`` before start, or
    ///   ``OperationError/Code-swift.struct/alreadyFinished`` after a first finish. Nothing changed
    ///   and no block ran.
    public func finish() throws(OperationError) {
        try finish { () }.get()
    }

    /// Cancels the machine: sets ``isCancelled`` and runs the cancellation block once,
    /// asynchronously on ``dispatchQueue``. Changes no state.
    ///
    /// - Returns: `true` if this call cancelled the machine; `false` if it was already cancelled,
    ///   finishing or finished (then nothing happens).
    @discardableResult
    public func cancel() -> Bool {
        let (cancelled, block): (Bool, (@Sendable () -> Void)?) = lock.withLock {
            switch lifecycle.cancel() {
            case .runCancellationBlock: return (true, cancellationBlock)
            case .none: return (false, nil)
            }
        }
        if let block { dispatchQueue.async(execute: block) }
        return cancelled
    }

    /// Runs `body` on the calling thread with the machine's lock held: the same recursive lock
    /// that guards start, finish and cancel, so `body` may call them without deadlocking.
    public func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        try lock.withLock(body)
    }

    /// Finishes the machine and, still under the lock at the moment the state becomes finished,
    /// runs `collect` (which must not call out). The finalization block runs without the lock.
    func finish<Collected>(collect: () -> Collected) -> Result<Collected, OperationError> {
        lock.lock()
        switch lifecycle.finish() {
        case .refuse(let code):
            lock.unlock()
            return .failure(OperationError(code, operations: [ownerName], "finish() refused"))
        case .finalize:
            if let finalization = finalizationBlock {
                lock.unlock()
                finalization()
                lock.lock()
            }
            lifecycle.finalized()
            let released = [executionBlock, cancellationBlock, finalizationBlock]
            (executionBlock, cancellationBlock, finalizationBlock) = (nil, nil, nil)
            let collected = collect()
            lock.unlock()
            withExtendedLifetime(released) {}  // the blocks are released here, without the lock
            return .success(collected)
        }
    }

    var ownerName: String {
        if let operation = _operation { return "\(type(of: operation))" }
        return "OperationStateMachine"
    }
}

// All mutable state is protected by `lock`.
extension OperationStateMachine: @unchecked Sendable {}
