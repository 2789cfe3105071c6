// Where the library tells instruments: the `instrument` of a queue, the slot an operation's
// events go to, and the order of a cancel's event before the finish's.

#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension ConcurrentOperationQueue {
    /// The instrument told about this queue's operations — their lifecycle from
    /// ``OperationEvent/Kind-swift.enum/added`` to ``OperationEvent/Kind-swift.enum/finished(_:)``
    /// — or `nil`. Starts as ``OperationInstrumentation/default``; set it at any time, from any
    /// thread (operations in flight then tell the new one from their next event on).
    ///
    /// With none installed an event costs one atomic load. A ``GroupOperation``'s children (and
    /// a ``RetryOperation``'s attempts) run on a queue of the group's own, which takes the
    /// instrument of the queue the group is added to, when it is added (or the default one, when
    /// the group is started by hand), not the default one when the group is made.
    public var instrument: (any OperationInstrument)? {
        get { instrumentSlot.instrument }
        set { instrumentSlot.instrument = newValue }
    }

    /// Tells `instrument` that these operations were added (accepted): on the adding thread,
    /// before they are linked, so before any other event of theirs (a cancel aside).
    @inline(never)
    func tellAdded<Operations: Sequence<ConcurrentOperation>>(_ operations: Operations, to instrument: any OperationInstrument) {
        for operation in operations {
            operation.adoptInstrument(instrument)
            instrument.record(OperationEvent(.added, operation: operation, queue: self))
        }
    }
}

extension ConcurrentOperation {
    /// The slot of the instrument told about an operation in `queue`, or in none (started by
    /// hand: ``OperationInstrumentation/default``).
    @inline(__always)
    static func instrumentSlot(of queue: ConcurrentOperationQueue?) -> InstrumentSlot {
        queue?.instrumentSlot ?? OperationInstrumentation.defaultSlot
    }

    /// Tells `instrument` an event of this operation.
    @inline(__always)
    final func tell(_ kind: OperationEvent.Kind, queue: ConcurrentOperationQueue?, to instrument: any OperationInstrument) {
        instrument.record(OperationEvent(kind, operation: self, queue: queue))
    }

    /// Runs the operation's `execute()` (``performExecute()``) on this thread, telling
    /// ``OperationEvent/Kind-swift.enum/started`` first and wrapping it in the instrument's
    /// ``OperationInstrument/run(_:_:)``, if one is installed.
    @inline(__always)
    final func performExecute(telling instrument: (any OperationInstrument)?, queue: ConcurrentOperationQueue?) {
        if let instrument {
            performInstrumentedExecute(instrument, queue: queue)
        } else {
            performExecute()
        }
    }

    @inline(never)
    private func performInstrumentedExecute(_ instrument: any OperationInstrument, queue: ConcurrentOperationQueue?) {
        tell(.started, queue: queue, to: instrument)
        readiness.bitwiseOr(Readiness.startedTold, ordering: .releasing)
        instrument.run(self) { performExecute() }
    }

    /// Before the start step, when an instrument is installed: the thread that starts the
    /// operation will tell `started` (a cancel or finish seen executing then waits for it).
    @inline(__always)
    final func willTellStarted(_ instrument: (any OperationInstrument)?) {
        if instrument != nil { readiness.bitwiseOr(Readiness.startTelling, ordering: .relaxed) }
    }

    /// After a cancel or finish step that found the operation executing: if the thread that
    /// started it is telling `started` now, waits until it has (that thread is between the start
    /// step and the end of its instrument's `record`), so that `started` comes first. Not on
    /// that thread itself (an instrument that cancels or finishes the operation it is told of).
    final func awaitStartedTold() {
        let value = readiness.load(ordering: .acquiring)
        guard value & Readiness.startTelling != 0, value & Readiness.startedTold == 0, !WorkerOperation.holds(self) else {
            return
        }
        while readiness.load(ordering: .acquiring) & Readiness.startedTold == 0 { sched_yield() }
    }

    /// After a cancel step that set the cancelled flag, with no lock held: tells
    /// ``OperationEvent/Kind-swift.enum/cancelled`` once, after `started` if the operation was
    /// executing (see ``tellFinished(_:queue:to:)`` for the order with `finished`).
    @inline(__always)
    final func tellCancelled(queue: ConcurrentOperationQueue?, wasExecuting: Bool) {
        if let instrument = Self.instrumentSlot(of: queue).current {
            if wasExecuting { awaitStartedTold() }
            tellCancelledOnce(instrument, queue: queue)
        }
    }

    @inline(never)
    private func tellCancelledOnce(_ instrument: any OperationInstrument, queue: ConcurrentOperationQueue?) {
        let previous = lifeFlags.bitwiseOr(LifeFlags.cancelTellClaimed, ordering: .acquiringAndReleasing).oldValue
        // The finish told it (it came first, and found nobody telling it).
        guard previous & LifeFlags.cancelTellClaimed == 0 else { return }
        tell(.cancelled, queue: queue, to: instrument)
        lifeFlags.bitwiseOr(LifeFlags.cancelTold, ordering: .releasing)
    }

