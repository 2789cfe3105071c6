@testable import OperationKit
import OperationKitTestSupport
import Testing

/// Exhaustive, thread-free tests of `ProcedureLifecycle`, the pure transition function of a
/// procedure: every state × cancelled flag × conditions-failed flag × event, written out by hand.
@Suite("B14/B15 ProcedureLifecycle transition table", .offThePool)
struct ProcedureLifecycleTests {
    typealias State = ProcedureState

    /// Every event of the lifecycle except `finished()`, which is legal only from finishing (see
    /// `finishedCompletesAFinish` and the exit tests).
    enum Event: String, CaseIterable, CustomTestStringConvertible {
        case enqueue
        case dependenciesFinishedWithConditions
        case dependenciesFinishedWithoutConditions
        case conditionsSatisfied
        case conditionsNotSatisfied
        case start
        case finish
        case cancel

        var testDescription: String { rawValue }
    }

    /// One state and pair of flags, and what each event does from there, in the order of `Event`:
    /// "<returned action> <resulting state>", plus " +cancelled" / " +failed" when the event sets
    /// that flag (" -cancelled" / " -failed" if it cleared one: no event may). "trap": the event is
    /// impossible there and stops the process (checked by an exit test, not run in the table).
    struct Row: CustomTestStringConvertible {
        let state: State
        let cancelled: Bool
        let failed: Bool
        let outcomes: [String]

        init(_ state: State, cancelled: Bool, failed: Bool, _ outcomes: [String]) {
            self.state = state
            self.cancelled = cancelled
            self.failed = failed
            self.outcomes = outcomes
        }

        var testDescription: String { "\(state) cancelled:\(cancelled) failed:\(failed)" }

        /// The lifecycle in this row's state.
        var lifecycle: ProcedureLifecycle {
            ProcedureLifecycle(state: state, isCancelled: cancelled, conditionsFailed: failed)
        }
    }

