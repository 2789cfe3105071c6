import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// Instruments for the workflow stress tests.

/// A value behind a pthread mutex of its own, usable from any thread. (Not
/// `Synchronization.Mutex`: the thread sanitizer reports it on Linux with Swift 6.3, see Lock.swift.)
final class WorkflowGuarded<Value>: @unchecked Sendable {  // `value` is only touched under `mutex`
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    var current: Value { withLock { $0 } }
}

/// A random DAG, rebuilt identically from its seed: task `i` has 0–4 prerequisites chosen among
/// the tasks before it, half of them among the 16 just before (so the graph is deep), half
/// anywhere before (so it is wide).
struct WorkflowDAG: Sendable {
    let prerequisites: [[Int]]
    let dependents: [[Int]]

    init(count: Int, seed: UInt64, maxPrerequisites: Int = 4) {
        var random = SplitMix64(seed: seed)
        var prerequisites: [[Int]] = []
        var dependents = [[Int]](repeating: [], count: count)
        for index in 0..<count {
            let wanted = min(index, random.below(maxPrerequisites + 1))
            var chosen: [Int] = []
            while chosen.count < wanted {
                let candidate = random.chance(50) ? index - 1 - random.below(min(index, 16)) : random.below(index)
                if !chosen.contains(candidate) { chosen.append(candidate) }
            }
            for prerequisite in chosen { dependents[prerequisite].append(index) }
            prerequisites.append(chosen)
        }
        self.prerequisites = prerequisites
        self.dependents = dependents
    }

    /// `layers` layers of `width` tasks, each depending on every task of the layer before (the
    /// benchmark's S4 shape). Task `layer * width + column`.
    init(layers: Int, width: Int) {
        var prerequisites: [[Int]] = []
        var dependents = [[Int]](repeating: [], count: layers * width)
        for layer in 0..<layers {
            for _ in 0..<width {
                let previous = layer == 0 ? [] : Array((layer - 1) * width..<layer * width)
                for prerequisite in previous { dependents[prerequisite].append(prerequisites.count) }
                prerequisites.append(previous)
            }
        }
        self.prerequisites = prerequisites
        self.dependents = dependents
    }

    var count: Int { prerequisites.count }
    /// The tasks without dependents: the workflow has finished when they all have.
    var sinks: [Int] { (0..<count).filter { dependents[$0].isEmpty } }
    var sources: [Int] { (0..<count).filter { prerequisites[$0].isEmpty } }
}

/// The result a stress task finishes with (if it gives one): which task, and the run whose body
/// produced it.
struct WorkflowStressResult: Sendable, Hashable, CustomStringConvertible {
    let index: Int
    let run: Int

    var description: String { "result(task \(index), run \(run))" }
}

/// The error a stress task fails with.
struct WorkflowStressError: Error, Hashable, CustomStringConvertible {
    let index: Int
    let run: Int

    var description: String { "error(task \(index), run \(run))" }
}

/// What the body of one run does.
enum WorkflowBodyMode: Sendable {
    /// Finishes before `main()` returns.
    case finishInline
    /// Fails before `main()` returns.
    case failInline
    /// Finishes through its ``WorkflowTaskRun`` on another thread.
    case finishElsewhere
    /// Fails through its ``WorkflowTaskRun`` on another thread.
    case failElsewhere
    /// Parks its ``WorkflowTaskRun``: a storm thread (or the settling test) finishes or fails it later.
    case park(fails: Bool)
}

/// How the tasks of a stress workflow call back.
enum WorkflowTaskStyle: Int, CaseIterable, Sendable {
    /// A ``WorkflowTask`` subclass whose `main()` finishes inline with the task's own
    /// `finish(with:)` / `fail(with:)` (and later ones through the run).
    case subclass
    /// A ``ClosureTask``: everything through the run it is handed.
    case closure
    /// A ``MethodTask``: everything through the run it is handed.
    case method
}

/// Counts the work a workflow's task bodies have in flight, and waits for a workflow to come to
/// rest without sleeping.
///
/// A body is in flight from the first line of its `main()` until the call that finishes or fails
/// its run has returned — inline, on ``elsewhere``, or when a parked run is finished. Every run
/// operation is in its queue until its body calls in (or the run ends), and only a body in flight
/// (or a thread of the test) adds operations; so "no body in flight and every queue empty" is a
/// state that lasts. ``settle(_:)`` waits for it.
final class WorkflowRunTracker: Sendable {
    /// Bodies in flight.
    private let inFlight = Atomic<Int>(0)
    /// Bodies begun so far (to tell "nothing began between two readings").
    private let begun = Atomic<Int>(0)
    /// Where bodies finish "on another thread": a queue of the test's own, so that waiting for it
    /// is a barrier.
    let elsewhere = DispatchQueue(label: "workflow.stress.elsewhere", attributes: .concurrent)
    /// Runs parked for a later finish, and whether parking is still allowed.
    private let parking = WorkflowGuarded<(open: Bool, runs: [ParkedRun])>((true, []))

