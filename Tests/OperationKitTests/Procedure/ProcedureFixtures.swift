import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// Shared fixtures for the procedure-layer tests (sections B, C, D, K, L, M of SCENARIOS.md).
// Names start with "Procedure" or say what they are, since other suites share this test target.

/// How long a procedure test waits for something that must happen. Generous: a hang fails the
/// test instead of hanging the run, and no assertion depends on how fast anything is.
let procedureTimeout: Duration = .seconds(20)

/// An error with an identity, to check which error arrived where.
struct ProcedureTestError: Error, Hashable, CustomStringConvertible {
    let id: Int
    init(_ id: Int) { self.id = id }
    var description: String { "E\(id)" }
}

/// The ids of the `ProcedureTestError`s in `errors`, in order; other errors show as -1.
func errorIDs(_ errors: [any Error]) -> [Int] {
    errors.map { ($0 as? ProcedureTestError)?.id ?? -1 }
}

/// The codes of the `OperationError`s in `errors`, in order; other errors show as `nil`.
func errorCodes(_ errors: [any Error]) -> [OperationError.Code?] {
    errors.map { ($0 as? OperationError)?.code }
}

// MARK: - Waiting

// On Linux, Swift concurrency and the queues under test share the global dispatch pool, whose
// width is the number of cores; a test that blocks one of its threads can delay every queue by
// the second the pool takes to add a thread. So the tests are `async` and wait with these, which
// block a thread of a serial dispatch queue of their own instead (serial queues are
// "overcommit": dispatch gives each a thread at once). Each returns `false` on timeout.

/// Runs `body` on a thread outside the global pool, for test code that blocks.
func onThreadOfItsOwn(_ body: @escaping @Sendable () -> Void) {
    DispatchQueue(label: "procedure-tests.waiting").async(execute: body)
}

/// A queue for test work scheduled later (never blocking).
let procedureTestLaterQueue = DispatchQueue(label: "procedure-tests.later", attributes: .concurrent)

/// Runs the blocking `wait` outside the global pool and returns its result.
func waitingOffThePool(_ wait: @escaping @Sendable () -> Bool) async -> Bool {
    await withCheckedContinuation { continuation in
        onThreadOfItsOwn { continuation.resume(returning: wait()) }
    }
}

extension Latch {
    /// Whether the latch opens within `timeout` (the test kit's `opened(within:)`, with this
    /// target's default timeout).
    func opens(within timeout: Duration = procedureTimeout) async -> Bool {
        await opened(within: timeout)
    }
}

extension ConcurrentOperation {
    /// Whether the operation finishes (and its completion block has run) within `timeout`.
    func finishes(within timeout: Duration = procedureTimeout) async -> Bool {
        await waitingOffThePool { self.waitUntilFinishedBlocking(timeout: timeout) }
    }
}

extension ConcurrentOperationQueue {
    /// Whether the queue has released all its operations within `timeout`.
    func empties(within timeout: Duration = procedureTimeout) async -> Bool {
        await waitingOffThePool { self.waitUntilAllOperationsAreFinishedBlocking(timeout: timeout) }
    }
}

/// Polls `condition` until it holds or `timeout` passes, pausing between checks (see
/// `PollPause`); for the rare state that has no event to wait for.
func eventually(within timeout: Duration = procedureTimeout, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    var pause = PollPause()
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        await pause.next()
    }
    return true
}

/// A category name no other test uses: the exclusivity register is process-wide and suites run
/// in parallel.
func uniqueExclusivityCategory(_ label: String = "category") -> String {
    "\(label)-\(exclusivityCategoryCounter.add(1, ordering: .relaxed).newValue)"
}

private let exclusivityCategoryCounter = Atomic<Int>(0)

// MARK: - Observing

/// Records every observer event of a procedure, with the procedure's state at that moment, and
/// opens `finished` when did-finish has been delivered (the last event; waits for the procedure
/// return only after it, but a test that never waits can wait for this latch).
final class ProcedureEventLog: Sendable {
    private let log = Recorder<String>()
    private let states = Recorder<String>()
    private let cancelErrors = Recorder<String>()
    private let finishErrors = Recorder<[any Error]>()
    let finished = Latch()
    /// Opens when did-execute has been delivered to this log (`execute()` has returned).
    let executed = Latch()
    /// Opens when did-cancel has been delivered to this log. (A cancel while another thread is
    /// delivering an event returns before its did-cancel is delivered, by that thread.)
    let cancelled = Latch()

    init() {}

    /// A new observer that writes into this log.
    var observer: ClosureObserver {
        ClosureObserver(
            didAttach: { self.note("didAttach", $0) },
            willExecute: { self.note("willExecute", $0) },
            didExecute: {
                self.note("didExecute", $0)
                self.executed.countDown()
            },
            didCancel: { procedure, error in
                self.cancelErrors.record(error.map { "\($0)" } ?? "nil")
                self.note("didCancel", procedure)
                self.cancelled.countDown()
            },
            didProduce: { procedure, operation in self.note("didProduce(\(operation.displayName))", procedure) },
            willFinish: { procedure, errors in
                self.finishErrors.record(errors)
                self.note("willFinish", procedure)
            },
            didFinish: { procedure, errors in
                self.finishErrors.record(errors)
                self.note("didFinish", procedure)
                self.finished.countDown()
            })
    }

    private func note(_ event: String, _ procedure: ProcedureOperation) {
        states.record("\(event):\(procedure.state)")
        log.record(event)
    }

