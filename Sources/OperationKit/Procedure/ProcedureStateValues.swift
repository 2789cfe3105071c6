// The value types behind a procedure's state beside its ProcedureLifecycle: event delivery, the
// evaluation of its conditions, produce calls holding a finish back, mutual exclusivity, flags.
//
// Each is a transition function in the manner of `ProcedureLifecycle`: it holds no lock and calls
// nothing; the procedure mutates it under `lock` and acts on what it returns outside the
// lock. Their cases leave out the combinations that cannot happen (events pending while nothing
// is delivered, a finish waiting for no produce, a decision without an evaluation…).

/// Who delivers a procedure's events: nobody, or one thread, which also delivers the events raised
/// meanwhile (`pending`) and — once did finish was queued (`deliveringThenRelease`) — lets go of
/// the observers when it is done. `deliveringWill`: the event in progress is will execute or will
/// finish (what `produce(_:before:)` accepts a token for on that thread). (Cases rather than
/// flags: the enum stays two words.)
enum EventDelivery {
    case idle
    case delivering(thread: ThreadIdentity, pending: [PendingEvent])
    case deliveringWill(thread: ThreadIdentity, pending: [PendingEvent])
    case deliveringThenRelease(thread: ThreadIdentity, pending: [PendingEvent])

    var isDelivering: Bool {
        if case .idle = self { return false }
        return true
    }

    /// Whether the calling thread is the one delivering.
    var isDeliveringOnCurrentThread: Bool {
        switch self {
        case .idle: false
        case .delivering(let thread, _), .deliveringWill(let thread, _), .deliveringThenRelease(let thread, _): thread.isCurrent()
        }
    }

    /// Whether the calling thread is delivering will execute or will finish now.
    var isDeliveringWillOnCurrentThread: Bool {
        if case .deliveringWill(let thread, _) = self { return thread.isCurrent() }
        return false
    }

    /// A thread raises an event: if nothing is being delivered it delivers it, and becomes the
    /// delivering thread (returns `true`); otherwise the event must be queued with ``enqueue(_:)``.
    /// `will`: the event is will execute or will finish.
    mutating func begin(on thread: @autoclosure () -> ThreadIdentity, will: Bool = false) -> Bool {
        guard case .idle = self else { return false }
        self = will ? .deliveringWill(thread: thread(), pending: []) : .delivering(thread: thread(), pending: [])
        return true
    }

    /// Queues an event for the thread delivering.
    mutating func enqueue(_ event: PendingEvent) {
        switch self {
        case .idle:
            preconditionFailure("Internal inconsistency: an event queued while none is being delivered")
        case .delivering(let thread, var pending):
            self = .idle  // the array is uniquely referenced again: appended in place
            pending.append(event)
            self = .delivering(thread: thread, pending: pending)
        case .deliveringWill(let thread, var pending):
            self = .idle
            pending.append(event)
            self = .deliveringWill(thread: thread, pending: pending)
        case .deliveringThenRelease(let thread, var pending):
            self = .idle
            pending.append(event)
            self = .deliveringThenRelease(thread: thread, pending: pending)
        }
    }

    /// Did finish was queued: the thread delivering lets go of the observers once it is done.
    /// Returns `false` if nothing is being delivered (the caller lets go itself).
    mutating func releaseAfterDelivery() -> Bool {
        switch self {
        case .idle:
            return false
        case .delivering(let thread, let pending), .deliveringWill(let thread, let pending):
            self = .deliveringThenRelease(thread: thread, pending: pending)
            return true
        case .deliveringThenRelease:
            return true
        }
    }

    /// Whether the thread delivering lets go of the observers when done, and no event is queued
    /// behind the one it is about to deliver (asked right after ``next()`` returned it).
    var releasesAfterLastEvent: Bool {
        if case .deliveringThenRelease(_, let pending) = self { return pending.isEmpty }
        return false
    }