    // The columns: enqueue, dependenciesFinished(hasConditions: true), dependenciesFinished(
    // hasConditions: false), conditionsEvaluated(satisfied: true), conditionsEvaluated(satisfied:
    // false), start, finish, cancel.
    //
    // Rows with conditionsFailed before evaluation, or cancelled while evaluating, cannot be
    // reached by a procedure; they are listed so that no combination goes unchecked. The table
    // pins the current behaviour everywhere; `stateChangesFollowTheDocumentedGraph` separately
    // checks which of these state changes the documented lifecycle allows.
    static let table: [Row] = [
        Row(.initialized, cancelled: false, failed: false, [
            "true pending", "trap", "trap",
            "false initialized", "false initialized", "execute executing",
            "refuseNotStarted initialized", "cancelledBeforeExecuting initialized +cancelled",
        ]),
        Row(.initialized, cancelled: false, failed: true, [
            "true pending", "trap", "trap",
            "false initialized", "false initialized", "finishWithoutExecuting finishing",
            "refuseNotStarted initialized", "cancelledBeforeExecuting initialized +cancelled",
        ]),
        Row(.initialized, cancelled: true, failed: false, [
            "true pending", "trap", "trap",
            "false initialized", "false initialized", "finishWithoutExecuting finishing",
            "refuseNotStarted initialized", "none initialized",
        ]),
        Row(.initialized, cancelled: true, failed: true, [
            "true pending", "trap", "trap",
            "false initialized", "false initialized", "finishWithoutExecuting finishing",
            "refuseNotStarted initialized", "none initialized",
        ]),
        Row(.pending, cancelled: false, failed: false, [
            "false pending", "evaluateConditions evaluatingConditions", "proceed ready",
            "false pending", "false pending", "refuse pending",
            "refuseNotStarted pending", "cancelledBeforeExecuting pending +cancelled",
        ]),
        Row(.pending, cancelled: false, failed: true, [
            "false pending", "evaluateConditions evaluatingConditions", "proceed ready",
            "false pending", "false pending", "refuse pending",
            "refuseNotStarted pending", "cancelledBeforeExecuting pending +cancelled",
        ]),
        Row(.pending, cancelled: true, failed: false, [
            "false pending", "proceed ready", "proceed ready",
            "false pending", "false pending", "refuse pending",
            "refuseNotStarted pending", "none pending",
        ]),
        Row(.pending, cancelled: true, failed: true, [
            "false pending", "proceed ready", "proceed ready",
            "false pending", "false pending", "refuse pending",
            "refuseNotStarted pending", "none pending",
        ]),
        Row(.evaluatingConditions, cancelled: false, failed: false, [
            "false evaluatingConditions", "trap", "trap",
            "true ready", "true ready +failed", "refuse evaluatingConditions",
            "refuseNotStarted evaluatingConditions", "abandonEvaluation ready +cancelled",
        ]),
        Row(.evaluatingConditions, cancelled: false, failed: true, [
            "false evaluatingConditions", "trap", "trap",
            "true ready", "true ready", "refuse evaluatingConditions",
            "refuseNotStarted evaluatingConditions", "abandonEvaluation ready +cancelled",
        ]),
        Row(.evaluatingConditions, cancelled: true, failed: false, [
            "false evaluatingConditions", "trap", "trap",
            "true ready", "true ready +failed", "refuse evaluatingConditions",
            "refuseNotStarted evaluatingConditions", "none evaluatingConditions",
        ]),
        Row(.evaluatingConditions, cancelled: true, failed: true, [
            "false evaluatingConditions", "trap", "trap",
            "true ready", "true ready", "refuse evaluatingConditions",
            "refuseNotStarted evaluatingConditions", "none evaluatingConditions",
        ]),
        Row(.ready, cancelled: false, failed: false, [
            "false ready", "proceed ready", "proceed ready",
            "false ready", "false ready", "execute executing",
            "refuseNotStarted ready", "cancelledBeforeExecuting ready +cancelled",
        ]),
        Row(.ready, cancelled: false, failed: true, [
            "false ready", "proceed ready", "proceed ready",
            "false ready", "false ready", "finishWithoutExecuting finishing",
            "refuseNotStarted ready", "cancelledBeforeExecuting ready +cancelled",
        ]),
        Row(.ready, cancelled: true, failed: false, [
            "false ready", "proceed ready", "proceed ready",
            "false ready", "false ready", "finishWithoutExecuting finishing",
            "refuseNotStarted ready", "none ready",
        ]),
        Row(.ready, cancelled: true, failed: true, [
            "false ready", "proceed ready", "proceed ready",
            "false ready", "false ready", "finishWithoutExecuting finishing",
            "refuseNotStarted ready", "none ready",
        ]),
        Row(.executing, cancelled: false, failed: false, [
            "false executing", "proceed executing", "proceed executing",
            "false executing", "false executing", "refuse executing",
            "finish finishing", "cancelledWhileExecuting executing +cancelled",
        ]),
        Row(.executing, cancelled: false, failed: true, [
            "false executing", "proceed executing", "proceed executing",
            "false executing", "false executing", "refuse executing",
            "finish finishing", "cancelledWhileExecuting executing +cancelled",
        ]),
        Row(.executing, cancelled: true, failed: false, [
            "false executing", "proceed executing", "proceed executing",
            "false executing", "false executing", "refuse executing",
            "finish finishing", "none executing",
        ]),
        Row(.executing, cancelled: true, failed: true, [
            "false executing", "proceed executing", "proceed executing",
            "false executing", "false executing", "refuse executing",
            "finish finishing", "none executing",
        ]),
        Row(.finishing, cancelled: false, failed: false, [
            "false finishing", "proceed finishing", "proceed finishing",
            "false finishing", "false finishing", "refuse finishing",
            "ignoreAlreadyFinishing finishing", "none finishing",
        ]),
        Row(.finishing, cancelled: false, failed: true, [
            "false finishing", "proceed finishing", "proceed finishing",
            "false finishing", "false finishing", "refuse finishing",
            "ignoreAlreadyFinishing finishing", "none finishing",
        ]),
        Row(.finishing, cancelled: true, failed: false, [
            "false finishing", "proceed finishing", "proceed finishing",
            "false finishing", "false finishing", "refuse finishing",
            "ignoreAlreadyFinishing finishing", "none finishing",
        ]),
        Row(.finishing, cancelled: true, failed: true, [
            "false finishing", "proceed finishing", "proceed finishing",
            "false finishing", "false finishing", "refuse finishing",
            "ignoreAlreadyFinishing finishing", "none finishing",
        ]),
        Row(.finished, cancelled: false, failed: false, [
            "false finished", "proceed finished", "proceed finished",
            "false finished", "false finished", "refuse finished",
            "ignoreAlreadyFinishing finished", "none finished",
        ]),
        Row(.finished, cancelled: false, failed: true, [
            "false finished", "proceed finished", "proceed finished",
            "false finished", "false finished", "refuse finished",
            "ignoreAlreadyFinishing finished", "none finished",
        ]),
        Row(.finished, cancelled: true, failed: false, [
            "false finished", "proceed finished", "proceed finished",
            "false finished", "false finished", "refuse finished",
            "ignoreAlreadyFinishing finished", "none finished",
        ]),
        Row(.finished, cancelled: true, failed: true, [
            "false finished", "proceed finished", "proceed finished",
            "false finished", "false finished", "refuse finished",
            "ignoreAlreadyFinishing finished", "none finished",
        ]),
    ]

