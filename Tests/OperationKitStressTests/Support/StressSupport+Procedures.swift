// Instruments of the procedure stress tests: the relaxed clock, StressFailure, the EventTrace
// a TracingObserver fills, WorkTally and DeferredCondition. General helpers: StressSupport.swift.

import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// Instruments for the procedure stress tests. Every counter here is a relaxed atomic: the tests
// must not add happens-before edges of their own, which would hide from the thread sanitizer a
// race that the library leaves unsynchronised. (Relaxed read-modify-writes of one atomic still
// follow happens-before: if A happens before B, A's tick is smaller.)

/// A process-wide tick counter with relaxed ticks: unique, and ordered consistently with
/// happens-before, so "started after that finished" is a comparison of ticks.
final class RelaxedClock: Sendable {
    private let value = Atomic<Int>(0)

    init() {}

    func tick() -> Int { value.add(1, ordering: .relaxed).newValue }
}

/// An error the stress tests give procedures, identifiable in their ``ProcedureOperation/errors``.
struct StressFailure: Error, Equatable {
    enum Origin: Int {
        /// `cancel(with:)` by a racing thread.
        case cancel = 1
        /// The work finished with it.
        case work = 2
        /// A condition failed with it.
        case condition = 3
        /// `cancel(with:)` after the procedure finished (must change nothing).
        case late = 4
    }

    let origin: Origin
    let id: Int

    /// A positive number unique to this failure.
    var code: Int { origin.rawValue * 100_000_000 + id + 1 }

    /// The code of `error`: a `StressFailure`'s, or 7 for any other error.
    static func code(of error: any Error) -> Int { (error as? StressFailure)?.code ?? 7 }

    /// An order-sensitive digest of `errors`, to compare lists seen at different times.
    static func signature(_ errors: [any Error]) -> Int {
        errors.reduce(17) { $0 &* 1_000_003 &+ code(of: $1) }
    }
}

/// What the observers of one procedure were told, recorded without locks.
///
/// Each event kind keeps how often it came and the position (in this procedure's own sequence of
/// events) of its first and last delivery. `inFlight` counts observer calls in progress for this
/// procedure: the contract says they never overlap, so `overlaps` must stay 0. Each call reads the
/// procedure's `state`, `isCancelled` and `isFinished`, which take the procedure's lock: a call made
/// while that lock is held would deadlock (and the test time out).
final class EventTrace: Sendable {
    enum Kind: Int, CaseIterable, CustomStringConvertible {
        case attach, willExecute, didExecute, didCancel, didProduce, willFinish, didFinish

        var description: String {
            switch self {
            case .attach: "attach"
            case .willExecute: "willExecute"
            case .didExecute: "didExecute"
            case .didCancel: "didCancel"
            case .didProduce: "didProduce"
            case .willFinish: "willFinish"
            case .didFinish: "didFinish"
            }
        }
    }

    final class Slot: Sendable {
        let count = Atomic<Int>(0)
        let first = Atomic<Int>(0)
        let last = Atomic<Int>(0)
        /// The `RelaxedClock` tick of the last delivery.
        let tick = Atomic<Int>(0)
    }

    private let slots: [Slot] = Kind.allCases.map { _ in Slot() }
    private let sequence = Atomic<Int>(0)
    private let inFlight = Atomic<Int>(0)
    private let overlapCount = Atomic<Int>(0)
    /// A bit per kind delivered in a state the contract rules out.
    private let wrongStateMask = Atomic<Int>(0)
    /// The first wrong state seen: `kind * 100 + state * 10 + (cancelled ? 1 : 0) + 1`, or 0.
    private let firstWrongState = Atomic<Int>(0)
    /// `StressFailure.code` of the error did-cancel carried: 0 for none, -1 if not told.
    private let cancelCode = Atomic<Int>(-1)
    /// Signatures of the errors will-finish and did-finish carried.
    private let willFinishSignature = Atomic<Int>(0)
    private let didFinishSignature = Atomic<Int>(0)

    init() {}

