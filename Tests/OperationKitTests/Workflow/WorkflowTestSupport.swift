import Foundation
import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// Shared fixtures for the workflow-layer tests (SCENARIOS.md sections D 40–44, E, F, G, H, I, J).
// Names start with "Workflow" or say what they are, since other suites share this test target.

/// How long a workflow test waits for something that must happen. A timeout fails the test; no
/// assertion depends on how fast anything is. Generous: under the full suite on 2 cores, tests
/// that block threads while they wait can keep async work (an event stream's consumer task)
/// from running for seconds.
let workflowTimeout: Duration = .seconds(30)

/// How long a task waits for a rendezvous that only concurrency can bring about. If the tasks
/// were serialised it would time out and the test would fail.
let rendezvousTimeout: Duration = .seconds(20)

/// An error with an identity, to check which error arrived where.
struct WorkflowTestError: Error, Hashable, CustomStringConvertible {
    let id: Int
    init(_ id: Int) { self.id = id }
    var description: String { "W\(id)" }
}

// MARK: - Waiting off the cooperative pool

/// Runs the blocking `wait` on a thread of its own (a serial queue gets one at once) and returns
/// its result, so that an `async` test never blocks a thread of the pool its work may need.
func workflowWaitOffThePool(_ wait: @escaping @Sendable () -> Bool) async -> Bool {
    await withCheckedContinuation { continuation in
        DispatchQueue(label: "workflow-tests.waiting").async { continuation.resume(returning: wait()) }
    }
}

/// Whether `latch` opens within `timeout`.
func reached(_ latch: Latch, within timeout: Duration = workflowTimeout) async -> Bool {
    await workflowWaitOffThePool { latch.wait(timeout: timeout) }
}

/// Whether `gate` opens within `timeout`.
func reached(_ gate: Gate, within timeout: Duration = workflowTimeout) async -> Bool {
    await workflowWaitOffThePool { gate.wait(timeout: timeout) }
}

/// Whether every operation of `queue` has finished and been released within `timeout`.
func drained(_ queue: ConcurrentOperationQueue, within timeout: Duration = workflowTimeout) async -> Bool {
    await workflowWaitOffThePool { queue.waitUntilAllOperationsAreFinishedBlocking(timeout: timeout) }
}

// MARK: - Recording delegates

/// Counts messages: ``received(_:within:)`` waits until the n-th has arrived.
final class MessageCounter: Sendable {
    private let count = WorkflowBox(0)
    private let latches = (0..<16).map { _ in Latch(count: 1) }

    init() {}

    func countOne() {
        let number = count.update { count -> Int in
            count += 1
            return count
        }
        if number <= latches.count { latches[number - 1].countDown() }
    }

    /// Whether `number` messages have arrived within `timeout`.
    func received(_ number: Int, within timeout: Duration = workflowTimeout) async -> Bool {
        await reached(latches[number - 1], within: timeout)
    }
}

/// A task delegate that records every message as `finish(name)=result`, `fail(name)=error` or
/// `cancel(name)`, and counts them down on `messages`.
final class RecordingTaskDelegate: WorkflowTaskDelegate {
    let log = Recorder<String>()
    let messages: Latch
    private let counter = MessageCounter()

    init(expecting count: Int = 1) { messages = Latch(count: count) }

    /// Whether `number` messages have arrived within `timeout`.
    func received(_ number: Int, within timeout: Duration = workflowTimeout) async -> Bool {
        await counter.received(number, within: timeout)
    }

    func task(_ task: WorkflowTask, didFinishWith result: (any Sendable)?) {
        log.record("finish(\(task.name))=\(result.map { "\($0)" } ?? "nil")")
        messages.countDown()
        counter.countOne()
    }

    func task(_ task: WorkflowTask, didFailWith error: any Error) {
        log.record("fail(\(task.name))=\(error)")
        messages.countDown()
        counter.countOne()
    }

    func taskDidCancel(_ task: WorkflowTask) {
        log.record("cancel(\(task.name))")
        messages.countDown()
        counter.countOne()
    }
}

