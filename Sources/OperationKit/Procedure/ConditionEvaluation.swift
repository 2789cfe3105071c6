// The state behind a procedure's conditions: ConditionExtras, ConditionGate, ConditionEvaluation,
// the ProcedureTakenSignal its produced dependencies wait for, the first condition's and first
// observer's one-word slots, and NoCondition.

import Dispatch

/// What a procedure keeps about its conditions and observers beyond the usual single
/// `ClosureCondition` and single observer, in one object made when first needed (so that a
/// procedure without it pays one pointer). Every field is protected by the procedure's
/// `lock` (until the procedure lets go of it: see `markReleasedLocked`).
final class ConditionExtras: @unchecked Sendable {
    /// The conditions after the first, in evaluation order.
    var moreConditions: [any OperationCondition] = []
    /// How many of the conditions, at the front, are result injections (evaluated first).
    var injectionConditionCount = 0
    /// The observers after the first, in the order they were added.
    var moreObservers: [any OperationObserver] = []
    /// Parallel to the conditions once one may produce a dependency (else empty): each such
    /// condition's gate, closed until its produced dependencies have finished.
    var gates: [ConditionGate?] = []
    /// The operations the conditions produced, cancelled with the procedure.
    var produced: [ConcurrentOperation] = []
    /// What the dependencies produced before a worker took the procedure wait for.
    var takenSignal: ProcedureTakenSignal?
    /// The identities of the conditions after the first (the first's is in `FirstCondition`): a
    /// condition with one of these is not added again.
    var identities: Set<ConditionIdentity> = []
    /// What a worker waiting to start the procedure waits on, while adds made with
    /// `produce(_:before: .execute)` are under way (see `ProduceProgress.startRequested`).
    var startGate: DispatchSemaphore?
    /// The mailboxes of the observers with an event queue (see EventMailbox.swift), in the order
    /// the observers were added.
    var eventMailboxes: [EventMailbox] = []
}

/// An operation in no queue that finishes when a worker has taken its procedure to evaluate the
/// conditions (its own dependencies have then finished), or when the procedure is cancelled or
/// finished. The dependencies its conditions produce before then wait for it: if they could run
/// first, one that only a cancel ends could take every slot of the queue, and the procedure would
/// never get to evaluate the condition that fails and cancels it.
final class ProcedureTakenSignal: ConcurrentOperation, @unchecked Sendable {
    init(for procedure: String) {
        super.init(name: "\(procedure): taken to evaluate its conditions")
    }

    /// Finishes it (the first call; later ones do nothing).
    func fire() {
        // Started by hand, in no queue, with no dependency: `execute()` finishes it at once. A
        // second call is refused (already finished), which is what we want.
        try? start()
    }
}

extension ProcedureOperation {
    /// Under `lock`: see `ConditionExtras`.
    var conditionGates: [ConditionGate?] {
        get { conditionExtras?.gates ?? [] }
        set { extrasLocked.gates = newValue }
    }

    /// Under `lock`: the evaluation of several conditions (or of one behind a closed
    /// gate), while it runs.
    var conditionEvaluation: ConditionEvaluation? { conditionProgress.several }

    /// Under `lock`: every observer, in the order they were added.
    var observersLocked: [any OperationObserver] {
        observerTotal == 0 ? [] : [firstObserver.observer] + (conditionExtras?.moreObservers ?? [])
    }

    /// Under `lock`: whether some condition has a gate (a pointer test in the usual case).
    var hasGatesLocked: Bool {
        guard let extras = conditionExtras else { return false }
        return !extras.gates.isEmpty
    }

    /// Under `lock`: the operations the conditions produced, cancelled with the procedure.
    var producedDependencies: [ConcurrentOperation] { conditionExtras?.produced ?? [] }

    /// Under `lock`: the extras, made if need be.
    var extrasLocked: ConditionExtras {
        if let extras = conditionExtras { return extras }
        let extras = ConditionExtras()
        conditionExtras = extras
        return extras
    }

    /// Under `lock`: remembers produced dependencies (a cancel cancels them).
    func rememberProducedLocked(_ produced: [ConcurrentOperation]) {
        extrasLocked.produced.append(contentsOf: produced)
    }
}

/// Whether a condition that may produce dependencies may be evaluated: closed until they were
/// made and have all finished. Every field is protected by the owning procedure's `lock`.
final class ConditionGate: @unchecked Sendable {
    /// The condition's own dependencies (``OperationCondition/dependencies``), waited for but
    /// neither added to a queue nor cancelled. Immutable.
    let waitsFor: [ConcurrentOperation]
    /// Whether someone has begun to make the dependencies (they are made once).
    private(set) var isMade = false
    /// Produced dependencies not finished yet, plus one while they are being made.
    var remaining = 0

