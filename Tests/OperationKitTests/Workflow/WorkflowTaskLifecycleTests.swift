@testable import OperationKit
import OperationKitTestSupport
import Testing

/// The pure transition function of a workflow task (`WorkflowTaskLifecycle`): every state × every
/// event, with the resulting state, run number and return value, checked against a table written
/// out here by hand and against Task.framework's documented transition table (TSKTask.m,
/// `transitionFromStateInSet:toState:andExecuteBlock:`; PEERS.md 1.2).
@Suite("Workflow task lifecycle: the transition table", .offThePool)
struct WorkflowTaskLifecycleTests {
    /// Every event the lifecycle accepts. `finish`/`fail` for the current run or another one.
    enum Event: String, CaseIterable, CustomStringConvertible, Sendable {
        case prerequisitesFinished, prerequisitesUnfinished, start
        case finishCurrent, finishEarlierRun, finishLaterRun
        case failCurrent, failEarlierRun, failLaterRun
        case cancel, retry, reset
        var description: String { rawValue }
    }

    /// What an event returned: a Bool for most, the started run's number (or nil) for start.
    enum Returned: Equatable, CustomStringConvertible {
        case changed(Bool)
        case started(Int?)
        var description: String {
            switch self {
            case .changed(let value): "\(value)"
            case .started(let run): run.map { "run \($0)" } ?? "nil"
            }
        }
    }

    /// The run number every table row starts from.
    static let run = 3

    /// Applies `event` to a lifecycle in `state` at run ``run``.
    static func apply(_ event: Event, to state: WorkflowTaskState) -> (state: WorkflowTaskState, run: Int, returned: Returned) {
        var lifecycle = WorkflowTaskLifecycle(state: state, run: run)
        let returned: Returned
        switch event {
        case .prerequisitesFinished: returned = .changed(lifecycle.prerequisitesChanged(allFinished: true))
        case .prerequisitesUnfinished: returned = .changed(lifecycle.prerequisitesChanged(allFinished: false))
        case .start: returned = .started(lifecycle.start())
        case .finishCurrent: returned = .changed(lifecycle.finish(run: run))
        case .finishEarlierRun: returned = .changed(lifecycle.finish(run: run - 1))
        case .finishLaterRun: returned = .changed(lifecycle.finish(run: run + 1))
        case .failCurrent: returned = .changed(lifecycle.fail(run: run))
        case .failEarlierRun: returned = .changed(lifecycle.fail(run: run - 1))
        case .failLaterRun: returned = .changed(lifecycle.fail(run: run + 1))
        case .cancel: returned = .changed(lifecycle.cancel())
        case .retry: returned = .changed(lifecycle.retry())
        case .reset: returned = .changed(lifecycle.reset())
        }
        return (lifecycle.state, lifecycle.run, returned)
    }

    /// The expected table: for each (state, event) that changes something, the new state (and
    /// for start the new run). Every other pair leaves state and run alone and returns false/nil.
    static let changes: [WorkflowTaskState: [Event: WorkflowTaskState]] = [
        .pending: [.prerequisitesFinished: .ready, .cancel: .cancelled],
        .ready: [.prerequisitesUnfinished: .pending, .start: .executing, .cancel: .cancelled, .reset: .pending],
        .executing: [.finishCurrent: .finished, .failCurrent: .failed, .cancel: .cancelled, .reset: .pending],
        .finished: [.reset: .pending],
        .failed: [.retry: .pending, .reset: .pending],
        .cancelled: [.retry: .pending, .reset: .pending],
    ]

    struct Case: CustomStringConvertible, Sendable {
        let state: WorkflowTaskState
        let event: Event
        var description: String { "\(state) + \(event)" }
    }

    static let allCases: [Case] = WorkflowTaskState.allCases.flatMap { state in Event.allCases.map { Case(state: state, event: $0) } }

    @Test("every state × event gives the table's state, run and return value", arguments: allCases)
    func transition(_ testCase: Case) {
        let (state, run, returned) = Self.apply(testCase.event, to: testCase.state)
        if let target = Self.changes[testCase.state]?[testCase.event] {
            #expect(state == target)
            if testCase.event == .start {
                #expect(run == Self.run + 1, "a start begins a new run")
                #expect(returned == .started(Self.run + 1))
            } else {
                #expect(run == Self.run, "only start changes the run number")
                #expect(returned == .changed(true))
            }
        } else {
            #expect(state == testCase.state, "nothing changes")
            #expect(run == Self.run)
            #expect(returned == (testCase.event == .start ? .started(nil) : .changed(false)))
        }
    }

    @Test("the table has exactly 72 cells and 15 of them change something")
    func tableSize() {
        #expect(Self.allCases.count == 6 * 12)
        var changing = 0
        for testCase in Self.allCases {
            let (state, run, _) = Self.apply(testCase.event, to: testCase.state)
            if state != testCase.state || run != Self.run { changing += 1 }
        }
        #expect(changing == 15)
    }