    enum Next {
        /// Deliver this one, then ask again.
        case deliver(PendingEvent)
        /// Nothing is left: the delivery is over. `release`: let go of the observers.
        case ended(release: Bool)
    }

    /// The thread delivering asks for the next event, in the order they were raised; when none is
    /// left the delivery ends.
    mutating func next() -> Next {
        let release: Bool
        let thread: ThreadIdentity
        var pending: [PendingEvent]
        switch self {
        case .idle:
            preconditionFailure("Internal inconsistency: next event asked while none is being delivered")
        case .delivering(let current, let queued), .deliveringWill(let current, let queued):
            (release, thread, pending) = (false, current, queued)
        case .deliveringThenRelease(let current, let queued):
            (release, thread, pending) = (true, current, queued)
        }
        self = .idle
        if pending.isEmpty { return .ended(release: release) }
        let first = pending.removeFirst()
        if release {
            self = .deliveringThenRelease(thread: thread, pending: pending)
        } else if first.event.isWill {
            self = .deliveringWill(thread: thread, pending: pending)
        } else {
            self = .delivering(thread: thread, pending: pending)
        }
        return .deliver(first)
    }
}

/// The evaluation of a procedure's conditions: none running; one condition (the usual case: its
/// state lives here, no evaluation object) — the worker still starting it, with its answer if it
/// came meanwhile, or started; several (or one behind a gate), driven by a
/// ``ConditionEvaluation``; or decided. (The worker's "starting" is in the cases, not a flag, and
/// so is an answer that came while starting, rather than a `ConditionResult` payload: one word,
/// not nine bytes.)
enum ConditionProgress {
    case none
    /// The worker is starting the single condition; no answer yet.
    case oneStarting
    /// The single condition answered `.satisfied` while the worker was still starting it.
    case oneSatisfiedWhileStarting
    /// The single condition answered `.ignored` while the worker was still starting it.
    case oneIgnoredWhileStarting
    /// The single condition answered `.failed` while the worker was still starting it.
    case oneFailedWhileStarting(any Error)
    /// The worker has started the single condition; no answer yet.
    case oneStarted
    case several(ConditionEvaluation)
    /// Decided (one condition): later answers are ignored.
    case decided
    /// The worker evaluates the single ``ClosureCondition`` through the procedure's
    /// `firstCondition`, lent without a retain (`prepareSingleClosureCondition`): until the
    /// worker's next critical section ends the lend (``endLend()``), a finish does not let go
    /// of the condition, it moves it to ``oneLentAfterFinish(_:)``.
    case oneLent
    /// The procedure finished (cancelled while its worker evaluated the lent condition, then
    /// finished by another worker) before the lend ended: the condition, moved out of
    /// `firstCondition`, for the worker to let go of once done with it, without the lock
    /// (``takeLentAfterFinish()``).
    case oneLentAfterFinish(ClosureCondition)

    /// The worker starts evaluating a single condition.
    mutating func beginOne() {
        switch self {
        case .none, .oneStarting, .oneStarted, .decided, .oneLent:
            // (Usually `.none`. A case without a payload: overwritten without destroying it.)
            self = .oneStarting
        case .oneSatisfiedWhileStarting, .oneIgnoredWhileStarting, .oneFailedWhileStarting, .several,
             .oneLentAfterFinish:
            self = .oneStarting
        }
    }

    /// The worker starts evaluating the single ``ClosureCondition`` lent by the procedure
    /// (see ``oneLent``).
    mutating func beginLent() {
        switch self {
        case .none, .oneStarting, .oneStarted, .decided, .oneLent:
            // (As in `beginOne`.)
            self = .oneLent
        case .oneSatisfiedWhileStarting, .oneIgnoredWhileStarting, .oneFailedWhileStarting, .several,
             .oneLentAfterFinish:
            self = .oneLent
        }
    }

    /// In the worker's first critical section after it asked the lent condition: the lend ends
    /// (the progress is then what ``beginOne()`` leaves, as when the worker held a copy). A
    /// condition moved out by a finish meanwhile stays, for ``takeLentAfterFinish()``.
    @inline(__always)
    mutating func endLend() {
        if case .oneLent = self { self = .oneStarting }
    }