    /// Open: made, and every produced dependency finished.
    var isOpen: Bool { isMade && remaining == 0 }

    init(waitsFor: [ConcurrentOperation]) {
        self.waitsFor = waitsFor
    }

    /// The caller makes the dependencies, then calls `ProcedureOperation.finishMaking`.
    func beginMaking() {
        isMade = true
        remaining = 1
    }
}

/// The evaluation of several conditions of one procedure (or of one whose gate was closed).
/// Every field is protected by the procedure's `lock`; the conditions are called without
/// it, by the thread that holds `driving`.
final class ConditionEvaluation: @unchecked Sendable {
    let conditions: [any OperationCondition]
    /// Parallel to `conditions`, or empty if none has a gate.
    private let gates: [ConditionGate?]
    /// How many conditions at the front are result injections: every one of them must be
    /// satisfied before any other starts (the others may read the injected value).
    private let leadingCount: Int
    /// Per condition: 0 not started, 1 started, 2 answered.
    private var progress: [UInt8]
    /// The first condition that may not have started (those before it all have).
    private var firstUnstarted = 0
    private var satisfiedCount = 0
    private var decision: ConditionResult?
    /// The condition whose answer was the decision (a failure or ignore), or -1.
    private var decisionIndex = -1
    /// Whether a thread is driving the evaluation (see `ProcedureOperation.drive`).
    var driving = false
    /// The conditions whose dependencies the worker that made this evaluation makes first (a
    /// condition added while the queue added the procedure); only that worker touches it.
    var unmade: [(ConditionGate, any OperationCondition)] = []

    init(conditions: [any OperationCondition], gates: [ConditionGate?], leadingCount: Int) {
        self.conditions = conditions
        self.gates = gates
        self.leadingCount = leadingCount
        progress = Array(repeating: 0, count: conditions.count)
    }

    /// For snapshots: the conditions started and not answered yet, and those not started
    /// because their gate is closed (their produced dependencies have not finished), by index.
    var waitingIndices: (evaluating: [Int], gated: [Int]) {
        guard decision == nil else { return ([], []) }
        var evaluating: [Int] = []
        var gated: [Int] = []
        for index in progress.indices {
            if progress[index] == 1 {
                evaluating.append(index)
            } else if progress[index] == 0, !gates.isEmpty, let gate = gates[index], !gate.isOpen {
                gated.append(index)
            }
        }
        return (evaluating, gated)
    }

    /// For snapshots: the conditions not started because their gate is closed, with the
    /// unfinished-or-not own dependencies they wait for (those with none are left out).
    var gatedOwnDependencies: [(condition: any OperationCondition, waitsFor: [ConcurrentOperation])] {
        guard decision == nil, !gates.isEmpty else { return [] }
        return progress.indices.compactMap { index in
            guard progress[index] == 0, let gate = gates[index], !gate.isOpen, !gate.waitsFor.isEmpty else { return nil }
            return (conditions[index], gate.waitsFor)
        }
    }

    /// Whether a gate opening should resume it: nobody drives it and it is not decided.
    var mayResume: Bool { !driving && decision == nil }

    /// The decision, once there is one: the first failure or ignore, or every condition satisfied.
    func next() -> ConditionResult? {
        if let decision { return decision }
        if satisfiedCount == conditions.count { return .satisfied }
        return nil
    }

    /// The next condition to start, marked started: the first one added that has not started and
    /// whose gate is open — none after the leading (injection) ones until those are all
    /// satisfied; none once decided.
    func startNext() -> Int? {
        guard decision == nil else { return nil }
        while firstUnstarted < conditions.count && progress[firstUnstarted] != 0 { firstUnstarted += 1 }
        // (Nothing but satisfied answers so far: the leading ones are satisfied once as many are.)
        let end = satisfiedCount >= leadingCount ? conditions.count : leadingCount
        guard firstUnstarted < end else { return nil }
        for index in firstUnstarted..<end where progress[index] == 0 {
            if !gates.isEmpty, let gate = gates[index], !gate.isOpen { continue }
            progress[index] = 1
            return index
        }
        return nil
    }

    /// Records the answer of a started condition. Returns `false` for a second answer, or one
    /// after the decision.
    func record(_ result: ConditionResult, from index: Int) -> Bool {
        guard decision == nil, progress[index] == 1 else { return false }
        progress[index] = 2
        if case .satisfied = result {
            satisfiedCount += 1
        } else {
            decision = result
            decisionIndex = index
        }
        return true
    }

    /// Once decided (nothing changes then): the answers that counted, by condition, in the order
    /// the conditions were added — those that satisfied, and the one that decided otherwise.
    var answers: [(index: Int, result: ConditionResult)] {
        progress.indices.compactMap { index -> (index: Int, result: ConditionResult)? in
            if index == decisionIndex, let decision { return (index, decision) }
            return progress[index] == 2 ? (index, .satisfied) : nil
        }
    }
}