    /// Applies `event` and describes the outcome as the table does.
    static func apply(_ event: Event, to lifecycle: inout ProcedureLifecycle) -> String {
        switch event {
        case .enqueue: "\(lifecycle.enqueue())"
        case .dependenciesFinishedWithConditions: "\(lifecycle.dependenciesFinished(hasConditions: true))"
        case .dependenciesFinishedWithoutConditions: "\(lifecycle.dependenciesFinished(hasConditions: false))"
        case .conditionsSatisfied: "\(lifecycle.conditionsEvaluated(satisfied: true))"
        case .conditionsNotSatisfied: "\(lifecycle.conditionsEvaluated(satisfied: false))"
        case .start: "\(lifecycle.start())"
        case .finish: "\(lifecycle.finish())"
        case .cancel: "\(lifecycle.cancel())"
        }
    }

    static func describe(action: String, from row: Row, to lifecycle: ProcedureLifecycle) -> String {
        var text = "\(action) \(lifecycle.state)"
        if lifecycle.isCancelled != row.cancelled { text += lifecycle.isCancelled ? " +cancelled" : " -cancelled" }
        if lifecycle.conditionsFailed != row.failed { text += lifecycle.conditionsFailed ? " +failed" : " -failed" }
        return text
    }

    @Test("the table covers every state and pair of flags exactly once, with one outcome per event")
    func tableIsComplete() {
        let keys = Self.table.map(\.testDescription)
        #expect(Set(keys).count == keys.count)
        #expect(keys.count == State.allCases.count * 2 * 2)
        for row in Self.table {
            #expect(row.outcomes.count == Event.allCases.count, "\(row.testDescription)")
        }
    }

    @Test("every state × flags × event", arguments: Self.table, Event.allCases)
    func transition(_ row: Row, _ event: Event) throws {
        let index = try #require(Event.allCases.firstIndex(of: event))
        let expected = row.outcomes[index]
        guard expected != "trap" else { return }  // see the exit tests below
        var lifecycle = ProcedureLifecycle(state: row.state, isCancelled: row.cancelled, conditionsFailed: row.failed)
        let action = Self.apply(event, to: &lifecycle)
        #expect(Self.describe(action: action, from: row, to: lifecycle) == expected)
    }

