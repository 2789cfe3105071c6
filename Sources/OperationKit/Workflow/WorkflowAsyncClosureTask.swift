/// A workflow task whose work is an `async throws` closure, run in a Swift task: what it returns
/// finishes the run, what it throws fails it.
///
/// ```swift
/// let fetch = AsyncClosureTask(name: "fetch") { _ in
///     try await client.data(from: url)
/// }
/// let parse = AsyncClosureTask(name: "parse") { run in
///     let data = run.task.anyPrerequisiteResult as! Data
///     return try decoder.decode(Feed.self, from: data)
/// }
/// try workflow.add(fetch)
/// try workflow.add(parse, prerequisites: [fetch])
/// try await workflow.run()
/// ```
///
/// Each run starts a new unstructured Swift task, from ``main()`` on a worker of the workflow's
/// queue, and the run keeps its place on that queue until it ends, so the queue's concurrency
/// limit bounds the closures in flight. The closure receives the run: ``WorkflowTaskRun/task``
/// reaches the prerequisites' results.
///
/// When the run ends early — the task is cancelled or reset (by a call, or because a prerequisite
/// was), or the workflow's runners are cancelled on the queue while the run waits for one — the
/// Swift task is cancelled. Whatever the
/// closure returns or throws afterwards is ignored: it belongs to a run that is over, and cannot
/// finish a newer run started by a retry or a reset and start. A `CancellationError` thrown while
/// the run is still current fails the run like any other error.
///
/// The finish or fail happens on the thread the closure ended on (a thread of Swift's
/// cooperative pool), and so do the events, hooks and delegates it causes.
public final class AsyncClosureTask: WorkflowTask, @unchecked Sendable {
    private let body: @Sendable (WorkflowTaskRun) async throws -> (any Sendable)?
    private let requiredKeys: Set<String>
    private let priority: TaskPriority?
    // protected by `withTaskLock`: the Swift task of each run whose closure has not ended and
    // that has not been cancelled, by run number
    var swiftTasks: [Int: Task<Void, Never>] = [:]

    /// Creates a task that runs `body` in a Swift task, once per run.
    /// - Parameters:
    ///   - name: A name for logs, errors and diagrams.
    ///   - requiredPrerequisiteKeys: Keys that must be among the keyed prerequisites when the task
    ///     is added.
    ///   - priority: The priority of the Swift tasks; by default none (the default priority).
    ///   - body: The work of one run. It receives the run; its return value finishes the run and
    ///     an error it throws fails it. Runs in a new unstructured Swift task, which is cancelled
    ///     if the run ends early.
    public init(
        name: String,
        requiredPrerequisiteKeys: Set<String> = [],
        priority: TaskPriority? = nil,
        _ body: @escaping @Sendable (WorkflowTaskRun) async throws -> (any Sendable)?
    ) {
        self.body = body
        self.priority = priority
        requiredKeys = requiredPrerequisiteKeys
        super.init(name: name)
    }

    /// The keys given to ``init(name:requiredPrerequisiteKeys:priority:_:)``.
    public override var requiredPrerequisiteKeys: Set<String> { requiredKeys }

    /// Starts the closure in a Swift task for ``WorkflowTask/currentRun``, unless that run is
    /// already over.
    public override func main() {
        let run = currentRun
        let body = body
        withTaskLock {
            // Checked and recorded in one step with the state: a cancel or reset either comes
            // before (no Swift task starts) or after, and then its hook finds the Swift task.
            // Creating a Swift task only enqueues it: nothing of ours runs under the lock.
            guard lifecycle.state == .executing, lifecycle.run == run.number else { return }
            swiftTasks[run.number] = Task(priority: priority) { [self] in
                let result: Result<(any Sendable)?, any Error>
                do {
                    result = .success(try await body(run))
                } catch {
                    result = .failure(error)
                }
                _ = withTaskLock { swiftTasks.removeValue(forKey: run.number) }
                switch result {
                case .success(let value): run.finish(with: value)
                case .failure(let error): run.fail(with: error)
                }
            }
        }
    }

    /// Cancels the Swift task of the run the cancel ended.
    public override func didCancel() {
        cancelEndedRuns()
    }

    /// Cancels the Swift task of the run the reset ended, if one was in progress.
    public override func didReset() {
        cancelEndedRuns()
    }

    /// Cancels the Swift tasks of every run that is no longer current and executing.
    private func cancelEndedRuns() {
        let ended = withTaskLock { () -> [Task<Void, Never>] in
            let current = lifecycle.state == .executing ? lifecycle.run : nil
            let ended = swiftTasks.filter { $0.key != current }
            for number in ended.keys { swiftTasks[number] = nil }
            return Array(ended.values)
        }
        for task in ended { task.cancel() }
    }
}