    struct ParkedRun: Sendable {
        let run: WorkflowTaskRun
        let result: (any Sendable)?
        let error: WorkflowStressError
        let fails: Bool
    }

    init() {}

    /// First line of a body.
    func begin() {
        // In this order: see `isAtRest(_:)`.
        inFlight.add(1, ordering: .sequentiallyConsistent)
        begun.add(1, ordering: .sequentiallyConsistent)
    }

    /// After the call that finishes or fails a run has returned.
    func end() {
        inFlight.subtract(1, ordering: .sequentiallyConsistent)
    }

    /// Parks `run`. Returns `false` (the caller finishes it now) once parking was closed.
    func park(_ run: ParkedRun) -> Bool {
        parking.withLock { parking in
            guard parking.open else { return false }
            parking.runs.append(run)
            return true
        }
    }

    /// Finishes (or fails) one parked run, picked by `pick`; `false` if none is parked.
    @discardableResult
    func finishParked(pick: Int) -> Bool {
        let picked = parking.withLock { parking -> ParkedRun? in
            guard !parking.runs.isEmpty else { return nil }
            return parking.runs.remove(at: pick % parking.runs.count)
        }
        guard let picked else { return false }
        complete(picked)
        return true
    }

    /// Stops parking: bodies that would park finish at once from now on. Finishes every parked run.
    func closeParking() {
        let runs = parking.withLock { parking -> [ParkedRun] in
            parking.open = false
            defer { parking.runs = [] }
            return parking.runs
        }
        for run in runs { complete(run) }
    }

    var parkedCount: Int { parking.withLock { $0.runs.count } }

    private func complete(_ parked: ParkedRun) {
        if parked.fails {
            parked.run.fail(with: parked.error)
        } else {
            parked.run.finish(with: parked.result)
        }
        end()
    }

    /// No body in flight and every queue empty, read so that the state is known to last: a body
    /// that began after the first reading has changed `begun` by the last one; one in flight at
    /// the queue reading has not finished its run yet, so its operation is still in its queue.
    private func isAtRest(_ queues: [ConcurrentOperationQueue]) -> Bool {
        let before = begun.load(ordering: .sequentiallyConsistent)
        guard inFlight.load(ordering: .sequentiallyConsistent) == 0 else { return false }
        guard queues.allSatisfy({ $0.operationCount == 0 }) else { return false }
        return begun.load(ordering: .sequentiallyConsistent) == before
    }

    /// Closes parking (finishing what is parked), then waits until no body is in flight and the
    /// queues are empty (a state that lasts, as long as the test's own threads call nothing).
    /// `false` on timeout.
    func settle(_ queues: ConcurrentOperationQueue...) -> Bool {
        settle(all: queues)
    }

    /// ``settle(_:)`` for an array of queues.
    func settle(all queues: [ConcurrentOperationQueue]) -> Bool {
        closeParking()
        let deadline = stressDeadline()
        while ContinuousClock.now < deadline {
            for queue in queues {
                guard queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout) else { return false }
            }
            guard quiesce(elsewhere) else { return false }
            if isAtRest(queues) { return true }
            // A body is between finishing its run and returning: it is about to add its
            // dependents' runs, or to return.
            yieldThread()
        }
        return false
    }
}

/// The instruments of one stress workflow: what each body does per run, and what it saw.
final class WorkflowStressProbe: Sendable {
    let seed: UInt64
    let tracker = WorkflowRunTracker()
    /// Per task: how many times `main()` ran for each run number (read from `currentRun` on entry).
    private let executions: [WorkflowGuarded<[Int: Int]>]
    /// Bodies that did not run on the workflow's queue.
    let offQueue = Atomic<Int>(0)
    /// Once set, bodies always succeed and never park.
    let succeedOnly = Atomic<Bool>(false)
    /// The queue bodies must run on.
    private let queueID: ObjectIdentifier

    init(count: Int, seed: UInt64, queue: ConcurrentOperationQueue) {
        self.seed = seed
        executions = (0..<count).map { _ in WorkflowGuarded([:]) }
        queueID = ObjectIdentifier(queue)
    }

    /// Whether task `index` finishes with a result (else with `nil`).
    static func givesResult(_ index: Int) -> Bool { index % 5 != 0 }

