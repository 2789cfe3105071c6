// The instrumentation protocol: OperationInstrument, the events it receives (operations,
// workflow tasks, state machines) and where an instrument is installed.

import Synchronization

/// Receives the lifecycle events of operations, workflow tasks and state machines, each with a
/// monotonic timestamp: the one seam through which loggers, metrics, tracers and timelines watch
/// OperationKit. The library depends on nothing; adapters for swift-log, swift-metrics and
/// swift-distributed-tracing live in the repository's `Integrations/` package.
///
/// An instrument is installed per queue (``ConcurrentOperationQueue/instrument``), per workflow
/// (``Workflow/instrument``) and per state machine (``StateMachine/instrument``), each of which
/// starts with
/// ``OperationInstrumentation/default`` (`nil` unless set). With none installed, an event costs
/// one atomic load. Events are recorded on the thread where they happen, with no OperationKit
/// lock held; events of different operations may arrive at the same time from different threads,
/// and the events of one operation arrive in its lifecycle order.
///
/// Every method has a default implementation that does nothing (or, for
/// ``run(_:_:)``, runs the body), so an instrument implements only what it needs.
public protocol OperationInstrument: AnyObject, Sendable {
    /// An operation's event (plain operations and procedures, in a queue or started by hand).
    func record(_ event: OperationEvent)
    /// A workflow task's transition.
    func record(_ event: WorkflowTaskEvent)
    /// A state machine's transition.
    func record(_ event: StateMachineEvent)
    /// Runs `body` — the operation's `execute()` — on the thread that runs it. An instrument
    /// that carries a context (a trace's span, a task-local value) across the queue hop wraps
    /// the body in it; an asynchronous operation's `Task` is created inside `body`, so it
    /// inherits task-local values bound here. The default runs `body` as it is.
    ///
    /// - Parameters:
    ///   - operation: The operation about to execute.
    ///   - body: Executes it; call it exactly once, before returning.
    func run(_ operation: ConcurrentOperation, _ body: () -> Void)
}

extension OperationInstrument {
    /// Does nothing.
    public func record(_ event: OperationEvent) {}
    /// Does nothing.
    public func record(_ event: WorkflowTaskEvent) {}
    /// Does nothing.
    public func record(_ event: StateMachineEvent) {}
    /// Runs `body`.
    public func run(_ operation: ConcurrentOperation, _ body: () -> Void) { body() }
}

/// How an operation ended, as told to instruments.
public enum OperationOutcome: Sendable, CustomStringConvertible {
    /// It finished without errors and was not cancelled.
    case succeeded
    /// It finished with these errors (not cancelled).
    case failed([any Error])
    /// It was cancelled; the errors it finished with, if any (a failed condition's, a
    /// timeout's).
    case cancelled([any Error])

    /// `succeeded`, `failed` or `cancelled`.
    public var description: String {
        switch self {
        case .succeeded: "succeeded"
        case .failed: "failed"
        case .cancelled: "cancelled"
        }
    }

    /// The errors the operation finished with.
    public var errors: [any Error] {
        switch self {
        case .succeeded: []
        case .failed(let errors), .cancelled(let errors): errors
        }
    }
}

/// One lifecycle event of a ``ConcurrentOperation`` (or a ``ProcedureOperation``), told to an
/// ``OperationInstrument``.
public struct OperationEvent: Sendable {
    /// What happened.
    public enum Kind: Sendable {
        /// Added to ``OperationEvent/queue`` (accepted: refused adds are not told).
        case added
        /// A worker of its queue took it: its dependencies have finished (or it was cancelled)
        /// and a concurrency slot was free. A procedure evaluates its conditions after this. Not
        /// told for an operation started by hand.
        case ready
        /// `execute()` is about to run.
        case started
        /// It was cancelled (told once, whatever its state).
        case cancelled
        /// It finished, with this outcome. The last event of the operation.
        case finished(OperationOutcome)
        /// A procedure's conditions were decided: each condition's name and result, in the
        /// order they were added (conditions never called — after a failure — are left out).
        case conditionsEvaluated([(name: String, result: ConditionResult)])
        /// A procedure waits for these mutually exclusive categories.
        case exclusivityWaiting(Set<String>)
        /// A procedure was granted these mutually exclusive categories.
        case exclusivityGranted(Set<String>)
        /// A ``RetryOperation`` starts attempt `attempt` (from 2) after waiting `delay`.
        case retrying(attempt: Int, delay: Duration)
        /// A procedure produced this operation (added it to the procedure's queue).
        case produced(ConcurrentOperation)
    }

    /// What happened.
    public let kind: Kind
    /// The operation.
    public let operation: ConcurrentOperation
    /// The queue that holds it, or `nil` for an operation started by hand.
    public let queue: ConcurrentOperationQueue?
    /// When it happened (monotonic).
    public let time: ContinuousClock.Instant

    /// Creates an event (for tests of instruments; OperationKit creates the events it tells).
    public init(_ kind: Kind, operation: ConcurrentOperation, queue: ConcurrentOperationQueue?, time: ContinuousClock.Instant = .now) {
        self.kind = kind
        self.operation = operation
        self.queue = queue
        self.time = time
    }
}

