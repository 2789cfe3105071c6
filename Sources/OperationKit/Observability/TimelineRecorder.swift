// TimelineRecorder: a built-in instrument that records a run — operations, workflow tasks, state
// machine transitions — for a Chrome trace / Perfetto timeline (written in +ChromeTrace).

/// An ``OperationInstrument`` that records what happens — each operation from added to
/// finished, each run of a workflow task, each state machine transition — and writes it as a
/// timeline in the Chrome trace event format, which [Perfetto](https://ui.perfetto.dev) and
/// `chrome://tracing` open.
///
/// ```swift
/// let recorder = TimelineRecorder()
/// queue.instrument = recorder
/// // … run work on the queue …
/// try recorder.write(toFile: "trace.json")
/// ```
///
/// The timeline has a slice per operation, from its start to its finish, in lanes named after
/// its queue (`images #1`, `images #2`, …: as many as operations of the queue overlapped), with
/// its queue, outcome, errors and wait (from added to started) as arguments; an arrow from each
/// dependency's slice to its dependent's (and from a procedure to what it produced); marks for
/// cancels and retries; a slice per workflow task run; and a mark per state machine transition.
///
/// Memory is bounded: after ``maxEvents`` events the recorder drops the rest and counts them
/// (``droppedEventCount``). It keeps no reference to operations, tasks or queues: names are
/// copied when first seen. Safe to use from any thread; each event takes the recorder's lock
/// briefly.
public final class TimelineRecorder: OperationInstrument, @unchecked Sendable {  // `recorded` is protected by `lock`
    /// The most events recorded; later ones are dropped (and counted).
    public let maxEvents: Int

    /// Our own ``Lock`` rather than `Synchronization.Mutex`, which the thread sanitizer does
    /// not understand (see "Not `Synchronization.Mutex`" in Documentation/Architecture.md).
    private let lock = Lock()
    private var recorded = State()

    /// Runs `body` on the recorded state, with the lock held (nothing else is called under it).
    func withState<Result>(_ body: (inout State) -> Result) -> Result {
        lock.withLock { body(&recorded) }
    }

    /// Creates a recorder.
    ///
    /// - Parameter maxEvents: The most events it records (at least 1); by default 1,000,000,
    ///   some 100 MB at most.
    public init(maxEvents: Int = 1_000_000) {
        self.maxEvents = max(1, maxEvents)
    }

    /// How many events were recorded.
    public var recordedEventCount: Int { withState { $0.eventCount } }
    /// How many events were dropped once ``maxEvents`` was reached.
    public var droppedEventCount: Int { withState { $0.dropped } }

    // MARK: What is kept

    /// One operation: what the timeline shows of it.
    struct OperationRecord {
        var name: String
        var type: String
        /// Index in `State.queues`, or -1 (started by hand).
        var queue: Int
        var added: ContinuousClock.Instant?
        var ready: ContinuousClock.Instant?
        var started: ContinuousClock.Instant?
        var finished: ContinuousClock.Instant?
        var outcome: String?
        var errors: [String] = []
        var conditions: String?
        var exclusivityWaiting: ContinuousClock.Instant?
        var exclusivityGranted: ContinuousClock.Instant?
        /// Indices of the operations it waited for, and of the procedure that produced it.
        var dependencies: [Int] = []
        var producer: Int?
        var marks: [Mark] = []
    }

    /// An instant event on an operation's or a task's lane.
    struct Mark {
        var time: ContinuousClock.Instant
        var name: String
        var args: [(String, String)]
    }

    /// One run of a workflow task (or a change of a task that did not run: a mark).
    struct TaskRecord {
        var name: String
        var workflow: Int
        var started: ContinuousClock.Instant
        var ended: ContinuousClock.Instant?
        var outcome: String?
        var error: String?
    }

    struct MachineMark {
        var machine: Int
        var time: ContinuousClock.Instant
        var from: String
        var to: String
    }

    struct State {
        var eventCount = 0
        var dropped = 0
        var operations: [OperationRecord] = []
        /// The latest record of each identity: the operation's while it has not finished (an
        /// identity is reused only once its operation was released, after it finished); a
        /// finished one's, for the dependencies and producers of operations that come later.
        var latest: [ObjectIdentifier: Int] = [:]
        var queues: [String] = []
        var queueIndex: [ObjectIdentifier: Int] = [:]
        var workflows: [String] = []
        var tasks: [TaskRecord] = []
        /// The running task runs by task identity.
        var runningTasks: [ObjectIdentifier: Int] = [:]
        var taskMarks: [(workflow: Int, mark: Mark)] = []
        var machines: [String] = []
        var machineMarks: [MachineMark] = []

        /// Counts an event; `false` once the budget is spent (the event is dropped).
        mutating func admit(_ maxEvents: Int) -> Bool {
            if eventCount >= maxEvents {
                dropped += 1
                return false
            }
            eventCount += 1
            return true
        }