    func slot(_ kind: Kind) -> Slot { slots[kind.rawValue] }
    func count(_ kind: Kind) -> Int { slot(kind).count.load(ordering: .relaxed) }
    func first(_ kind: Kind) -> Int { slot(kind).first.load(ordering: .relaxed) }
    func last(_ kind: Kind) -> Int { slot(kind).last.load(ordering: .relaxed) }
    func tick(_ kind: Kind) -> Int { slot(kind).tick.load(ordering: .relaxed) }
    var events: Int { sequence.load(ordering: .relaxed) }
    var overlaps: Int { overlapCount.load(ordering: .relaxed) }
    var wrongStates: [Kind] {
        let mask = wrongStateMask.load(ordering: .relaxed)
        return Kind.allCases.filter { mask & (1 << $0.rawValue) != 0 }
    }
    /// The first delivery in a wrong state, described.
    var firstWrongStateDescription: String {
        let detail = firstWrongState.load(ordering: .relaxed) - 1
        guard detail >= 0, let kind = Kind(rawValue: detail / 100), let state = ProcedureState(rawValue: detail / 10 % 10)
        else { return "none" }
        return "\(kind) in state \(state), isCancelled \(detail % 10 == 1)"
    }
    var cancelErrorCode: Int { cancelCode.load(ordering: .relaxed) }
    var willFinishErrors: Int { willFinishSignature.load(ordering: .relaxed) }
    var didFinishErrors: Int { didFinishSignature.load(ordering: .relaxed) }

    /// What a procedure reports about itself during an observer call.
    struct Snapshot {
        let state: ProcedureState
        let isCancelled: Bool
        let isFinished: Bool
    }

    /// Records one delivery. `expected` judges what the procedure reports during the call.
    func record(
        _ kind: Kind, of procedure: ProcedureOperation, clock: RelaxedClock, expected: (Snapshot) -> Bool
    ) {
        if inFlight.add(1, ordering: .relaxed).newValue > 1 { overlapCount.add(1, ordering: .relaxed) }
        let snapshot = Snapshot(state: procedure.state, isCancelled: procedure.isCancelled, isFinished: procedure.isFinished)
        let position = sequence.add(1, ordering: .relaxed).newValue
        let slot = slot(kind)
        slot.count.add(1, ordering: .relaxed)
        _ = slot.first.compareExchange(expected: 0, desired: position, ordering: .relaxed)
        slot.last.store(position, ordering: .relaxed)
        slot.tick.store(clock.tick(), ordering: .relaxed)
        if !expected(snapshot) {
            wrongStateMask.bitwiseOr(1 << kind.rawValue, ordering: .relaxed)
            let detail = kind.rawValue * 100 + snapshot.state.rawValue * 10 + (snapshot.isCancelled ? 1 : 0) + 1
            _ = firstWrongState.compareExchange(expected: 0, desired: detail, ordering: .relaxed)
        }
        // Now and then stay a little, so that an overlapping call would be caught in the act.
        if position % 3 == 0 { sched_yield() }
        inFlight.subtract(1, ordering: .relaxed)
    }

    func recordCancelError(_ error: (any Error)?) {
        cancelCode.store(error.map(StressFailure.code(of:)) ?? 0, ordering: .relaxed)
    }

    func recordWillFinish(_ errors: [any Error]) {
        willFinishSignature.store(StressFailure.signature(errors), ordering: .relaxed)
    }

    func recordDidFinish(_ errors: [any Error]) {
        didFinishSignature.store(StressFailure.signature(errors), ordering: .relaxed)
    }

    /// What is wrong with the order and number of the events, for a procedure that was told
    /// did-attach once, first (its observer was added before it was enqueued). `executed`: whether
    /// its work ran. `nil` if nothing.
    func lifecycleViolation(executed: Bool) -> String? {
        var problems: [String] = []
        if count(.attach) != 1 || first(.attach) != 1 { problems.append("attach not once and first") }
        if count(.willFinish) != 1 { problems.append("willFinish \(count(.willFinish))×") }
        if count(.didFinish) != 1 { problems.append("didFinish \(count(.didFinish))×") }
        if last(.didFinish) != events { problems.append("didFinish not last") }
        if first(.willFinish) == 0 || first(.willFinish) > first(.didFinish) {
            problems.append("willFinish not before didFinish")
        }
        for kind in [Kind.willExecute, .didExecute, .didCancel, .didProduce] where count(kind) > 0 {
            if last(kind) > first(.willFinish) { problems.append("\(kind) after willFinish") }
        }
        if count(.didCancel) > 1 { problems.append("didCancel \(count(.didCancel))×") }
        let expectedExecutions = executed ? 1 : 0
        if count(.willExecute) != expectedExecutions || count(.didExecute) != expectedExecutions {
            problems.append("willExecute \(count(.willExecute))×, didExecute \(count(.didExecute))×, work ran \(executed)")
        } else if executed && first(.willExecute) > first(.didExecute) {
            problems.append("didExecute before willExecute")
        }
        if executed && count(.didCancel) == 1 && first(.didCancel) < first(.willExecute) {
            problems.append("didCancel before willExecute, yet the work ran")
        }
        if count(.didProduce) > 0 && (count(.willExecute) == 0 || first(.didProduce) < first(.willExecute)) {
            problems.append("didProduce outside execution")
        }
        if overlaps > 0 { problems.append("\(overlaps) overlapping observer calls") }
        if !wrongStates.isEmpty { problems.append("delivered in a wrong state: \(wrongStates) (first: \(firstWrongStateDescription))") }
        return problems.isEmpty ? nil : problems.joined(separator: "; ")
    }
}