    /// How task `index` calls back.
    static func style(_ index: Int) -> WorkflowTaskStyle { WorkflowTaskStyle(rawValue: index % 3)! }

    /// What run `run` of task `index` does: a deterministic function of the seed, task and run.
    func mode(index: Int, run: Int) -> WorkflowBodyMode {
        var random = SplitMix64(seed: seed ^ (UInt64(index) &* 0x9E37_79B9_7F4A_7C15) ^ (UInt64(run) << 40))
        let roll = random.below(100)
        if succeedOnly.load(ordering: .acquiring) {
            return roll < 50 ? .finishInline : .finishElsewhere
        }
        switch roll {
        case ..<35: return .finishInline
        case ..<47: return .failInline
        case ..<67: return .finishElsewhere
        case ..<75: return .failElsewhere
        default: return .park(fails: roll >= 95)
        }
    }

    /// Executions of task `index` by run number.
    func executions(of index: Int) -> [Int: Int] { executions[index].current }

    /// The body of every stress task. `viaTask`: inline outcomes through the task's own
    /// `finish(with:)` / `fail(with:)` instead of the run.
    func execute(_ task: WorkflowTask, index: Int, run: WorkflowTaskRun, viaTask: Bool) {
        tracker.begin()
        if ConcurrentOperationQueue.current.map(ObjectIdentifier.init) != queueID {
            offQueue.add(1, ordering: .relaxed)
        }
        executions[index].withLock { $0[run.number, default: 0] += 1 }
        let result: (any Sendable)? = Self.givesResult(index) ? WorkflowStressResult(index: index, run: run.number) : nil
        let error = WorkflowStressError(index: index, run: run.number)
        let tracker = self.tracker
        switch mode(index: index, run: run.number) {
        case .finishInline:
            if viaTask { task.finish(with: result) } else { run.finish(with: result) }
            tracker.end()
        case .failInline:
            if viaTask { task.fail(with: error) } else { run.fail(with: error) }
            tracker.end()
        case .finishElsewhere:
            tracker.elsewhere.async {
                run.finish(with: result)
                tracker.end()
            }
        case .failElsewhere:
            tracker.elsewhere.async {
                run.fail(with: error)
                tracker.end()
            }
        case .park(let fails):
            if !tracker.park(.init(run: run, result: result, error: error, fails: fails)) {
                if fails { run.fail(with: error) } else { run.finish(with: result) }
                tracker.end()
            }
        }
    }

    /// Builds the tasks of `dag` (styles by index), adds them to `workflow`.
    func makeTasks(_ dag: WorkflowDAG, in workflow: Workflow) throws -> [WorkflowTask] {
        var tasks: [WorkflowTask] = []
        for index in 0..<dag.count {
            let task: WorkflowTask
            switch Self.style(index) {
            case .subclass:
                task = WorkflowStressTask(name: "t\(index)", index: index, probe: self)
            case .closure:
                task = ClosureTask(name: "t\(index)") { [self] run in
                    execute(run.task, index: index, run: run, viaTask: false)
                }
            case .method:
                task = MethodTask(name: "t\(index)", target: WorkflowStressWorker(index: index, probe: self)) { worker in
                    worker.work
                }
            }
            try workflow.add(task, prerequisites: dag.prerequisites[index].map { tasks[$0] })
            tasks.append(task)
        }
        return tasks
    }
}

/// A task subclass: `main()` reads its run, then calls back inline through the task itself.
final class WorkflowStressTask: WorkflowTask, @unchecked Sendable {  // immutable after init
    let index: Int
    let probe: WorkflowStressProbe

    init(name: String, index: Int, probe: WorkflowStressProbe) {
        self.index = index
        self.probe = probe
        super.init(name: name)
    }

    override func main() {
        probe.execute(self, index: index, run: currentRun, viaTask: true)
    }
}

/// The target of a ``MethodTask``.
final class WorkflowStressWorker: Sendable {
    let index: Int
    let probe: WorkflowStressProbe

    init(index: Int, probe: WorkflowStressProbe) {
        self.index = index
        self.probe = probe
    }

    func work(_ run: WorkflowTaskRun) {
        probe.execute(run.task, index: index, run: run, viaTask: false)
    }
}

/// Counts what a workflow tells its delegate; ``finished`` opens at the first finish.
final class WorkflowCountingDelegate: WorkflowDelegate, WorkflowTaskDelegate, Sendable {
    let finishes = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let cancellations = Atomic<Int>(0)
    let taskFinishes = Atomic<Int>(0)
    let finished = Latch()

    init() {}

    func workflowDidFinish(_ workflow: Workflow) {
        finishes.add(1, ordering: .relaxed)
        finished.countDown()
    }