    /// Tells ``OperationEvent/Kind-swift.enum/finished(_:)``, the operation's last event: a
    /// cancel that has not been told yet is told first, by this thread; one that another thread
    /// is telling now is waited for (the wait lasts that thread's call of the instrument).
    @inline(never)
    final func tellFinished(_ outcome: OperationOutcome, queue: ConcurrentOperationQueue?, to instrument: any OperationInstrument) {
        // Executed (not finished in the start step): after `started`.
        if lifeFlags.load(ordering: .relaxed) & LifeFlags.skippedExecution == 0 { awaitStartedTold() }
        if case .cancelled = outcome {
            let previous = lifeFlags.bitwiseOr(LifeFlags.cancelTellClaimed, ordering: .acquiringAndReleasing).oldValue
            if previous & LifeFlags.cancelTellClaimed == 0 {
                tell(.cancelled, queue: queue, to: instrument)
            } else {
                while lifeFlags.load(ordering: .acquiring) & LifeFlags.cancelTold == 0 { sched_yield() }
            }
        }
        tell(.finished(outcome), queue: queue, to: instrument)
    }
}

extension ConcurrentOperationQueue {
    /// The queue of a group's children (or of a retry's attempts) takes `instrument`, that of the
    /// queue its owner was added to.
    ///
    /// If `tellHeld`, the operations it already holds (a group's first children, which cannot run
    /// before the group does) are told to `instrument` as added now, before any other event of
    /// theirs: meanwhile the queue's slot holds an ``AdoptionBuffer`` that keeps their events
    /// (a cancel racing with the add) until the replay is done. (Such a queue starts with no
    /// instrument, not the default one: see `owningProcedure`.) A cancelled group passes
    /// `tellHeld: false`: its children may be finishing already (it lets its cancelled children
    /// finish), so they tell the instrument from their next event on, without `added`.
    func adoptInstrument(_ instrument: any OperationInstrument, tellHeld: Bool) {
        let previous = instrumentSlot.current
        if let previous, ObjectIdentifier(previous) == ObjectIdentifier(instrument) { return }
        guard tellHeld else {
            instrumentSlot.instrument = instrument
            return
        }
        let buffer = AdoptionBuffer(instrument)
        instrumentSlot.instrument = buffer
        tellAdded(operations, to: instrument)
        buffer.release()
        instrumentSlot.instrument = instrument
    }
}

/// Stands in a queue's slot while the queue adopts an instrument and tells it the operations it
/// holds (see `ConcurrentOperationQueue.adoptInstrument(_:tellHeld:)`): keeps the events told
/// meanwhile, delivers them in order once released, then passes events straight through.
final class AdoptionBuffer: OperationInstrument, @unchecked Sendable {  // `released`, `events`: under `lock`
    enum Held {
        case operation(OperationEvent)
        case task(WorkflowTaskEvent)
        case machine(StateMachineEvent)
    }

    let target: any OperationInstrument
    private let lock = Lock()
    private var released = false
    private var events: [Held] = []

    init(_ target: any OperationInstrument) { self.target = target }

    func record(_ event: OperationEvent) { if !hold(.operation(event)) { target.record(event) } }
    func record(_ event: WorkflowTaskEvent) { if !hold(.task(event)) { target.record(event) } }
    func record(_ event: StateMachineEvent) { if !hold(.machine(event)) { target.record(event) } }
    func run(_ operation: ConcurrentOperation, _ body: () -> Void) { target.run(operation, body) }

    /// Keeps `event` unless released; returns whether it was kept.
    private func hold(_ event: Held) -> Bool {
        lock.withLock {
            if released { return false }
            events.append(event)
            return true
        }
    }

    /// Delivers the kept events in order (also those that come meanwhile), then lets later ones
    /// through: `released` is set only once nothing kept is left undelivered.
    func release() {
        while true {
            let batch = lock.withLock { () -> [Held] in
                if events.isEmpty {
                    released = true
                    return []
                }
                defer { events = [] }
                return events
            }
            if batch.isEmpty { return }
            for event in batch {
                switch event {
                case .operation(let event): target.record(event)
                case .task(let event): target.record(event)
                case .machine(let event): target.record(event)
                }
            }
        }
    }
}

extension Workflow {
    /// The instrument told about every transition of this workflow's tasks
    /// (``WorkflowTaskEvent``), or `nil`. Starts as ``OperationInstrumentation/default``; set it
    /// at any time, from any thread. The runs of the tasks are operations of the workflow's
    /// ``queue``, told to that queue's own ``ConcurrentOperationQueue/instrument``.
    public var instrument: (any OperationInstrument)? {
        get { instrumentSlot.instrument }
        set { instrumentSlot.instrument = newValue }
    }
}

extension StateMachine {
    /// The instrument told about every transition of this machine (``StateMachineEvent``, on the
    /// thread that runs it, after the state changed), or `nil`. Starts as
    /// ``OperationInstrumentation/default``; set it at any time, from any thread.
    public var instrument: (any OperationInstrument)? {
        get { instrumentSlot.instrument }
        set { instrumentSlot.instrument = newValue }
    }
}