/// An observer that records every event in an ``EventTrace`` and checks the state the procedure
/// reports meanwhile. `didFinish` runs last of all, after the trace is complete.
struct TracingObserver: OperationObserver {
    let trace: EventTrace
    let clock: RelaxedClock
    let willFinishHook: (@Sendable (ProcedureOperation) -> Void)?
    let didFinishHook: (@Sendable () -> Void)?

    init(
        trace: EventTrace, clock: RelaxedClock, willFinish: (@Sendable (ProcedureOperation) -> Void)? = nil,
        didFinish: (@Sendable () -> Void)? = nil
    ) {
        self.trace = trace
        self.clock = clock
        willFinishHook = willFinish
        didFinishHook = didFinish
    }

    func didAttach(to procedure: ProcedureOperation) {
        trace.record(.attach, of: procedure, clock: clock) { $0.state < .executing }
    }

    func willExecute(_ procedure: ProcedureOperation) {
        // Finishing: a finish from another thread (legal once the procedure executes) may come
        // while will-execute is being delivered; its will-finish then waits for this one.
        trace.record(.willExecute, of: procedure, clock: clock) { $0.state == .executing || $0.state == .finishing }
    }

    func didExecute(_ procedure: ProcedureOperation) {
        trace.record(.didExecute, of: procedure, clock: clock) { $0.state == .executing || $0.state == .finishing }
    }

    func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) {
        trace.recordCancelError(error)
        trace.record(.didCancel, of: procedure, clock: clock) { $0.state < .finished && $0.isCancelled }
    }

    func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        trace.record(.didProduce, of: procedure, clock: clock) { $0.state == .executing || $0.state == .finishing }
    }

    func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        trace.recordWillFinish(errors)
        trace.record(.willFinish, of: procedure, clock: clock) { $0.state == .finishing && !$0.isFinished }
        willFinishHook?(procedure)
    }

    func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        trace.recordDidFinish(errors)
        trace.record(.didFinish, of: procedure, clock: clock) { $0.state == .finished && $0.isFinished }
        didFinishHook?()
    }
}

/// What happened to one procedure's work, recorded without locks.
final class WorkTally: Sendable {
    let executions = Atomic<Int>(0)
    /// How many `finish` calls (of any thread) returned `true`.
    let finishWins = Atomic<Int>(0)
    /// How many of the work's own finishes (not stray ones) returned `true`.
    let workFinishWins = Atomic<Int>(0)
    let completions = Atomic<Int>(0)
    let startedAt = Atomic<Int>(0)
    let completedAt = Atomic<Int>(0)

    init() {}

    func recordStart(_ clock: RelaxedClock) {
        executions.add(1, ordering: .relaxed)
        startedAt.store(clock.tick(), ordering: .relaxed)
    }

    func recordFinish(_ won: Bool, byWork: Bool = false) {
        guard won else { return }
        finishWins.add(1, ordering: .relaxed)
        if byWork { workFinishWins.add(1, ordering: .relaxed) }
    }

    func recordCompletion(_ clock: RelaxedClock) {
        completions.add(1, ordering: .relaxed)
        completedAt.store(clock.tick(), ordering: .relaxed)
    }

    var executionCount: Int { executions.load(ordering: .relaxed) }
    var finishWinCount: Int { finishWins.load(ordering: .relaxed) }
    var workFinishWinCount: Int { workFinishWins.load(ordering: .relaxed) }
    var completionCount: Int { completions.load(ordering: .relaxed) }
    var started: Int { startedAt.load(ordering: .relaxed) }
    var completed: Int { completedAt.load(ordering: .relaxed) }
}

/// A condition decided later on another thread: satisfied, or failed with `failure`.
struct DeferredCondition: OperationCondition {
    let failure: StressFailure?
    let on: DispatchQueue

    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        let failure = self.failure
        on.async { completion(failure.map { .failed($0) } ?? .satisfied) }
    }
}