/// A procedure's first condition, in one word: a ``ClosureCondition`` (the usual one) inline, any
/// other in a box (an `any OperationCondition` inline would take five words in every procedure).
enum FirstCondition {
    case none
    case closure(ClosureCondition)
    case boxed(Box)

    final class Box: Sendable {
        let condition: any OperationCondition
        /// Its identity, asked before the procedure's lock was taken.
        let identity: ConditionIdentity?
        init(_ condition: any OperationCondition, identity: ConditionIdentity?) {
            self.condition = condition
            self.identity = identity
        }
    }

    init(_ condition: any OperationCondition, identity: ConditionIdentity?) {
        self = Self.slot(for: condition, identity: identity)
    }

    /// (Opened: a type comparison, cheaper than a dynamic cast, on the path of every procedure.)
    private static func slot<Condition: OperationCondition>(for condition: Condition, identity: ConditionIdentity?) -> FirstCondition {
        guard Condition.self == ClosureCondition.self else { return .boxed(Box(condition, identity: identity)) }
        return .closure(unsafeBitCast(condition, to: ClosureCondition.self))
    }

    /// The condition's identity (no user code: a closure condition's is its storage's).
    var identity: ConditionIdentity? {
        switch self {
        case .none: nil
        case .closure(let closure): closure.identity
        case .boxed(let box): box.identity
        }
    }

    var condition: any OperationCondition {
        switch self {
        case .none: NoCondition()
        case .closure(let closure): closure
        case .boxed(let box): box.condition
        }
    }

    /// Whether it is a ``ClosureCondition``.
    @inline(__always)
    var isClosure: Bool {
        if case .closure = self { return true }
        return false
    }

    /// A ``ClosureCondition``'s one reference, not retained (see
    /// ``ClosureCondition/unretainedStorage``); `nil` for any other.
    @inline(__always)
    var unretainedClosureStorage: Unmanaged<ClosureCondition.Storage>? {
        if case .closure(let closure) = self { return closure.unretainedStorage }
        return nil
    }
}

/// A procedure's first observer, in one word, like ``FirstCondition``: a ``ClosureObserver``
/// inline, any other in a box.
enum FirstObserver {
    case none
    case closure(ClosureObserver)
    case boxed(Box)

    final class Box: Sendable {
        let observer: any OperationObserver
        init(_ observer: any OperationObserver) { self.observer = observer }
    }

    init(_ observer: any OperationObserver) {
        self = Self.slot(for: observer)
    }

    /// (Opened: a type comparison, cheaper than a dynamic cast, on the path of every procedure.)
    private static func slot<Observer: OperationObserver>(for observer: Observer) -> FirstObserver {
        guard Observer.self == ClosureObserver.self else { return .boxed(Box(observer)) }
        return .closure(unsafeBitCast(observer, to: ClosureObserver.self))
    }

    /// Moves the observer out, leaving `.none`.
    @inline(__always)
    mutating func take() -> FirstObserver {
        let taken = self
        self = .none
        return taken
    }

    var observer: any OperationObserver {
        switch self {
        case .none: NoObserver()
        case .closure(let closure): closure
        case .boxed(let box): box.observer
        }
    }
}

/// What a procedure's initialiser stores before the base initialiser runs, for the usual case:
/// at most one condition, a ``ClosureCondition`` without dependencies, and at most one observer,
/// without an event queue and not wanting did attach — the inline slots, the counts and the
/// kinds, as `addCondition` and `addObserver` would leave them. Anything else is left to
/// `storeConditionsAtInit` and `attachObserversAtInit`, once the procedure is complete: then
/// nothing is stored here (`complete` is `false`).
enum InitialAttachments {
    typealias Stored = (
        condition: FirstCondition, conditionTotal: Int32, conditionKinds: UInt8, observer: FirstObserver, observerTotal: Int32,
        observedEvents: ProcedureEventKinds, complete: Bool
    )