        /// The record of an operation that has not finished, if it has one.
        func live(_ id: ObjectIdentifier) -> Int? {
            guard let index = latest[id], operations[index].finished == nil else { return nil }
            return index
        }

        mutating func index(ofQueue id: ObjectIdentifier, name: @autoclosure () -> String) -> Int {
            if let index = queueIndex[id] { return index }
            queues.append(name())
            queueIndex[id] = queues.count - 1
            return queues.count - 1
        }
    }

    // MARK: Recording

    /// Records an operation's event.
    public func record(_ event: OperationEvent) {
        let operation = event.operation
        let id = ObjectIdentifier(operation)
        let known = withState { $0.live(id) != nil }
        // Read outside the lock: names take the operation's and the queue's locks.
        let name = known ? "" : operation.displayName
        let type = known ? "" : "\(Swift.type(of: operation))"
        let queueName = known ? "" : event.queue?.displayName ?? ""
        var dependencies: [ObjectIdentifier] = []
        if case .added = event.kind { dependencies = operation.dependencies.map(ObjectIdentifier.init) }
        var finishedErrors: [String] = []
        if case .finished(let outcome) = event.kind { finishedErrors = outcome.errors.map { String(describing: $0) } }
        var producedID: ObjectIdentifier?
        if case .produced(let produced) = event.kind { producedID = ObjectIdentifier(produced) }
        let maxEvents = maxEvents
        withState { state in
            guard state.admit(maxEvents) else { return }
            let index: Int
            if let existing = state.live(id) {
                index = existing
            } else {
                let queue = event.queue.map { state.index(ofQueue: ObjectIdentifier($0), name: queueName) } ?? -1
                state.operations.append(OperationRecord(name: name, type: type, queue: queue))
                index = state.operations.count - 1
                state.latest[id] = index
            }
            let time = event.time
            switch event.kind {
            case .added:
                state.operations[index].added = time
                let latest = state.latest
                state.operations[index].dependencies = dependencies.compactMap { latest[$0] }
            case .ready:
                state.operations[index].ready = time
            case .started:
                state.operations[index].started = time
            case .cancelled:
                state.operations[index].marks.append(Mark(time: time, name: "cancelled", args: []))
            case .finished(let outcome):
                state.operations[index].finished = time
                state.operations[index].outcome = outcome.description
                state.operations[index].errors = finishedErrors
            case .conditionsEvaluated(let results):
                state.operations[index].conditions = results.map { "\($0.name): \(Self.describe($0.result))" }
                    .joined(separator: ", ")
            case .exclusivityWaiting:
                state.operations[index].exclusivityWaiting = time
            case .exclusivityGranted:
                state.operations[index].exclusivityGranted = time
            case .retrying(let attempt, let delay):
                state.operations[index].marks.append(Mark(
                    time: time, name: "retrying", args: [("attempt", "\(attempt)"), ("delay", "\(delay)")]))
            case .produced:
                // The produced operation was added just before (and may have finished since): its
                // latest record is its own (the event holds it, so its identity is not reused).
                guard let producedID, let produced = state.latest[producedID] else { return }
                state.operations[produced].producer = index
            }
        }
    }

    /// Records a workflow task's transition: a run is a slice from executing to the state after.
    public func record(_ event: WorkflowTaskEvent) {
        let id = ObjectIdentifier(event.task)
        let name = event.task.name
        let error = event.error.map { String(describing: $0) }
        let maxEvents = maxEvents
        withState { state in
            guard state.admit(maxEvents) else { return }
            let workflow: Int
            if let index = state.workflows.firstIndex(of: event.workflowName) {
                workflow = index
            } else {
                state.workflows.append(event.workflowName)
                workflow = state.workflows.count - 1
            }
            if event.to == .executing {
                state.tasks.append(TaskRecord(name: name, workflow: workflow, started: event.time))
                state.runningTasks[id] = state.tasks.count - 1
            } else if event.from == .executing, let run = state.runningTasks.removeValue(forKey: id) {
                state.tasks[run].ended = event.time
                state.tasks[run].outcome = "\(event.to)"
                state.tasks[run].error = error
            } else if event.to == .cancelled || event.to == .failed {
                state.taskMarks.append((workflow, Mark(time: event.time, name: "\(name) \(event.to)", args: [])))
            }
        }
    }

    /// Records a state machine's transition as a mark on the machine's lane.
    public func record(_ event: StateMachineEvent) {
        let maxEvents = maxEvents
        withState { state in
            guard state.admit(maxEvents) else { return }
            let machine: Int
            if let index = state.machines.firstIndex(of: event.machineName) {
                machine = index
            } else {
                state.machines.append(event.machineName)
                machine = state.machines.count - 1
            }
            state.machineMarks.append(MachineMark(machine: machine, time: event.time, from: event.from, to: event.to))
        }
    }

    static func describe(_ result: ConditionResult) -> String {
        switch result {
        case .satisfied: "satisfied"
        case .failed(let error): "failed (\(error))"
        case .ignored: "ignored"
        }
    }
}