    func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error) {
        failures.add(1, ordering: .relaxed)
    }

    func workflow(_ workflow: Workflow, taskDidCancel task: WorkflowTask) {
        cancellations.add(1, ordering: .relaxed)
    }

    func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?) {
        taskFinishes.add(1, ordering: .relaxed)
    }

    var finishCount: Int { finishes.load(ordering: .relaxed) }
}

/// The states and outcomes of a workflow's tasks at rest, checked against its graph.
struct WorkflowRestCheck {
    let states: [WorkflowTaskState]
    let runs: [Int]
    let results: [(any Sendable)?]
    let errors: [(any Error)?]

    init(_ tasks: [WorkflowTask]) {
        states = tasks.map(\.state)
        runs = tasks.map { $0.currentRun.number }
        results = tasks.map(\.result)
        errors = tasks.map(\.error)
    }

    /// Every task's state against its prerequisites': ready, executing, finished and failed need
    /// every prerequisite finished; pending needs one that is not; nothing executes at rest.
    func stateProblem(_ index: Int, _ dag: WorkflowDAG) -> String? {
        let prerequisites = dag.prerequisites[index]
        let unfinished = prerequisites.filter { states[$0] != .finished }
        switch states[index] {
        case .executing:
            return "executing while no body is in flight (run \(runs[index]))"
        case .ready, .finished, .failed:
            if !unfinished.isEmpty {
                return "\(states[index]) with unfinished prerequisites \(unfinished.map { "t\($0): \(states[$0])" })"
            }
        case .pending:
            if unfinished.isEmpty { return "pending though every prerequisite (\(prerequisites)) finished" }
        case .cancelled:
            break
        }
        return nil
    }

    /// A finished task has its body's result, a failed one its body's error, any other neither.
    func outcomeProblem(_ index: Int) -> String? {
        let expected = WorkflowStressResult(index: index, run: runs[index])
        let result = results[index]
        let error = errors[index]
        switch states[index] {
        case .finished:
            if let error { return "finished with an error \(error)" }
            if WorkflowStressProbe.givesResult(index) {
                guard let result = result as? WorkflowStressResult, result == expected else {
                    return "finished run \(runs[index]) with result \(String(describing: result)), expected \(expected)"
                }
            } else if let result {
                return "finished with result \(result), expected none"
            }
        case .failed:
            if let result { return "failed with a result \(result)" }
            guard let error = error as? WorkflowStressError, error == WorkflowStressError(index: index, run: runs[index]) else {
                return "failed run \(runs[index]) with error \(String(describing: error))"
            }
        case .pending, .ready, .executing, .cancelled:
            if result != nil || error != nil {
                return "\(states[index]) with result \(String(describing: result)), error \(String(describing: error))"
            }
        }
        return nil
    }

    /// No run executed twice; a finished or failed run executed once; no execution is numbered
    /// after the current run.
    func executionProblem(_ index: Int, _ executions: [Int: Int]) -> String? {
        if let twice = executions.filter({ $0.value > 1 }).keys.sorted().first {
            return "run \(twice) executed \(executions[twice]!) times (current run \(runs[index]), \(states[index]))"
        }
        if let beyond = executions.keys.first(where: { $0 > runs[index] || $0 < 1 }) {
            return "an execution of run \(beyond), current run \(runs[index])"
        }
        if states[index] == .finished || states[index] == .failed, executions[runs[index]] != 1 {
            return "\(states[index]) run \(runs[index]), whose body executed \(executions[runs[index]] ?? 0) times"
        }
        return nil
    }

    /// What `hasUnfinishedTasks`, `hasFailedTasks` and `isFinished` must say.
    func expectCounters(of workflow: Workflow, _ dag: WorkflowDAG, sourceLocation: SourceLocation = #_sourceLocation) {
        let unfinished = states.contains { $0 != .finished }
        let failed = states.contains(.failed)
        let finished = dag.sinks.allSatisfy { states[$0] == .finished }
        #expect(workflow.hasUnfinishedTasks == unfinished, "hasUnfinishedTasks, states \(histogram)",
                sourceLocation: sourceLocation)
        #expect(workflow.hasFailedTasks == failed, "hasFailedTasks, states \(histogram)", sourceLocation: sourceLocation)
        #expect(workflow.isFinished == finished, "isFinished, sinks \(dag.sinks.map { states[$0] })",
                sourceLocation: sourceLocation)
    }

    /// How many tasks are in each state, for messages.
    var histogram: [String: Int] {
        Dictionary(states.map { ($0.description, 1) }, uniquingKeysWith: +)
    }
}