    /// (Inlined into the initialisers: the seven results stay in registers, not packed into a
    /// returned tuple and unpacked.)
    @inline(__always)
    static func make(_ conditions: borrowing [any OperationCondition], _ observers: borrowing [any OperationObserver]) -> Stored {
        let conditionCount = conditions.count, observerCount = observers.count
        if conditionCount == 0 && observerCount == 0 { return (.none, 0, 0, .none, 0, [], true) }
        guard conditionCount <= 1, observerCount <= 1 else { return (.none, 0, 0, .none, 0, [], false) }
        var condition = FirstCondition.none
        if conditionCount == 1 {
            let closure = first(conditions, ifItIs: ClosureCondition.self, isValue: { isClosureCondition($0) })
            guard let closure, !closure.waitsForDependencies else {
                return (.none, 0, 0, .none, 0, [], false)
            }
            condition = .closure(closure)
        }
        // (No observer: then there is the one condition.)
        guard observerCount == 1 else { return (condition, 1, ConditionKinds.any, .none, 0, [], true) }
        let plain: (FirstObserver, ProcedureEventKinds)?
        if let closure = first(observers, ifItIs: ClosureObserver.self, isValue: { isClosureObserver($0) }) {
            let wanted = closure.observedEvents
            // (No event queue: a ClosureObserver has the default, none.)
            plain = wanted.contains(.didAttach) ? nil : (.closure(closure), wanted)
        } else {
            plain = plainOtherObserver(observers[0])
        }
        guard let (observer, events) = plain else { return (.none, 0, 0, .none, 0, [], false) }
        return (condition, Int32(conditionCount), conditionCount == 1 ? ConditionKinds.any : 0, observer, 1, events, true)
    }

    // The usual attachments, a ClosureCondition and a ClosureObserver, are recognised in the
    // array without opening its element: an existential of a protocol that is not class-bound is
    // three words of value buffer, then its type's metadata, then a witness table (Swift's ABI,
    // docs/ABI/TypeLayout.rst), and a value of one word that is bitwise takable — these two
    // structs, one reference each — lies inline at the start of the buffer. So one comparison
    // of a word with the type's metadata, and a load, instead of projecting the value and calling
    // a generic function with its metadata and witness table (about 25 instructions per
    // attachment; see Architecture.md). Any other type, or a layout other than this one (checked
    // below, and against the opened value in debug builds), goes the opened way.

    /// The first element of `elements` if it is a `Value` (``ClosureCondition`` or
    /// ``ClosureObserver``), retained. `isValue` is the opened way, for the debug check.
    @inline(__always)
    private static func first<Value, Existential>(
        _ elements: borrowing [Existential], ifItIs type: Value.Type, isValue: (Existential) -> Bool
    ) -> Value? {
        let found = elements.withUnsafeBufferPointer { buffer -> Value? in
            guard holdsInline(Value.self, in: Existential.self),
                let container = buffer.baseAddress.map(UnsafeRawPointer.init),
                container.load(fromByteOffset: metadataOffset, as: UnsafeRawPointer.self) == metadata(of: Value.self)
            else { return nil }
            return container.load(as: Value.self)
        }
        assert(isValue(elements[0]) == (found != nil), "an existential's layout was not the one expected")
        return found
    }

    /// Where an existential of a protocol that is not class-bound keeps its type's metadata.
    private static var metadataOffset: Int { 3 * MemoryLayout<UnsafeRawPointer>.stride }

    /// Whether an `Existential` holds a `Value` inline at its start, its metadata at
    /// `metadataOffset`: a container of three words and a witness table, and a value of one word.
    /// (Folded to a constant: the sizes are known when compiling.)
    @inline(__always)
    private static func holdsInline<Value, Existential>(_ value: Value.Type, in existential: Existential.Type) -> Bool {
        MemoryLayout<Existential>.size == metadataOffset + 2 * MemoryLayout<UnsafeRawPointer>.stride
            && MemoryLayout<Value>.size == MemoryLayout<UnsafeRawPointer>.size
            && MemoryLayout<Value>.alignment == MemoryLayout<UnsafeRawPointer>.alignment
    }

    /// The type's metadata, as the word an existential holds.
    @inline(__always)
    private static func metadata(of type: Any.Type) -> UnsafeRawPointer {
        unsafeBitCast(type, to: UnsafeRawPointer.self)
    }

    /// (For the debug check: the opened way.)
    private static func isClosureCondition<Condition: OperationCondition>(_ condition: Condition) -> Bool {
        Condition.self == ClosureCondition.self
    }

    /// (For the debug check: the opened way.)
    private static func isClosureObserver<Observer: OperationObserver>(_ observer: Observer) -> Bool {
        Observer.self == ClosureObserver.self
    }

    /// The slot and events of an observer of another type than ``ClosureObserver`` (opened: its
    /// `observedEvents` and `eventQueue`), if it has no event queue and does not want did attach.
    @inline(never)
    private static func plainOtherObserver<Observer: OperationObserver>(
        _ observer: Observer
    ) -> (FirstObserver, ProcedureEventKinds)? {
        let wanted = observer.observedEvents
        guard !wanted.contains(.didAttach), observer.eventQueue == nil else { return nil }
        return (FirstObserver(observer), wanted)
    }
}

/// The placeholder in a procedure's inline condition slot while it has none.
struct NoCondition: OperationCondition {
    func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        completion(.satisfied)
    }
}