    @Test("finished() completes a finish from finishing, keeping both flags", arguments: [false, true], [false, true])
    func finishedCompletesAFinish(cancelled: Bool, failed: Bool) {
        var lifecycle = ProcedureLifecycle(state: .finishing, isCancelled: cancelled, conditionsFailed: failed)
        lifecycle.finished()
        #expect(lifecycle == ProcedureLifecycle(state: .finished, isCancelled: cancelled, conditionsFailed: failed))
    }

    @Test("B19 conditions are accepted before evaluation, observers before executing")
    func lateConfiguration() {
        for state in State.allCases {
            let lifecycle = ProcedureLifecycle(state: state, isCancelled: false)
            #expect(lifecycle.acceptsConditions == (state == .initialized || state == .pending), "\(state)")
            #expect(lifecycle.acceptsObservers == (state < .executing), "\(state)")
        }
    }

    @Test("a new lifecycle is initialized, not cancelled, conditions not failed")
    func initial() {
        let lifecycle = ProcedureLifecycle()
        #expect(lifecycle.state == .initialized)
        #expect(!lifecycle.isCancelled)
        #expect(!lifecycle.conditionsFailed)
        #expect(lifecycle == ProcedureLifecycle(state: .initialized, isCancelled: false, conditionsFailed: false))
    }