/// A ``WorkflowTask``'s transition, told to an ``OperationInstrument``.
public struct WorkflowTaskEvent: Sendable {
    /// The task.
    public let task: WorkflowTask
    /// Its workflow's name.
    public let workflowName: String
    /// The state it left.
    public let from: WorkflowTaskState
    /// The state it entered.
    public let to: WorkflowTaskState
    /// The error it failed with, when `to` is ``WorkflowTaskState/failed``.
    public let error: (any Error)?
    /// When it happened (monotonic).
    public let time: ContinuousClock.Instant

    /// Creates an event (for tests of instruments).
    public init(
        task: WorkflowTask, workflowName: String, from: WorkflowTaskState, to: WorkflowTaskState,
        error: (any Error)? = nil, time: ContinuousClock.Instant = .now
    ) {
        self.task = task
        self.workflowName = workflowName
        self.from = from
        self.to = to
        self.error = error
        self.time = time
    }
}

/// A ``StateMachine``'s transition, told to an ``OperationInstrument``, with the states as text
/// (the machine is generic over its state type).
public struct StateMachineEvent: Sendable {
    /// The machine's name.
    public let machineName: String
    /// The state it left (its `description`).
    public let from: String
    /// The state it entered.
    public let to: String
    /// When it happened (monotonic).
    public let time: ContinuousClock.Instant

    /// Creates an event (for tests of instruments).
    public init(machineName: String, from: String, to: String, time: ContinuousClock.Instant = .now) {
        self.machineName = machineName
        self.from = from
        self.to = to
        self.time = time
    }
}

/// Where instruments are installed by default.
public enum OperationInstrumentation {
    /// The instrument that queues, workflows and state machines created from now on start with;
    /// `nil` by default. Set it once, early, as with swift-log's `LoggingSystem.bootstrap`; each
    /// object's own `instrument` can still be set (or cleared) afterwards. To install several,
    /// use ``MultiplexInstrument``.
    public static var `default`: (any OperationInstrument)? {
        get { defaultSlot.instrument }
        set { defaultSlot.instrument = newValue }
    }

    static let defaultSlot = InstrumentSlot(nil)
}

/// Tells every instrument it holds, in order.
public final class MultiplexInstrument: OperationInstrument {
    /// The instruments told, in order.
    public let instruments: [any OperationInstrument]

    /// Creates an instrument that tells each of `instruments`, in order.
    public init(_ instruments: [any OperationInstrument]) { self.instruments = instruments }

    public func record(_ event: OperationEvent) { for instrument in instruments { instrument.record(event) } }
    public func record(_ event: WorkflowTaskEvent) { for instrument in instruments { instrument.record(event) } }
    public func record(_ event: StateMachineEvent) { for instrument in instruments { instrument.record(event) } }

    /// Runs `body` wrapped by every instrument, the first outermost.
    public func run(_ operation: ConcurrentOperation, _ body: () -> Void) {
        func wrap(_ index: Int) {
            if index == instruments.count { body() } else { instruments[index].run(operation) { wrap(index + 1) } }
        }
        wrap(0)
    }
}

/// An instrument slot read with one atomic load: an unretained pointer to a box that lives as long
/// as the slot (every box ever set is kept in `boxes`, so a reader never sees a freed box; an
/// instrument is set a handful of times in an object's life).
@usableFromInline
final class InstrumentSlot: @unchecked Sendable {  // `boxes` is protected by `lock`
    @usableFromInline
    final class Box: Sendable {
        @usableFromInline let instrument: any OperationInstrument
        init(_ instrument: any OperationInstrument) { self.instrument = instrument }
    }

    @usableFromInline let bits = Atomic<UInt>(0)
    /// A striped ``Lock`` (no allocation per slot; the thread sanitizer does not
    /// understand `Synchronization.Mutex`, see Documentation/Architecture.md): held only to append.
    private var lock: Lock { Lock.striped(for: self) }
    private var boxes: [Box] = []

    init(_ instrument: (any OperationInstrument)?) {
        self.instrument = instrument
    }

    /// The installed instrument, or `nil`: one acquiring load when none is installed.
    /// (Inlinable: the generic ``StateMachine`` reads it from code specialised in its clients.)
    @inlinable @inline(__always)
    var current: (any OperationInstrument)? {
        let raw = bits.load(ordering: .acquiring)
        if raw == 0 { return nil }
        return Unmanaged<Box>.fromOpaque(UnsafeRawPointer(bitPattern: raw).unsafelyUnwrapped).takeUnretainedValue().instrument
    }

    var instrument: (any OperationInstrument)? {
        get { current }
        set {
            guard let newValue else {
                bits.store(0, ordering: .releasing)
                return
            }
            let box = Box(newValue)
            lock.withLock { boxes.append(box) }
            bits.store(UInt(bitPattern: Unmanaged.passUnretained(box).toOpaque()), ordering: .releasing)
        }
    }
}
