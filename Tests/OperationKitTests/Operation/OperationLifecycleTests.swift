@testable import OperationKit
import OperationKitTestSupport
import Testing

/// Exhaustive, thread-free tests of the pure lifecycle: every state × cancelled flag × event.
@Suite("OperationLifecycle transition table", .offThePool)
struct OperationLifecycleTests {
    typealias State = OperationLifecycle.State

    enum Event: CaseIterable { case start, finish, cancel }

    struct Row {
        let state: State
        let cancelled: Bool
        let event: Event
        let newState: State
        let newCancelled: Bool
        let outcome: String
    }

    /// The whole table, written out by hand: (state, cancelled, event) → (state, cancelled, outcome).
    static let table: [Row] = [
        Row(state: .ready, cancelled: false, event: .start, newState: .executing, newCancelled: false, outcome: "execute"),
        Row(state: .ready, cancelled: true, event: .start, newState: .executing, newCancelled: true, outcome: "finishWithoutExecuting"),
        Row(state: .ready, cancelled: false, event: .finish, newState: .ready, newCancelled: false, outcome: "refuse notStarted"),
        Row(state: .ready, cancelled: true, event: .finish, newState: .ready, newCancelled: true, outcome: "refuse notStarted"),
        Row(state: .ready, cancelled: false, event: .cancel, newState: .ready, newCancelled: true, outcome: "runCancellationBlock"),
        Row(state: .ready, cancelled: true, event: .cancel, newState: .ready, newCancelled: true, outcome: "none"),
        Row(state: .executing, cancelled: false, event: .start, newState: .executing, newCancelled: false, outcome: "refuse alreadyStarted"),
        Row(state: .executing, cancelled: true, event: .start, newState: .executing, newCancelled: true, outcome: "refuse alreadyStarted"),
        Row(state: .executing, cancelled: false, event: .finish, newState: .finishing, newCancelled: false, outcome: "finalize"),
        Row(state: .executing, cancelled: true, event: .finish, newState: .finishing, newCancelled: true, outcome: "finalize"),
        Row(state: .executing, cancelled: false, event: .cancel, newState: .executing, newCancelled: true, outcome: "runCancellationBlock"),
        Row(state: .executing, cancelled: true, event: .cancel, newState: .executing, newCancelled: true, outcome: "none"),
        Row(state: .finishing, cancelled: false, event: .start, newState: .finishing, newCancelled: false, outcome: "refuse alreadyStarted"),
        Row(state: .finishing, cancelled: true, event: .start, newState: .finishing, newCancelled: true, outcome: "refuse alreadyStarted"),
        Row(state: .finishing, cancelled: false, event: .finish, newState: .finishing, newCancelled: false, outcome: "refuse alreadyFinished"),
        Row(state: .finishing, cancelled: true, event: .finish, newState: .finishing, newCancelled: true, outcome: "refuse alreadyFinished"),
        Row(state: .finishing, cancelled: false, event: .cancel, newState: .finishing, newCancelled: false, outcome: "none"),
        Row(state: .finishing, cancelled: true, event: .cancel, newState: .finishing, newCancelled: true, outcome: "none"),
        Row(state: .finished, cancelled: false, event: .start, newState: .finished, newCancelled: false, outcome: "refuse alreadyFinished"),
        Row(state: .finished, cancelled: true, event: .start, newState: .finished, newCancelled: true, outcome: "refuse alreadyFinished"),
        Row(state: .finished, cancelled: false, event: .finish, newState: .finished, newCancelled: false, outcome: "refuse alreadyFinished"),
        Row(state: .finished, cancelled: true, event: .finish, newState: .finished, newCancelled: true, outcome: "refuse alreadyFinished"),
        Row(state: .finished, cancelled: false, event: .cancel, newState: .finished, newCancelled: false, outcome: "none"),
        Row(state: .finished, cancelled: true, event: .cancel, newState: .finished, newCancelled: true, outcome: "none"),
    ]

    @Test("the table covers every state, flag and event exactly once")
    func tableIsComplete() {
        let keys = Self.table.map { "\($0.state)-\($0.cancelled)-\($0.event)" }
        #expect(Set(keys).count == keys.count)
        #expect(keys.count == State.allCases.count * 2 * Event.allCases.count)
    }

    @Test("every row", arguments: Self.table.indices)
    func row(_ index: Int) {
        let row = Self.table[index]
        var lifecycle = OperationLifecycle(state: row.state, isCancelled: row.cancelled)
        let outcome: String
        switch row.event {
        case .start:
            switch lifecycle.start() {
            case .execute: outcome = "execute"
            case .finishWithoutExecuting: outcome = "finishWithoutExecuting"
            case .refuse(let code): outcome = "refuse \(code)"
            }
        case .finish:
            switch lifecycle.finish() {
            case .finalize: outcome = "finalize"
            case .refuse(let code): outcome = "refuse \(code)"
            }
        case .cancel:
            switch lifecycle.cancel() {
            case .runCancellationBlock: outcome = "runCancellationBlock"
            case .none: outcome = "none"
            }
        }
        #expect(outcome == row.outcome)
        #expect(lifecycle.state == row.newState)
        #expect(lifecycle.isCancelled == row.newCancelled)
    }

    @Test("finalized moves finishing to finished and keeps the flag")
    func finalized() {
        for cancelled in [false, true] {
            var lifecycle = OperationLifecycle(state: .finishing, isCancelled: cancelled)
            lifecycle.finalized()
            #expect(lifecycle.state == .finished)
            #expect(lifecycle.isFinished)
            #expect(lifecycle.isCancelled == cancelled)
        }
    }

    @Test("derived flags per state")
    func flags() {
        let expected: [State: (ready: Bool, executing: Bool, finished: Bool, configurable: Bool)] = [
            .ready: (true, false, false, true),
            .executing: (false, true, false, false),
            .finishing: (false, true, false, false),
            .finished: (false, false, true, false),
        ]
        for state in State.allCases {
            let lifecycle = OperationLifecycle(state: state, isCancelled: false)
            let flags = expected[state]!
            #expect(lifecycle.isReady == flags.ready)
            #expect(lifecycle.isExecuting == flags.executing)
            #expect(lifecycle.isFinished == flags.finished)
            #expect(lifecycle.canConfigure == flags.configurable)
        }
    }
}