    /// The lent condition that a finish moved out (see ``oneLentAfterFinish(_:)``), if it did,
    /// leaving `.none`.
    mutating func takeLentAfterFinish() -> ClosureCondition? {
        guard case .oneLentAfterFinish(let condition) = self else { return nil }
        self = .none
        return condition
    }

    /// The answer that came while the worker was starting the single condition, if it came.
    var answerWhileStarting: ConditionResult? {
        switch self {
        case .oneSatisfiedWhileStarting: .satisfied
        case .oneIgnoredWhileStarting: .ignored
        case .oneFailedWhileStarting(let error): .failed(error)
        case .none, .oneStarting, .oneStarted, .several, .decided, .oneLent, .oneLentAfterFinish: nil
        }
    }

    /// The worker has started the single condition. Returns its answer if it came meanwhile (the
    /// worker acts on it); otherwise the answer, when it comes, is acted on by its thread.
    /// (Nothing is returned if the procedure let go of its conditions meanwhile: cancelled and
    /// finished by another worker while this one was starting the condition.)
    mutating func startedOne() -> ConditionResult? {
        switch self {
        case .oneStarting:
            self = .oneStarted
            return nil
        case .oneSatisfiedWhileStarting, .oneIgnoredWhileStarting, .oneFailedWhileStarting:
            let decision = answerWhileStarting
            self = .decided
            return decision
        case .none, .oneStarted, .several, .decided, .oneLent, .oneLentAfterFinish:
            return nil
        }
    }

    enum Answer: Equatable {
        /// A second answer, or one while no single condition is evaluated: ignored.
        case ignored
        /// Recorded for the worker, which is still starting the condition.
        case recorded
        /// The caller acts on the decision.
        case decide
    }

    /// The single condition answered.
    mutating func answeredOne(_ result: ConditionResult) -> Answer {
        switch self {
        case .oneStarting:
            switch result {
            case .satisfied: self = .oneSatisfiedWhileStarting
            case .ignored: self = .oneIgnoredWhileStarting
            case .failed(let error): self = .oneFailedWhileStarting(error)
            }
            return .recorded
        case .oneStarted:
            self = .decided
            return .decide
        case .none, .oneSatisfiedWhileStarting, .oneIgnoredWhileStarting, .oneFailedWhileStarting, .several, .decided,
             .oneLent, .oneLentAfterFinish:
            return .ignored
        }
    }

    /// The evaluation of several conditions, while it runs.
    var several: ConditionEvaluation? {
        if case .several(let evaluation) = self { return evaluation }
        return nil
    }
}

/// The `produce(_:)` calls (and a group's adds before its execution) adding their operation, and
/// whether a finish — or the start, for adds made before it — waits for them.
struct ProduceProgress: Hashable {
    /// 0: no call is adding its operation. Otherwise at least one is: their count in the low 30
    /// bits (never 0 then), and in the top two what waits for them (``ProduceWaits``). (Packed:
    /// four bytes.)
    private var bits: UInt32

    private static let countMask: UInt32 = (1 << 30) - 1

    /// No call is adding its operation.
    static let none = ProduceProgress(bits: 0)

    /// `count` ≥ 1 calls adding their operation, `waits` waiting for them.
    static func adding(count: UInt32, waits: ProduceWaits) -> ProduceProgress {
        ProduceProgress(bits: count | UInt32(waits.rawValue) << 30)
    }

    /// Whether some call is adding its operation.
    var isAdding: Bool { bits != 0 }

    private var parts: (count: UInt32, waits: ProduceWaits)? {
        guard bits != 0 else { return nil }
        return (bits & Self.countMask, ProduceWaits(rawValue: UInt8(bits >> 30)))
    }

