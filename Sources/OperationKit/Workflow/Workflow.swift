import Dispatch

/// A re-runnable graph of ``WorkflowTask``s with prerequisites — Task.framework's `TSKWorkflow`.
///
/// ```swift
/// let workflow = Workflow(name: "sign in")
/// try workflow.add(fetchToken)
/// try workflow.add(fetchProfile, prerequisites: [fetchToken])
/// try workflow.add(fetchSettings, prerequisites: [fetchToken])
/// workflow.start()
/// ```
///
/// Tasks run as soon as their prerequisites have finished successfully, independent ones
/// concurrently, each run as an operation on ``queue``. A failed task stops its dependents (they
/// stay pending); a cancelled one cancels them. The workflow has finished when every task without
/// dependents has finished. It can be cancelled, retried, reset and started again.
public final class Workflow: @unchecked Sendable {  // mutable state is protected by `WorkflowLock.lock`
    /// A name for logs, errors and diagrams.
    public let name: String
    /// The queue the tasks' runs execute on.
    public let queue: ConcurrentOperationQueue

    // protected by WorkflowLock.lock
    var tasks: [WorkflowTask] = []
    var finishedCount = 0
    var failedCount = 0
    var sinkCount = 0
    var finishedSinkCount = 0
    weak var _delegate: (any WorkflowDelegate)?
    var streams: [Int: AsyncStream<WorkflowEvent>.Continuation] = [:]
    var nextStreamID = 0
    /// Internal listeners (a sub-workflow task listening to its sub-workflow).
    var listeners: [Int: @Sendable (WorkflowEvent) -> Void] = [:]

    /// Creates a workflow.
    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - queue: The queue the tasks run on; by default a new one named after the workflow.
    public init(name: String = "Workflow", queue: ConcurrentOperationQueue? = nil) {
        self.name = name
        self.queue = queue ?? ConcurrentOperationQueue(name: "Workflow.\(name)")
    }

    deinit {
        for continuation in streams.values { continuation.finish() }
    }

    // MARK: Building

    /// Adds `task` with its prerequisites. Keyed prerequisites are prerequisites too; their
    /// results can be read by key.
    ///
    /// A task whose prerequisites have not all finished becomes pending.
    ///
    /// - Throws: ``OperationError/Code-swift.struct/taskAlreadyInWorkflow`` if the task is in a
    ///   workflow (this one or another); ``OperationError/Code-swift.struct/prerequisiteNotInWorkflow``
    ///   if a prerequisite was not added to this workflow first;
    ///   ``OperationError/Code-swift.struct/missingPrerequisiteKeys`` if a key of the task's
    ///   ``WorkflowTask/requiredPrerequisiteKeys`` has no keyed prerequisite;
    ///   ``OperationError/Code-swift.struct/dependencyCycle`` if the task is its own prerequisite.
    ///   Nothing was added.
    public func add(
        _ task: WorkflowTask,
        prerequisites: [WorkflowTask] = [],
        keyedPrerequisites: [String: WorkflowTask] = [:]
    ) throws(OperationError) {
        let required = task.requiredPrerequisiteKeys
        let missing = required.subtracting(keyedPrerequisites.keys)
        if !missing.isEmpty {
            throw OperationError(.missingPrerequisiteKeys, operations: [task.name],
                                 "missing keyed prerequisites: \(missing.sorted().joined(separator: ", "))")
        }
        let all = prerequisites + keyedPrerequisites.sorted { $0.key < $1.key }.map(\.value)
        if all.contains(where: { $0 === task }) {
            throw OperationError(.dependencyCycle, operations: [task.name, task.name], "a task cannot be its own prerequisite")
        }
        let refusal: OperationError? = WorkflowLock.lock.withLock {
            if task.workflow != nil || task.index >= 0 {
                return OperationError(.taskAlreadyInWorkflow, operations: [task.name], "the task is already in a workflow")
            }
            if let stranger = all.first(where: { $0.workflow !== self }) {
                return OperationError(.prerequisiteNotInWorkflow, operations: [task.name, stranger.name],
                                      "a prerequisite must be added to \(name) first")
            }
            task.workflow = self
            task.index = tasks.count
            tasks.append(task)
            var seen = Set<Int>()
            for prerequisite in all where seen.insert(prerequisite.index).inserted {
                task.prerequisiteIndices.append(prerequisite.index)
                if prerequisite.dependentIndices.isEmpty {
                    // It stops being a sink.
                    sinkCount -= 1
                    if prerequisite.lifecycle.state == .finished { finishedSinkCount -= 1 }
                }
                prerequisite.dependentIndices.append(task.index)
                if prerequisite.lifecycle.state != .finished { task.unfinishedPrerequisites += 1 }
            }
            task.keyedPrerequisiteIndices = keyedPrerequisites.mapValues(\.index)
            sinkCount += 1
            _ = task.lifecycle.prerequisitesChanged(allFinished: task.unfinishedPrerequisites == 0)
            return nil
        }
        if let refusal { throw refusal }
    }

    // MARK: Reading