    @Test("ProcedureState is ordered along the lifecycle and named after its cases")
    func stateOrderAndNames() {
        #expect(State.allCases
            == [.initialized, .pending, .evaluatingConditions, .ready, .executing, .finishing, .finished])
        #expect(State.allCases == State.allCases.sorted())
        #expect(State.allCases.map(\.description)
            == ["initialized", "pending", "evaluatingConditions", "ready", "executing", "finishing", "finished"])
    }

    // MARK: Properties of the whole table

    @Test("B14 no event moves the state backwards, and finished is final")
    func stateOnlyMovesForward() {
        for row in Self.table {
            for (event, outcome) in zip(Event.allCases, row.outcomes) where outcome != "trap" {
                var lifecycle = row.lifecycle
                _ = Self.apply(event, to: &lifecycle)
                #expect(lifecycle.state >= row.state, "\(row.testDescription) \(event)")
                if row.state == .finished {
                    #expect(lifecycle == row.lifecycle, "finished is final")
                }
                // Flags are only ever set.
                #expect(lifecycle.isCancelled || !row.cancelled)
                #expect(lifecycle.conditionsFailed || !row.failed)
            }
        }
    }

    /// The state changes the documentation allows (ProcedureState, ProcedureOperation and
    /// DESIGN.md): the queue path initialized → pending → (evaluatingConditions →) ready →
    /// executing or, cancelled / conditions failed, finishing → finished; cancelling during
    /// evaluation goes back to ready; a cancelled pending procedure may finish without executing
    /// (PSOperations' pending→finishing); and `start()` by hand on a procedure in no queue goes
    /// from initialized to executing, or to finishing if it was cancelled.
    static let documentedStateChanges: Set<String> = [
        "initialized→pending",
        "pending→evaluatingConditions", "pending→ready", "pending→finishing",
        "evaluatingConditions→ready",
        "ready→executing", "ready→finishing",
        "executing→finishing",
        "finishing→finished",
        // start() by hand, without a queue
        "initialized→executing", "initialized→finishing",
    ]

    /// Only for reachable combinations: a procedure cannot have failed conditions before they are
    /// evaluated, nor be cancelled while still evaluating (cancelling leaves evaluation).
    static func isReachable(_ row: Row) -> Bool {
        if row.failed && row.state < .ready { return false }
        if row.cancelled && row.state == .evaluatingConditions { return false }
        return true
    }

    @Test("B14 every state change the lifecycle makes is an edge of the documented lifecycle")
    func stateChangesFollowTheDocumentedGraph() {
        var undocumented: [String] = []
        for row in Self.table where Self.isReachable(row) {
            for (event, outcome) in zip(Event.allCases, row.outcomes) where outcome != "trap" {
                var lifecycle = row.lifecycle
                _ = Self.apply(event, to: &lifecycle)
                guard lifecycle.state != row.state else { continue }
                let change = "\(row.state)→\(lifecycle.state)"
                if !Self.documentedStateChanges.contains(change) {
                    undocumented.append("\(change) on \(event) (cancelled: \(row.cancelled))")
                }
            }
        }
        // dependenciesFinished from initialized (a procedure in no queue) traps, and start() from
        // pending is refused: a queue worker always moves a procedure out of pending first.
        #expect(undocumented == [], "transitions outside the documented lifecycle")
    }

    @Test("B13 a run without conditions: pending → ready → executing → finishing → finished")
    func plainRun() {
        var lifecycle = ProcedureLifecycle()
        let enqueued = lifecycle.enqueue()
        #expect(enqueued)
        #expect(lifecycle.state == .pending)
        #expect(lifecycle.dependenciesFinished(hasConditions: false) == .proceed)
        #expect(lifecycle.state == .ready)
        #expect(lifecycle.start() == .execute)
        #expect(lifecycle.state == .executing)
        #expect(lifecycle.finish() == .finish)
        #expect(lifecycle.state == .finishing)
        lifecycle.finished()
        #expect(lifecycle == ProcedureLifecycle(state: .finished, isCancelled: false))
    }

    @Test("B16 a run with conditions: evaluation between pending and ready; failed conditions skip execution")
    func runWithConditions() {
        for satisfied in [true, false] {
            var lifecycle = ProcedureLifecycle()
            _ = lifecycle.enqueue()
            #expect(lifecycle.dependenciesFinished(hasConditions: true) == .evaluateConditions)
            #expect(lifecycle.state == .evaluatingConditions)
            #expect(!lifecycle.acceptsConditions)
            let accepted = lifecycle.conditionsEvaluated(satisfied: satisfied)
            #expect(accepted)
            #expect(lifecycle.state == .ready)
            // The procedure is pushed back to its queue; the worker that takes it again proceeds.
            #expect(lifecycle.dependenciesFinished(hasConditions: true) == .proceed)
            #expect(lifecycle.start() == (satisfied ? .execute : .finishWithoutExecuting))
        }
    }

    @Test("C32 cancelled while evaluating: evaluation is abandoned and its late result ignored")
    func cancelDuringEvaluation() {
        var lifecycle = ProcedureLifecycle()
        _ = lifecycle.enqueue()
        _ = lifecycle.dependenciesFinished(hasConditions: true)
        #expect(lifecycle.cancel() == .abandonEvaluation)
        let lateResultAccepted = lifecycle.conditionsEvaluated(satisfied: true)
        #expect(!lateResultAccepted)
        #expect(lifecycle.dependenciesFinished(hasConditions: true) == .proceed)
        #expect(lifecycle.start() == .finishWithoutExecuting)
        lifecycle.finished()
        #expect(lifecycle == ProcedureLifecycle(state: .finished, isCancelled: true))
    }

    // MARK: Impossible events trap (run in a child process)

    @Test("dependenciesFinished while evaluating is an internal inconsistency: it traps")
    func dependenciesFinishedWhileEvaluatingTraps() async {
        await #expect(processExitsWith: .failure) {
            var lifecycle = ProcedureLifecycle(state: .evaluatingConditions, isCancelled: false)
            _ = lifecycle.dependenciesFinished(hasConditions: true)
        }
    }

    @Test("dependenciesFinished before enqueue is an internal inconsistency: it traps")
    func dependenciesFinishedBeforeEnqueueTraps() async {
        await #expect(processExitsWith: .failure) {
            var lifecycle = ProcedureLifecycle()
            _ = lifecycle.dependenciesFinished(hasConditions: false)
        }
    }

    @Test("finished() outside finishing is an internal inconsistency: it traps")
    func finishedOutsideFinishingTraps() async {
        await #expect(processExitsWith: .failure) {
            var lifecycle = ProcedureLifecycle(state: .executing, isCancelled: false)
            lifecycle.finished()
        }
    }
}