    /// The events, in the order they were delivered.
    var events: [String] { log.values }
    /// The events with the state each one saw, as `event:state`.
    var eventsWithStates: [String] { states.values }
    /// The error of each did-cancel, as its description or "nil".
    var cancelledWith: [String] { cancelErrors.values }
    /// The errors passed to will-finish, then to did-finish.
    var errorsAtFinish: [[any Error]] { finishErrors.values }

    /// Whether did-finish is delivered within `timeout`.
    func finishes(within timeout: Duration = procedureTimeout) async -> Bool { await finished.opens(within: timeout) }
}

// MARK: - Conditions

/// A condition that records its evaluation and decides `result` synchronously.
struct RecordingCondition: OperationCondition {
    let label: String
    let recorder: Recorder<String>
    let result: ConditionResult

    init(_ label: String, _ recorder: Recorder<String>, _ result: ConditionResult = .satisfied) {
        self.label = label
        self.recorder = recorder
        self.result = result
    }

    var name: String { label }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        recorder.record(label)
        completion(result)
    }
}

/// A condition whose evaluation the test completes by hand (`complete(_:)`), from the test's
/// thread: no thread waits meanwhile. `evaluating` opens when its evaluation has started.
final class ManualCondition: OperationCondition, @unchecked Sendable {
    // `completion` and `early` are confined to `queue`; the latches synchronise themselves.
    private let queue = DispatchQueue(label: "ManualCondition")
    private var completion: (@Sendable (ConditionResult) -> Void)?
    private var early: ConditionResult?
    let evaluating = Latch()
    let evaluations = AtomicCounter()

    init() {}

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        evaluations.increment()
        let result = queue.sync { () -> ConditionResult? in
            if let early { return early }
            self.completion = completion
            return nil
        }
        evaluating.countDown()
        if let result { completion(result) }
    }

    /// Completes the evaluation with `result` (now if it has started, else as soon as it starts).
    func complete(_ result: ConditionResult = .satisfied) {
        let completion = queue.sync { () -> (@Sendable (ConditionResult) -> Void)? in
            defer { self.completion = nil }
            if self.completion == nil { early = result }
            return self.completion
        }
        completion?(result)
    }
}

/// A condition that produces a dependency (made by `make`, remembered in `produced`) and then
/// decides `result`, recording its evaluation as `label`.
struct ProducingCondition: OperationCondition {
    let label: String
    let recorder: Recorder<String>
    let result: ConditionResult
    let produced: Recorder<ConcurrentOperation>
    let make: @Sendable () -> ConcurrentOperation

    init(
        _ label: String, _ recorder: Recorder<String>, result: ConditionResult = .satisfied,
        produced: Recorder<ConcurrentOperation> = Recorder(), make: @escaping @Sendable () -> ConcurrentOperation
    ) {
        self.label = label
        self.recorder = recorder
        self.result = result
        self.produced = produced
        self.make = make
    }

    var name: String { label }

    func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        let operation = make()
        produced.record(operation)
        return operation
    }

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        recorder.record(label)
        completion(result)
    }
}

// MARK: - Procedures

/// A procedure that executes without finishing: it finishes only when the test calls `finish`, or
/// when it is cancelled if `finishesWhenTold` (from its did-cancel hook, on another thread).
final class ProcedureAwaitingFinish: ProcedureOperation, @unchecked Sendable {
    // No mutable state of its own: the latches and flag are set in init and synchronise themselves.
    let executing = Latch()
    let executions = AtomicCounter()
    let cancelHookCalls = AtomicCounter()
    private let finishesWhenTold: Bool

    init(name: String, finishesWhenTold: Bool = false) {
        self.finishesWhenTold = finishesWhenTold
        super.init(name: name)
    }

    override func execute() {
        executions.increment()
        executing.countDown()
    }

    override func procedureDidCancel(with error: (any Error)?) {
        cancelHookCalls.increment()
        // Finishes from another thread, as work that notices the cancellation would.
        if finishesWhenTold && isExecuting { procedureTestLaterQueue.async { self.finish() } }
    }
}

/// A procedure that counts its hooks. `finished` opens after its did-finish hook (which, like
/// did-finish observers, has run by the time `waitUntilFinishedBlocking()` returns: waits
/// return after the finish's tail).
final class ProcedureCountingHooks: ProcedureOperation, @unchecked Sendable {
    // No mutable state of its own: counters and recorders synchronise themselves.
    let willExecuteCalls = AtomicCounter()
    let didExecuteCalls = AtomicCounter()
    let didCancelCalls = AtomicCounter()
    let willFinishErrors = Recorder<[any Error]>()
    let didFinishErrors = Recorder<[any Error]>()
    let finished = Latch()
    private let work: @Sendable (ProcedureCountingHooks) -> Void

    init(name: String, work: @escaping @Sendable (ProcedureCountingHooks) -> Void = { $0.finish() }) {
        self.work = work
        super.init(name: name)
    }

    override func execute() { work(self) }
    override func procedureWillExecute() { willExecuteCalls.increment() }
    override func procedureDidExecute() { didExecuteCalls.increment() }
    override func procedureDidCancel(with error: (any Error)?) { didCancelCalls.increment() }
    override func procedureWillFinish(with errors: [any Error]) { willFinishErrors.record(errors) }
    override func procedureDidFinish(with errors: [any Error]) {
        didFinishErrors.record(errors)
        finished.countDown()
    }
}

/// A suspended queue, so that a test can look at procedures before anything runs.
func suspendedProcedureQueue(_ name: String, maxConcurrent: Int = 4) -> ConcurrentOperationQueue {
    let queue = try! ConcurrentOperationQueue(name: name, maxConcurrentOperationCount: maxConcurrent)
    queue.isSuspended = true
    return queue
}