/// A workflow delegate that records every message as `finished(workflow)`, `fail(task)=error`
/// or `cancel(task)`; `finished` opens at the first workflow finish, `messages` counts all down.
final class RecordingWorkflowDelegate: WorkflowDelegate {
    let log = Recorder<String>()
    let finished = Latch(count: 1)
    let messages: Latch
    /// The states of the workflow's tasks when it last reported finishing.
    let statesAtFinish = WorkflowBox<[WorkflowTaskState]>([])
    private let counter = MessageCounter()

    init(expecting count: Int = 1) { messages = Latch(count: count) }

    /// Whether `number` messages have arrived within `timeout`.
    func received(_ number: Int, within timeout: Duration = workflowTimeout) async -> Bool {
        await counter.received(number, within: timeout)
    }

    func workflowDidFinish(_ workflow: Workflow) {
        statesAtFinish.value = workflow.allTasks.map(\.state)
        log.record("finished(\(workflow.name))")
        finished.countDown()
        messages.countDown()
        counter.countOne()
    }

    func workflow(_ workflow: Workflow, task: WorkflowTask, didFailWith error: any Error) {
        log.record("fail(\(task.name))=\(error)")
        messages.countDown()
        counter.countOne()
    }

    func workflow(_ workflow: Workflow, taskDidCancel task: WorkflowTask) {
        log.record("cancel(\(task.name))")
        messages.countDown()
        counter.countOne()
    }

    /// How many times the workflow finished.
    var finishCount: Int { log.values.filter { $0.hasPrefix("finished(") }.count }
}

/// A workflow delegate that implements none of the optional methods (scenario 67).
final class SilentWorkflowDelegate: WorkflowDelegate {}

// MARK: - The event stream

/// Consumes a workflow's ``Workflow/events`` from the moment it is created, recording each event's
/// description; ``waitFor(_:count:within:)`` waits (off the pool, with a timeout) until an event
/// has been seen `count` times. The consumer stops when the log is released or ``stop()`` is called.
final class WorkflowEventLog: Sendable {
    private struct State {
        var events: [WorkflowEvent] = []
        var descriptions: [String] = []
        var waiters: [(matches: @Sendable (String) -> Bool, count: Int, latch: Latch)] = []
    }

    private let state = TestLocked(State())
    private let consumer = TestLocked<Task<Void, Never>?>(nil)

    init(_ workflow: Workflow) {
        let stream = workflow.events  // subscribed now: nothing after this line is missed
        let task = Task { [weak self] in
            for await event in stream {
                guard let self else { return }
                self.append(event)
            }
        }
        consumer.withLock { $0 = task }
    }

    deinit { stop() }

    /// Stops consuming (the stream ends).
    func stop() { consumer.withLock { $0?.cancel() } }

    /// The descriptions of the events seen so far, in order.
    var events: [String] { state.withLock { $0.descriptions } }

    /// The events seen so far, in order.
    var rawEvents: [WorkflowEvent] { state.withLock { $0.events } }

    /// Whether `event` has been seen `count` times within `timeout`.
    func waitFor(_ event: String, count: Int = 1, within timeout: Duration = workflowTimeout) async -> Bool {
        await waitFor(where: { $0 == event }, count: count, within: timeout)
    }

    /// Whether an event whose description starts with `prefix` has been seen within `timeout`.
    func waitFor(prefix: String, within timeout: Duration = workflowTimeout) async -> Bool {
        await waitFor(where: { $0.hasPrefix(prefix) }, count: 1, within: timeout)
    }

    /// Whether events matching `matches` have been seen `count` times within `timeout`.
    func waitFor(where matches: @escaping @Sendable (String) -> Bool, count: Int, within timeout: Duration) async -> Bool {
        let latch = Latch(count: 1)
        state.withLock { state in
            if state.descriptions.filter(matches).count >= count {
                latch.countDown()
            } else {
                state.waiters.append((matches, count, latch))
            }
        }
        return await reached(latch, within: timeout)
    }

    private func append(_ raw: WorkflowEvent) {
        let event = raw.description
        let ready = state.withLock { state -> [Latch] in
            state.events.append(raw)
            state.descriptions.append(event)
            var ready: [Latch] = []
            state.waiters.removeAll { waiter in
                guard waiter.matches(event), state.descriptions.filter(waiter.matches).count >= waiter.count else { return false }
                ready.append(waiter.latch)
                return true
            }
            return ready
        }
        for latch in ready { latch.countDown() }
    }
}