    /// Task.framework's documented transitions (TSKTask.m):
    ///   Pending → Ready, Cancelled; Ready → Pending, Executing, Cancelled;
    ///   Executing → Pending, Cancelled, Finished, Failed; Cancelled → Pending;
    ///   Finished → Pending; Failed → Pending.
    static let taskFrameworkEdges: Set<[WorkflowTaskState]> = [
        [.pending, .ready], [.pending, .cancelled],
        [.ready, .pending], [.ready, .executing], [.ready, .cancelled],
        [.executing, .pending], [.executing, .cancelled], [.executing, .finished], [.executing, .failed],
        [.cancelled, .pending], [.finished, .pending], [.failed, .pending],
    ]

    @Test("the reachable edges are exactly Task.framework's documented transition table")
    func matchesTaskFramework() {
        var edges = Set<[WorkflowTaskState]>()
        for testCase in Self.allCases {
            let (state, _, _) = Self.apply(testCase.event, to: testCase.state)
            if state != testCase.state { edges.insert([testCase.state, state]) }
        }
        #expect(edges == Self.taskFrameworkEdges)
        // No transition to the same state counts as a change (TF: "no-op if it equals the target").
        for testCase in Self.allCases {
            let (state, run, returned) = Self.apply(testCase.event, to: testCase.state)
            if state == testCase.state && run == Self.run {
                #expect(returned == .changed(false) || returned == .started(nil), "\(testCase)")
            }
        }
    }

    @Test("the events that Task.framework names for each edge are the ones that take it")
    func edgeCauses() {
        // TF: Pending → Ready when all prerequisites finish; Ready → Pending when a prerequisite
        // is added or reset (no longer finished); reset from Ready arrived in 1.1 (the reset fix).
        #expect(Self.apply(.prerequisitesFinished, to: .pending).state == .ready)
        #expect(Self.apply(.prerequisitesUnfinished, to: .ready).state == .pending)
        #expect(Self.apply(.reset, to: .ready).state == .pending, "Task 1.1: reset accepts ready")
        // Retry does not accept ready, executing, finished or pending.
        for state in [WorkflowTaskState.pending, .ready, .executing, .finished] {
            #expect(Self.apply(.retry, to: state).state == state)
        }
        // Cancel never leaves a terminal state.
        for state in [WorkflowTaskState.finished, .failed, .cancelled] {
            #expect(Self.apply(.cancel, to: state).state == state)
        }
    }

    @Test("a new lifecycle is ready with run 0, like a new TSKTask")
    func initial() {
        let lifecycle = WorkflowTaskLifecycle()
        #expect(lifecycle.state == .ready)
        #expect(lifecycle.run == 0)
        #expect(lifecycle == WorkflowTaskLifecycle(state: .ready, run: 0))
    }

    @Test("runs count up; a finish or fail for a run that was cancelled or reset is ignored")
    func staleRuns() {
        var lifecycle = WorkflowTaskLifecycle()
        // Each step: the event, then what it returned (mutating calls cannot go inside #expect).
        var started = lifecycle.start()
        #expect(started == 1)
        var changed = lifecycle.cancel()
        #expect(changed)
        changed = lifecycle.finish(run: 1)
        #expect(!changed, "run 1 was cancelled")
        changed = lifecycle.retry()
        #expect(changed)
        changed = lifecycle.prerequisitesChanged(allFinished: true)
        #expect(changed)
        started = lifecycle.start()
        #expect(started == 2)
        changed = lifecycle.finish(run: 1)
        #expect(!changed, "run 1 is over even though the task executes again")
        changed = lifecycle.fail(run: 1)
        #expect(!changed)
        #expect(lifecycle.state == .executing)
        changed = lifecycle.reset()
        #expect(changed)
        #expect(lifecycle.state == .pending)
        changed = lifecycle.finish(run: 2)
        #expect(!changed, "run 2 was reset")
        changed = lifecycle.prerequisitesChanged(allFinished: true)
        #expect(changed)
        started = lifecycle.start()
        #expect(started == 3)
        changed = lifecycle.fail(run: 2)
        #expect(!changed)
        changed = lifecycle.finish(run: 3)
        #expect(changed)
        #expect(lifecycle.state == .finished)
        changed = lifecycle.finish(run: 3)
        #expect(!changed, "a run finishes once")
        changed = lifecycle.fail(run: 3)
        #expect(!changed)
        #expect(lifecycle.run == 3)
    }

    @Test("a reset or retried task only moves on to ready through prerequisitesChanged")
    func pendingAfterResetOrRetry() {
        var failed = WorkflowTaskLifecycle(state: .failed, run: 1)
        var changed = failed.retry()
        #expect(changed)
        var started = failed.start()
        #expect(started == nil, "pending: cannot start until prerequisites are reported")
        changed = failed.prerequisitesChanged(allFinished: false)
        #expect(!changed)
        #expect(failed.state == .pending)
        changed = failed.prerequisitesChanged(allFinished: true)
        #expect(changed)
        started = failed.start()
        #expect(started == 2)

        var finished = WorkflowTaskLifecycle(state: .finished, run: 5)
        changed = finished.reset()
        #expect(changed)
        #expect(finished.state == .pending)
        changed = finished.reset()
        #expect(!changed, "a pending task has nothing to reset")
        #expect(finished.run == 5)
    }

    @Test("state descriptions are Task.framework's state names, lower-cased")
    func descriptions() {
        #expect(WorkflowTaskState.allCases.map(\.description) == ["pending", "ready", "executing", "finished", "failed", "cancelled"])
    }
}