    /// The tasks, in the order they were added.
    public var allTasks: [WorkflowTask] { WorkflowLock.lock.withLock { tasks } }
    /// The tasks without prerequisites.
    public var tasksWithNoPrerequisites: [WorkflowTask] {
        WorkflowLock.lock.withLock { tasks.filter { $0.prerequisiteIndices.isEmpty } }
    }
    /// The tasks without dependents: the workflow has finished when they all have.
    public var tasksWithNoDependents: [WorkflowTask] {
        WorkflowLock.lock.withLock { tasks.filter { $0.dependentIndices.isEmpty } }
    }
    /// The prerequisites of `task` (keyed ones included).
    public func prerequisites(of task: WorkflowTask) -> [WorkflowTask] {
        WorkflowLock.lock.withLock { task.workflow === self ? task.prerequisiteIndices.map { tasks[$0] } : [] }
    }
    /// The keyed prerequisites of `task`.
    public func keyedPrerequisites(of task: WorkflowTask) -> [String: WorkflowTask] {
        WorkflowLock.lock.withLock { task.workflow === self ? task.keyedPrerequisiteIndices.mapValues { tasks[$0] } : [:] }
    }
    /// The tasks that have `task` as a prerequisite.
    public func dependents(of task: WorkflowTask) -> [WorkflowTask] {
        WorkflowLock.lock.withLock { task.workflow === self ? task.dependentIndices.map { tasks[$0] } : [] }
    }
    /// Whether some task has not finished.
    public var hasUnfinishedTasks: Bool { WorkflowLock.lock.withLock { finishedCount < tasks.count } }
    /// Whether some task has failed.
    public var hasFailedTasks: Bool { WorkflowLock.lock.withLock { failedCount > 0 } }
    /// Whether every task without dependents has finished (an empty workflow has).
    public var isFinished: Bool { WorkflowLock.lock.withLock { finishedSinkCount == sinkCount } }

    /// The workflow's delegate, held weakly.
    public var delegate: (any WorkflowDelegate)? {
        get { WorkflowLock.lock.withLock { _delegate } }
        set { WorkflowLock.lock.withLock { _delegate = newValue } }
    }

    /// A stream of the workflow's events, from now on. It ends when the workflow is released or
    /// the consumer stops; events are buffered without limit.
    public var events: AsyncStream<WorkflowEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: WorkflowEvent.self)
        let id = WorkflowLock.lock.withLock {
            nextStreamID += 1
            streams[nextStreamID] = continuation
            return nextStreamID
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = WorkflowLock.lock.withLock { self.streams.removeValue(forKey: id) }
        }
        return stream
    }

    // MARK: Control

    /// Starts every ready task — at first, the tasks without prerequisites; the others start as
    /// their prerequisites finish. An empty workflow finishes at once.
    public func start() {
        perform { transaction in
            transaction.announce(.willStart)
            if tasks.isEmpty {
                transaction.workflowFinished()
                return
            }
            for task in tasks where task.lifecycle.state == .ready { transaction.start(task) }
        }
    }

    /// Cancels every task (each cancel reaches the task's dependents).
    public func cancel() {
        perform { transaction in
            transaction.announce(.willCancel)
            transaction.cancel(from: tasks.filter { $0.prerequisiteIndices.isEmpty })
        }
    }

    /// Retries every failed or cancelled task; those whose prerequisites have finished start.
    public func retry() {
        perform { transaction in
            transaction.announce(.willRetry)
            transaction.retry(from: tasks.filter { $0.prerequisiteIndices.isEmpty })
        }
    }

    /// Resets every task. Nothing starts until ``start()``.
    public func reset() {
        perform { transaction in
            transaction.announce(.willReset)
            transaction.reset(from: tasks.filter { $0.prerequisiteIndices.isEmpty })
        }
    }

    /// Runs `body` under the lock, then performs what it decided without the lock.
    func perform(_ body: (inout WorkflowTransaction) -> Void) {
        var transaction = WorkflowTransaction(workflow: self)
        WorkflowLock.lock.withLock { body(&transaction) }
        transaction.performEffects()
    }

    /// Under the lock: the listeners to tell about an event.
    func receivers() -> (delegate: (any WorkflowDelegate)?, streams: [AsyncStream<WorkflowEvent>.Continuation],
                         listeners: [@Sendable (WorkflowEvent) -> Void]) {
        (_delegate, Array(streams.values), Array(listeners.values))
    }
}

/// Something that happened in a workflow.
public enum WorkflowEvent: Sendable, CustomStringConvertible {
    case willStart, willCancel, willRetry, willReset
    case taskStarted(WorkflowTask)
    case taskFinished(WorkflowTask, result: (any Sendable)?)
    case taskFailed(WorkflowTask, error: any Error)
    case taskCancelled(WorkflowTask)
    case taskRetried(WorkflowTask)
    case taskReset(WorkflowTask)
    /// Every task without dependents has finished.
    case workflowFinished

    public var description: String {
        switch self {
        case .willStart: "willStart"
        case .willCancel: "willCancel"
        case .willRetry: "willRetry"
        case .willReset: "willReset"
        case .taskStarted(let task): "taskStarted(\(task.name))"
        case .taskFinished(let task, _): "taskFinished(\(task.name))"
        case .taskFailed(let task, let error): "taskFailed(\(task.name), \(error))"
        case .taskCancelled(let task): "taskCancelled(\(task.name))"
        case .taskRetried(let task): "taskRetried(\(task.name))"
        case .taskReset(let task): "taskReset(\(task.name))"
        case .workflowFinished: "workflowFinished"
        }
    }
}

/// Told when the workflow finishes and when one of its tasks fails or is cancelled. Methods have
/// empty defaults; they run on the thread that caused the change, never under a lock.
public protocol WorkflowDelegate: AnyObject, Sendable {
    func workflowDidFinish(_ workflow: Workflow)
    func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error)
    func workflow(_ workflow: Workflow, taskDidCancel task: WorkflowTask)
}

extension WorkflowDelegate {
    public func workflowDidFinish(_ workflow: Workflow) {}
    public func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error) {}
    public func workflow(_ workflow: Workflow, taskDidCancel task: WorkflowTask) {}
}