    /// A `produce(_:)` begins adding its operation.
    mutating func begin() {
        guard let (count, waits) = parts else {
            self = .adding(count: 1, waits: [])
            return
        }
        precondition(count < Self.countMask, "Internal inconsistency: too many adds under way")
        self = .adding(count: count + 1, waits: waits)
    }

    /// A finish counted. Returns whether it must wait (the last `produce` completes it).
    mutating func finishRequested() -> Bool {
        guard let (count, waits) = parts else { return false }
        self = .adding(count: count, waits: waits.union(.finish))
        return true
    }

    /// A worker would start the procedure. Returns whether it must wait for the adds (the last
    /// one signals it).
    mutating func startRequested() -> Bool {
        guard let (count, waits) = parts else { return false }
        self = .adding(count: count, waits: waits.union(.start))
        return true
    }

    /// A `produce(_:)` is done. Returns whether it completes the finish that waited for it, and
    /// whether it lets the waiting start go on.
    mutating func end() -> (finish: Bool, start: Bool) {
        guard let (count, waits) = parts else {
            preconditionFailure("Internal inconsistency: a produce ended while none was adding")
        }
        if count > 1 {
            self = .adding(count: count - 1, waits: waits)
            return (false, false)
        }
        self = .none
        return (waits.contains(.finish), waits.contains(.start))
    }
}

/// What waits for the adds under way (see ``ProduceProgress``): two bits.
struct ProduceWaits: OptionSet, Hashable {
    let rawValue: UInt8
    /// A finish came while they were adding: the last one completes it.
    static let finish = ProduceWaits(rawValue: 1 << 0)
    /// A worker waits to start the procedure: the last one lets it go on.
    static let start = ProduceWaits(rawValue: 1 << 1)
}

/// A procedure's ``MutuallyExclusive`` categories: never asked for, asked for (waiting to be
/// granted, or withdrawn by a cancel), held, or given back once it finished.
enum ExclusivityProgress: Hashable {
    case none
    case requested
    case held
    case released

    /// Whether it asked (so that a cancel may withdraw a waiting request).
    var wasRequested: Bool { self != .none }

    mutating func request() {
        if self == .none { self = .requested }
    }

    /// Granted (at once, or later on the thread that released the categories).
    mutating func grant() {
        if self == .requested { self = .held }
    }

    /// The procedure finished. Returns whether it held categories, to give back.
    mutating func release() -> Bool {
        guard self == .held else { return false }
        self = .released
        return true
    }
}

/// The procedure's independent yes/no facts, in one byte.
struct ProcedureFlags: OptionSet, Hashable {
    let rawValue: UInt8

    /// See ``ProcedureOperation/finishesWhenCancelled``.
    static let finishesWhenCancelled = ProcedureFlags(rawValue: 1 << 0)
    /// A queue has claimed the procedure: a condition added from then on makes its dependency at
    /// once (see `addCondition`).
    static let conditionDependenciesMade = ProcedureFlags(rawValue: 1 << 1)
    /// A finish called after a cancel, before the procedure executed, counted: its errors were
    /// kept for the finish without executing, and later finishes are ignored.
    static let finishKeptBeforeExecuting = ProcedureFlags(rawValue: 1 << 2)
    /// The instrument was told the procedure is ready (a worker took it the first time).
    static let readyTold = ProcedureFlags(rawValue: 1 << 3)
    /// A quick finish (see `beginQuickFinishLocked`): the base finish step has nothing to take
    /// for did finish — nothing to tell or let go of (a plain finish), or the quick finish took
    /// it in the same critical section, just before.
    static let finishTaken = ProcedureFlags(rawValue: 1 << 4)
    /// A `ResultProcedure<Void>` finished with its value, `()`: its output, set as a bit rather
    /// than in the `ProcedureOutcome` (which it then need not make), and which the quick finish
    /// of its own `execute()` (see `ResultProcedure.finishAsLastStepWithVoid`) sets directly.
    static let voidOutput = ProcedureFlags(rawValue: 1 << 5)
}