// MARK: - Tasks

/// A mutable box for values handed out of a task's work (runs, counters).
final class WorkflowBox<Value: Sendable>: Sendable {
    private let storage: TestLocked<Value>
    init(_ value: Value) { storage = TestLocked(value) }
    var value: Value {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
    func update<R: Sendable>(_ body: (inout Value) -> R) -> R { storage.withLock { body(&$0) } }
}

/// A task subclass that counts its hooks and runs `work` (by default finishing with its name).
final class HookCountingTask: WorkflowTask, @unchecked Sendable {  // only Sendable state
    let hooks = Recorder<String>()
    let runs = WorkflowBox<Int>(0)
    private let work: @Sendable (HookCountingTask, WorkflowTaskRun) -> Void

    init(name: String, work: @escaping @Sendable (HookCountingTask, WorkflowTaskRun) -> Void = { task, run in
        run.finish(with: task.name)
    }) {
        self.work = work
        super.init(name: name)
    }

    override func main() {
        runs.update { $0 += 1 }
        work(self, currentRun)
    }

    override func didCancel() { hooks.record("didCancel") }
    override func didReset() { hooks.record("didReset") }
    override func didRetry() { hooks.record("didRetry") }
    override func didFinish(with result: (any Sendable)?) { hooks.record("didFinish(\(result.map { "\($0)" } ?? "nil"))") }
    override func didFail(with error: any Error) { hooks.record("didFail(\(error))") }
}

/// A closure task that records `name start` and `name end` around `body` (which by default does
/// nothing), then finishes with its name.
func recordingTask(
    _ name: String, _ recorder: Recorder<String>, body: @escaping @Sendable () -> Bool = { true }
) -> ClosureTask {
    ClosureTask(name: name) { run in
        recorder.record("\(name) start")
        let ok = body()
        recorder.record("\(name) end")
        if ok { run.finish(with: name) } else { run.fail(with: WorkflowTestError(-1)) }
    }
}

/// Keeps every run it is handed and does not finish it: the test finishes or fails the runs.
/// ``started(_:)`` waits for the n-th run (1-based) to have begun.
final class HeldRuns: Sendable {
    private let runs = WorkflowBox<[WorkflowTaskRun]>([])
    private let latches = (0..<16).map { _ in Latch(count: 1) }

    init() {}

    /// Records `run` (call it from the task's work).
    func hold(_ run: WorkflowTaskRun) {
        let count = runs.update { runs -> Int in
            runs.append(run)
            return runs.count
        }
        if count <= latches.count { latches[count - 1].countDown() }
    }

    /// A closure task whose work is ``hold(_:)``.
    func task(_ name: String, requiredPrerequisiteKeys: Set<String> = []) -> ClosureTask {
        ClosureTask(name: name, requiredPrerequisiteKeys: requiredPrerequisiteKeys) { [self] run in hold(run) }
    }

    /// A hook-counting task whose work is ``hold(_:)``.
    func hookTask(_ name: String) -> HookCountingTask {
        HookCountingTask(name: name) { [self] _, run in hold(run) }
    }

    /// Whether the `number`-th run (1-based) begins within `timeout`.
    func started(_ number: Int = 1, within timeout: Duration = workflowTimeout) async -> Bool {
        await reached(latches[number - 1], within: timeout)
    }

    /// The `number`-th run (1-based) held, if it has begun.
    func run(_ number: Int = 1) -> WorkflowTaskRun? {
        let runs = runs.value
        return number <= runs.count ? runs[number - 1] : nil
    }

    /// How many runs have begun.
    var count: Int { runs.value.count }
}

extension Recorder where Value == String {
    /// The position of `value` in the log, or `nil`.
    func position(of value: String) -> Int? { values.firstIndex(of: value) }
}

/// A value behind an `NSLock`. The thread sanitizer sees the pthread mutex under it; with
/// `Synchronization.Mutex` (a futex on Linux) it reported races between two critical sections
/// of the same lock.
final class TestLocked<Value>: @unchecked Sendable {  // `value` is only touched under `lock`
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
