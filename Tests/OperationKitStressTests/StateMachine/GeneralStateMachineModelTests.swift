import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// A model-based test of `StateMachine<State>`: random machines and random request sequences are
// run through the real machine and through `GSMModel`, a reference model written from the
// documented semantics (not from the library's `TransitionRules`), and every outcome, every
// action, barrier, dynamic-transition call, observer call and completion, the state, the
// suspension and `canTransition(to:)` are compared after each step.
//
// Everything here is prefixed `GSM` (general state machine): the stress target is one module.

// MARK: - Deterministic randomness

/// SplitMix64 with a modulo-based `below`, so a seed rebuilds the same machine and requests on
/// every platform and standard-library version.
struct GSMRandom {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in `0..<bound` (`bound` > 0).
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }

    /// `true` with probability `percent` / 100.
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }

    /// A value in `range`.
    mutating func inRange(_ range: ClosedRange<Int>) -> Int { range.lowerBound + below(range.count) }

    /// Shuffles `array` (Fisher–Yates, with ``below(_:)``).
    mutating func shuffle<Element>(_ array: inout [Element]) {
        guard array.count > 1 else { return }
        for index in stride(from: array.count - 1, to: 0, by: -1) {
            array.swapAt(index, below(index + 1))
        }
    }
}

// MARK: - Configuration, requests, outcomes, events

/// A barrier's answer in the model's tables.
enum GSMBarrierAnswer: Hashable, Sendable, CustomStringConvertible {
    case allow
    case deny
    case redirect(Int)

    var description: String {
        switch self {
        case .allow: "allow"
        case .deny: "deny"
        case .redirect(let state): "redirect(\(state))"
        }
    }

    var response: BarrierResponse<Int> {
        switch self {
        case .allow: .allow
        case .deny: .deny
        case .redirect(let state): .redirect(to: state)
        }
    }
}

/// A request to a machine.
enum GSMRequest: Hashable, Sendable, CustomStringConvertible {
    case transition(to: Int)
    case dynamic
    case suspend(to: Int)
    case resume
    case reset

    var description: String {
        switch self {
        case .transition(let target): "transition(to: \(target))"
        case .dynamic: "transition()"
        case .suspend(let target): "suspend(to: \(target))"
        case .resume: "resume()"
        case .reset: "reset()"
        }
    }
}

/// What a request led to, in a form both the model and the machine produce.
enum GSMOutcome: Hashable, Sendable, CustomStringConvertible {
    /// A quiet no-op (`nil`).
    case none
    case change(from: Int, to: Int, cause: StateTransition<Int>.Cause)
    /// A refusal: the code, the machine's state when refused, and the error's target.
    case failure(StateMachineErrorCode, state: Int?, target: Int?)

    init(_ transition: StateTransition<Int>?) {
        if let transition {
            self = .change(from: transition.from, to: transition.to, cause: transition.cause)
        } else {
            self = .none
        }
    }

    init(_ error: StateMachineError<Int>) {
        self = .failure(error.code, state: error.state, target: error.target)
    }

    init(_ outcome: StateMachine<Int>.Outcome) {
        switch outcome {
        case .success(let transition): self.init(transition)
        case .failure(let error): self.init(error)
        }
    }

    var description: String {
        switch self {
        case .none: "nil"
        case .change(let from, let to, let cause): "\(from)->\(to) (\(cause))"
        case .failure(let code, let state, let target):
            "\(code) (state \(state.map(String.init) ?? "nil"), target \(target.map(String.init) ?? "nil"))"
        }
    }
}

/// The machine as seen from inside a closure: its state and whether it is suspended.
struct GSMSnapshot: Hashable, Sendable, CustomStringConvertible {
    var state: Int
    var suspended: Bool

    var description: String { suspended ? "@\(state)s" : "@\(state)" }
}

/// Something the machine called, with what it saw.
enum GSMEvent: Hashable, Sendable, CustomStringConvertible {
    case barrier(of: Int, from: Int, GSMSnapshot)
    case dynamic(of: Int, GSMSnapshot)
    case machineBefore(from: Int, to: Int, GSMSnapshot)
    case machineAfter(from: Int, to: Int, GSMSnapshot)
    case beforeLeaving(state: Int, action: Int, other: Int, GSMSnapshot)
    case afterLeaving(state: Int, action: Int, other: Int, GSMSnapshot)
    case beforeEntering(state: Int, action: Int, other: Int, GSMSnapshot)
    case afterEntering(state: Int, action: Int, other: Int, GSMSnapshot)
    /// A follow-up request was made from inside an action of state `by`, or (`by` -1) from inside
    /// the completion handler of the step's request.
    case followUpIssued(by: Int, GSMRequest, GSMSnapshot)
    case observed(StateTransition<Int>, GSMSnapshot)
    /// A completion handler ran: the step's own request (`followUpOf` nil) or a follow-up
    /// requested by an action of state `followUpOf` (-1: by the step's completion handler).
    case completed(followUpOf: Int?, GSMOutcome, GSMSnapshot)
    /// The completion handler of the step's request returned.
    case completionReturned

    var description: String {
        switch self {
        case .barrier(let of, let from, let seen): "barrier[\(of)](from \(from))\(seen)"
        case .dynamic(let of, let seen): "dynamic[\(of)]\(seen)"
        case .machineBefore(let from, let to, let seen): "machineBefore(\(from),\(to))\(seen)"
        case .machineAfter(let from, let to, let seen): "machineAfter(\(from),\(to))\(seen)"
        case .beforeLeaving(let state, let action, let other, let seen): "beforeLeaving[\(state)#\(action)](\(other))\(seen)"
        case .afterLeaving(let state, let action, let other, let seen): "afterLeaving[\(state)#\(action)](\(other))\(seen)"
        case .beforeEntering(let state, let action, let other, let seen): "beforeEntering[\(state)#\(action)](\(other))\(seen)"
        case .afterEntering(let state, let action, let other, let seen): "afterEntering[\(state)#\(action)](\(other))\(seen)"
        case .followUpIssued(let by, let request, let seen): "followUp[\(by)] \(request)\(seen)"
        case .observed(let transition, let seen): "observed(\(transition))\(seen)"
        case .completed(let of, let outcome, let seen): "completed\(of.map { "[followUp \($0)]" } ?? "")(\(outcome))\(seen)"
        case .completionReturned: "completionReturned"
        }
    }
}

/// One machine's configuration, from which both the real machine and the model are built.
struct GSMConfig: Sendable, CustomStringConvertible {
    /// States are `0..<count` (3–8, sometimes 17–24 or 65–72); `count` and `count + 1` are never
    /// registered.
    var count: Int
    var options: StateMachineOptions
    var allowed: [[Int]]
    var isGlobal: [Bool]
    var isFinal: [Bool]
    /// Per target state, if it has a barrier: per `from` state, the answers it cycles through
    /// (the barrier's n-th call, counted per target, answers `answers[from][n % answers[from].count]`).
    var barriers: [[[GSMBarrierAnswer]]?]
    /// Per state, if it has a dynamic transition: the targets its calls cycle through.
    var dynamicPicks: [[Int]?]
    /// Per state, how many actions of each kind it has.
    var beforeEntering: [Int]
    var afterEntering: [Int]
    var beforeLeaving: [Int]
    var afterLeaving: [Int]
    /// Per state, requests made one after the other from inside an extra `afterEntering` action
    /// (after the recorded ones), at most ``followUpBudget`` per step in all.
    var followUps: [[GSMRequest]]
    var machineActions: Bool

    /// How many follow-up requests the actions may make per step (so they cannot loop).
    static let followUpBudget = 3

    var description: String {
        var lines = ["options \(options.rawValue), machine actions \(machineActions)"]
        for state in 0..<count {
            var parts = ["\(state): allowed \(allowed[state])"]
            if isGlobal[state] { parts.append("global") }
            if isFinal[state] { parts.append("final") }
            if let barrier = barriers[state] { parts.append("barrier \(barrier)") }
            if let picks = dynamicPicks[state] { parts.append("dynamic \(picks)") }
            parts.append("actions bE\(beforeEntering[state]) aE\(afterEntering[state]) bL\(beforeLeaving[state]) aL\(afterLeaving[state])")
            if !followUps[state].isEmpty { parts.append("followUps \(followUps[state])") }
            lines.append(parts.joined(separator: ", "))
        }
        return lines.joined(separator: "\n")
    }

    /// A random configuration obeying the machine's rules: final states have no allowed
    /// transitions, dynamic transition or leaving actions; allowed transitions name registered
    /// states only.
    static func random(_ rng: inout GSMRandom) -> GSMConfig {
        // Mostly 3–8 states; some machines above 16 (where the machine looks states up by hash
        // rather than by comparing) and above 64 (several words per row of the allowed matrix).
        let count = switch rng.below(100) {
        case 0..<6: rng.inRange(65...72)
        case 6..<20: rng.inRange(17...24)
        default: rng.inRange(3...8)
        }
        let unknown = count  // the first unregistered state
        var config = GSMConfig(
            count: count, options: [], allowed: [], isGlobal: [], isFinal: [], barriers: [], dynamicPicks: [],
            beforeEntering: [], afterEntering: [], beforeLeaving: [], afterLeaving: [], followUps: [],
            machineActions: rng.chance(50))
        if rng.chance(50) { config.options.insert(.sameStateIsError) }
        if rng.chance(50) { config.options.insert(.finalStateIsError) }
        // Some machines run no code at all, so the machine's quiet fast path is exercised too.
        let quiet = rng.chance(20)
        if quiet { config.machineActions = false }
        let allowedPercent = count > 8 ? rng.inRange(3...20) : rng.inRange(15...60)
        for state in 0..<count {
            let isFinal = rng.chance(state == 0 ? 3 : 12)
            config.isFinal.append(isFinal)
            config.isGlobal.append(rng.chance(20))
            var allowed: [Int] = []
            if !isFinal {
                for other in 0..<count where rng.chance(allowedPercent) { allowed.append(other) }
                // Listing a state twice, or itself, is legal.
                if !allowed.isEmpty && rng.chance(5) { allowed.append(allowed[rng.below(allowed.count)]) }
                rng.shuffle(&allowed)
            }
            config.allowed.append(allowed)
            if !quiet && rng.chance(35) {
                let variants = rng.inRange(1...3)
                config.barriers.append((0..<count).map { _ in
                    (0..<variants).map { _ in
                        switch rng.below(100) {
                        case 0..<45: .allow
                        case 45..<65: .deny
                        default: .redirect(rng.below(count + 1))  // sometimes unregistered
                        }
                    }
                })
            } else {
                config.barriers.append(nil)
            }
            if !isFinal && !quiet && rng.chance(50) {
                config.dynamicPicks.append((0..<rng.inRange(1...4)).map { _ in
                    rng.chance(8) ? unknown : rng.below(count)
                })
            } else {
                config.dynamicPicks.append(nil)
            }
            let hasActions = !quiet && rng.chance(60)
            config.beforeEntering.append(hasActions ? rng.below(3) : 0)
            config.afterEntering.append(hasActions ? rng.below(3) : 0)
            config.beforeLeaving.append(hasActions && !isFinal ? rng.below(3) : 0)
            config.afterLeaving.append(hasActions && !isFinal ? rng.below(3) : 0)
            config.followUps.append(!quiet && rng.chance(20)
                ? (0..<rng.inRange(1...2)).map { _ in GSMRequest.random(&rng, count: count) } : [])
        }
        return config
    }
}

extension GSMRequest {
    /// A random request, sometimes naming an unregistered state.
    static func random(_ rng: inout GSMRandom, count: Int) -> GSMRequest {
        switch rng.below(100) {
        case 0..<58: .transition(to: rng.below(count + 2))
        case 58..<74: .dynamic
        case 74..<83: .suspend(to: rng.below(count + 1))
        case 83..<94: .resume
        default: .reset
        }
    }
}

// MARK: - The reference model

/// The documented semantics of `StateMachine`, written from the documentation.
struct GSMModel {
    let config: GSMConfig
    private(set) var current = 0
    /// While suspended, the state `resume()` returns to.
    private(set) var resumeTo: Int?
    private var barrierCalls: [Int]
    private var dynamicCalls: [Int]
    /// Whether an observer is registered.
    var observing = false
    /// Follow-up requests the actions may still make in this step.
    var followUpBudget = 0
    /// Every change so far, in order (what a `changes` stream yields).
    private(set) var changes: [StateTransition<Int>] = []

    init(config: GSMConfig) {
        self.config = config
        barrierCalls = Array(repeating: 0, count: config.count)
        dynamicCalls = Array(repeating: 0, count: config.count)
    }

    var isSuspended: Bool { resumeTo != nil }
    var snapshot: GSMSnapshot { GSMSnapshot(state: current, suspended: isSuspended) }

    private func isRegistered(_ state: Int) -> Bool { state >= 0 && state < config.count }

    /// A random request for the next step, biased towards requests that change the state (out of
    /// a suspension, out of a final state, to a state allowed from here) so that runs do not
    /// spend most of their steps refused.
    func randomRequest(_ rng: inout GSMRandom) -> GSMRequest {
        if isSuspended && rng.chance(25) { return .resume }
        if config.isFinal[current] && rng.chance(25) { return .reset }
        if rng.chance(45) {
            let reachable = (0..<config.count).filter { config.isGlobal[$0] || config.allowed[current].contains($0) }
            if !reachable.isEmpty { return .transition(to: reachable[rng.below(reachable.count)]) }
        }
        return GSMRequest.random(&rng, count: config.count)
    }

    /// Whether a transition to `target` would pass the static checks (no barrier consulted).
    func canTransition(to target: Int) -> Bool {
        guard !isSuspended, !config.isFinal[current], isRegistered(target), target != current else { return false }
        return config.isGlobal[target] || config.allowed[current].contains(target)
    }

    /// Runs one request made from outside, and the follow-up requests made while it runs (queued
    /// behind it, first in first out). `withCompletion`: whether the request has a completion
    /// handler, which records a `completed` event, makes `completionFollowUp` if there is one,
    /// and records `completionReturned`. Returns its outcome and every event.
    mutating func run(
        _ request: GSMRequest, withCompletion: Bool, completionFollowUp: GSMRequest? = nil
    ) -> (GSMOutcome, [GSMEvent]) {
        var events: [GSMEvent] = []
        var queue: [(request: GSMRequest, followUpOf: Int?)] = []
        let outcome = execute(request, &events, &queue)
        if withCompletion {
            events.append(.completed(followUpOf: nil, outcome, snapshot))
            if let completionFollowUp {
                events.append(.followUpIssued(by: -1, completionFollowUp, snapshot))
                queue.append((completionFollowUp, -1))
            }
            events.append(.completionReturned)
        }
        var index = 0
        while index < queue.count {
            let (followUp, origin) = queue[index]
            index += 1
            let followUpOutcome = execute(followUp, &events, &queue)
            events.append(.completed(followUpOf: origin, followUpOutcome, snapshot))
        }
        return (outcome, events)
    }

    /// The model without follow-ups and events: the outcome of one request.
    mutating func outcome(of request: GSMRequest) -> GSMOutcome {
        var events: [GSMEvent] = []
        var queue: [(request: GSMRequest, followUpOf: Int?)] = []
        return execute(request, &events, &queue)
    }

    private enum Decision {
        case ignore
        case refuse(StateMachineErrorCode, target: Int?)
        case go(to: Int)
    }

    private mutating func execute(
        _ request: GSMRequest, _ events: inout [GSMEvent], _ queue: inout [(request: GSMRequest, followUpOf: Int?)]
    ) -> GSMOutcome {
        let decision: Decision
        var cause = StateTransition<Int>.Cause.transition
        switch request {
        case .transition(let target):
            decision = decide(target, &events)
        case .dynamic:
            if isSuspended {
                decision = .refuse(.suspended, target: nil)
            } else if config.isFinal[current] {
                decision = config.options.contains(.finalStateIsError) ? .refuse(.finalState, target: nil) : .ignore
            } else if let picks = config.dynamicPicks[current] {
                events.append(.dynamic(of: current, snapshot))
                let pick = picks[dynamicCalls[current] % picks.count]
                dynamicCalls[current] += 1
                decision = decide(pick, &events)
            } else {
                decision = .refuse(.dynamicTransitionNotDefined, target: nil)
            }
        case .suspend(let target):
            cause = .suspend
            if !isRegistered(target) {
                decision = .refuse(.unknownState, target: target)
            } else if config.isFinal[target] {
                decision = .refuse(.finalState, target: target)
            } else if isSuspended || config.isFinal[current] || target == current {
                decision = .ignore
            } else {
                decision = .go(to: target)
            }
        case .resume:
            cause = .resume
            decision = resumeTo.map { .go(to: $0) } ?? .ignore
        case .reset:
            cause = .reset
            decision = current == 0 && !isSuspended ? .ignore : .go(to: 0)
        }
        switch decision {
        case .ignore:
            return .none
        case .refuse(let code, let target):
            return .failure(code, state: current, target: target)
        case .go(let target):
            let from = current
            perform(from: from, to: target, cause: cause, &events, &queue)
            return .change(from: from, to: target, cause: cause)
        }
    }

    /// The preflight of a transition to `target`, after the suspended and final checks of a
    /// dynamic transition (repeating them is harmless: they cannot have changed).
    private mutating func decide(_ target: Int, _ events: inout [GSMEvent]) -> Decision {
        if isSuspended { return .refuse(.suspended, target: target) }
        if config.isFinal[current] {
            return config.options.contains(.finalStateIsError) ? .refuse(.finalState, target: target) : .ignore
        }
        guard isRegistered(target) else { return .refuse(.unknownState, target: target) }
        if target == current { return sameState(target) }
        var destination = target
        if let answers = config.barriers[target] {
            events.append(.barrier(of: target, from: current, snapshot))
            let variants = answers[current]
            let answer = variants[barrierCalls[target] % variants.count]
            barrierCalls[target] += 1
            switch answer {
            case .allow:
                break
            case .deny:
                return .refuse(.transitionDenied, target: target)
            case .redirect(let redirect):
                guard isRegistered(redirect) else { return .refuse(.unknownState, target: redirect) }
                if redirect == current { return sameState(redirect) }
                destination = redirect
            }
        }
        if config.isGlobal[destination] || config.allowed[current].contains(destination) {
            return .go(to: destination)
        }
        return .refuse(.illegalTransition, target: destination)
    }

    private func sameState(_ target: Int) -> Decision {
        config.options.contains(.sameStateIsError) ? .refuse(.alreadyInState, target: target) : .ignore
    }

    private mutating func perform(
        from: Int, to: Int, cause: StateTransition<Int>.Cause,
        _ events: inout [GSMEvent], _ queue: inout [(request: GSMRequest, followUpOf: Int?)]
    ) {
        let runsEntering = cause == .transition || cause == .suspend
        let runsLeaving = cause == .transition || cause == .resume
        let before = snapshot
        if cause == .transition && config.machineActions { events.append(.machineBefore(from: from, to: to, before)) }
        if runsLeaving {
            for action in 0..<config.beforeLeaving[from] {
                events.append(.beforeLeaving(state: from, action: action, other: to, before))
            }
        }
        if runsEntering {
            for action in 0..<config.beforeEntering[to] {
                events.append(.beforeEntering(state: to, action: action, other: from, before))
            }
        }
        current = to
        switch cause {
        case .transition: break
        case .suspend: resumeTo = from
        case .resume, .reset: resumeTo = nil
        }
        let after = snapshot
        if runsLeaving {
            for action in 0..<config.afterLeaving[from] {
                events.append(.afterLeaving(state: from, action: action, other: to, after))
            }
        }
        if runsEntering {
            for action in 0..<config.afterEntering[to] {
                events.append(.afterEntering(state: to, action: action, other: from, after))
            }
            for followUp in config.followUps[to] where followUpBudget > 0 {
                followUpBudget -= 1
                events.append(.followUpIssued(by: to, followUp, after))
                queue.append((followUp, to))
            }
        }
        if cause == .transition && config.machineActions { events.append(.machineAfter(from: from, to: to, after)) }
        let change = StateTransition(from: from, to: to, cause: cause)
        changes.append(change)
        if observing { events.append(.observed(change, after)) }
    }
}

// MARK: - The real machine, instrumented

/// A value behind a serial queue (`Synchronization.Mutex` is reported by the thread sanitizer on
/// Linux with Swift 6.3, see Lock.swift), usable from any thread.
final class GSMLocked<Value>: @unchecked Sendable {  // `value` is confined to `queue`
    private let queue = DispatchQueue(label: "GSMLocked")
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try queue.sync { try body(&value) }
    }

    var current: Value { queue.sync { value } }
}

/// A weak reference to the machine, for its own closures (a strong one would be a cycle).
final class GSMMachineRef: @unchecked Sendable {  // `machine` is set once, before any request is made
    weak var machine: StateMachine<Int>?

    init() {}

    /// The machine's state and suspension as seen now (state -1 if the machine is gone).
    func snapshot() -> GSMSnapshot {
        guard let machine else { return GSMSnapshot(state: -1, suspended: false) }
        return GSMSnapshot(state: machine.state, suspended: machine.isSuspended)
    }
}

/// What the instrumented machine's closures record, and the counters they share.
final class GSMTrace: Sendable {
    let ref = GSMMachineRef()
    private let events = GSMLocked<[GSMEvent]>([])
    private let barrierCalls: GSMLocked<[Int]>
    private let dynamicCalls: GSMLocked<[Int]>
    private let followUpBudget = GSMLocked(0)

    init(count: Int) {
        barrierCalls = GSMLocked(Array(repeating: 0, count: count))
        dynamicCalls = GSMLocked(Array(repeating: 0, count: count))
    }

    func record(_ event: GSMEvent) { events.withLock { $0.append(event) } }

    /// The events recorded since the last call.
    func take() -> [GSMEvent] { events.withLock { events in defer { events = [] }; return events } }

    /// Returns how many times `state`'s barrier was called before, and counts this call.
    func nextBarrierCall(_ state: Int) -> Int { barrierCalls.withLock { calls in defer { calls[state] += 1 }; return calls[state] } }

    func nextDynamicCall(_ state: Int) -> Int { dynamicCalls.withLock { calls in defer { calls[state] += 1 }; return calls[state] } }

    func setFollowUpBudget(_ budget: Int) { followUpBudget.withLock { $0 = budget } }

    /// Takes one follow-up from the budget; `false` if none is left.
    func claimFollowUp() -> Bool {
        followUpBudget.withLock { budget in
            guard budget > 0 else { return false }
            budget -= 1
            return true
        }
    }
}

extension GSMConfig {
    /// Builds the real machine, every closure recording into `trace`.
    func makeMachine(name: String, trace: GSMTrace) throws -> StateMachine<Int> {
        let ref = trace.ref
        var definitions: [StateDefinition<Int>] = []
        for state in 0..<count {
            var definition = StateDefinition(state, allowedTransitions: allowed[state])
            if isGlobal[state] { definition = definition.makeGlobal() }
            if isFinal[state] { definition = definition.makeFinal() }
            for action in 0..<beforeEntering[state] {
                definition = definition.beforeEntering { other in
                    trace.record(.beforeEntering(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            for action in 0..<afterEntering[state] {
                definition = definition.afterEntering { other in
                    trace.record(.afterEntering(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            for action in 0..<beforeLeaving[state] {
                definition = definition.beforeLeaving { other in
                    trace.record(.beforeLeaving(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            for action in 0..<afterLeaving[state] {
                definition = definition.afterLeaving { other in
                    trace.record(.afterLeaving(state: state, action: action, other: other, ref.snapshot()))
                }
            }
            if !followUps[state].isEmpty {
                let requests = followUps[state]
                definition = definition.afterEntering { _ in
                    guard let machine = ref.machine else { return }
                    for followUp in requests where trace.claimFollowUp() {
                        trace.record(.followUpIssued(by: state, followUp, ref.snapshot()))
                        machine.submit(followUp) { outcome in
                            trace.record(.completed(followUpOf: state, outcome, ref.snapshot()))
                        }
                    }
                }
            }
            if let answers = barriers[state] {
                definition = definition.withTransitionBarrier { from in
                    trace.record(.barrier(of: state, from: from, ref.snapshot()))
                    let call = trace.nextBarrierCall(state)
                    guard answers.indices.contains(from) else { return .deny }  // never: from is registered
                    return answers[from][call % answers[from].count].response
                }
            }
            if let picks = dynamicPicks[state] {
                definition = definition.withDynamicTransition {
                    trace.record(.dynamic(of: state, ref.snapshot()))
                    return picks[trace.nextDynamicCall(state) % picks.count]
                }
            }
            definitions.append(definition)
        }
        var beforeTransition: StateMachine<Int>.TransitionAction?
        var afterTransition: StateMachine<Int>.TransitionAction?
        if machineActions {
            beforeTransition = { from, to in trace.record(.machineBefore(from: from, to: to, ref.snapshot())) }
            afterTransition = { from, to in trace.record(.machineAfter(from: from, to: to, ref.snapshot())) }
        }
        let machine = try StateMachine(
            name: name, options: options, beforeTransition: beforeTransition, afterTransition: afterTransition,
            states: definitions)
        ref.machine = machine
        return machine
    }
}

extension StateMachine<Int> {
    /// Makes `request` with the completion-handler form; `completion` gets the outcome.
    func submit(_ request: GSMRequest, completion: @escaping @Sendable (GSMOutcome) -> Void) {
        switch request {
        case .transition(let target): requestTransition(to: target) { completion(GSMOutcome($0)) }
        case .dynamic: requestTransition(completion: { completion(GSMOutcome($0)) })
        case .suspend(let target): requestSuspend(to: target) { completion(GSMOutcome($0)) }
        case .resume: requestResume { completion(GSMOutcome($0)) }
        case .reset: requestReset { completion(GSMOutcome($0)) }
        }
    }

    /// Makes `request` without a completion handler.
    func submitWithoutCompletion(_ request: GSMRequest) {
        switch request {
        case .transition(let target): requestTransition(to: target, completion: nil)
        case .dynamic: requestTransition(completion: nil)
        case .suspend(let target): requestSuspend(to: target, completion: nil)
        case .resume: requestResume(completion: nil)
        case .reset: requestReset(completion: nil)
        }
    }

    /// Makes `request` with the async form.
    func outcome(of request: GSMRequest) async -> GSMOutcome {
        do throws(StateMachineError<Int>) {
            switch request {
            case .transition(let target): return GSMOutcome(try await transition(to: target))
            case .dynamic: return GSMOutcome(try await transition())
            case .suspend(let target): return GSMOutcome(try await suspend(to: target))
            case .resume: return GSMOutcome(await resume())
            case .reset: return GSMOutcome(await reset())
            }
        } catch {
            return GSMOutcome(error)
        }
    }
}

// MARK: - The test

/// Where `actual` first differs from `expected`, with a little context; `nil` if they are equal.
func gsmFirstDifference<Element: Equatable>(_ actual: [Element], _ expected: [Element]) -> String? {
    guard actual != expected else { return nil }
    let index = zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        ?? min(actual.count, expected.count)
    let context = max(0, index - 3)
    return "differs at element \(index) (of \(actual.count), expected \(expected.count)): "
        + "got \(actual[context..<min(actual.count, index + 3)]), expected \(expected[context..<min(expected.count, index + 3)])"
}

extension StressTests {
    @Suite("GeneralStateMachine against a reference model")
    struct GeneralStateMachineModel {
        /// How a step's request is made.
        enum Form: CustomStringConvertible {
            case completion, async, noCompletion

            var description: String {
                switch self {
                case .completion: "completion handler"
                case .async: "async"
                case .noCompletion: "no completion"
                }
            }
        }

        /// Machines per batch; the batches are the test's arguments.
        static let machinesPerBatch = Stress.count(24, minimum: 4)
        static let stepsPerMachine = Stress.count(300, minimum: 100)

        @Test("random machines and requests: outcomes, actions, state and canTransition match the model",
              .timeLimit(.minutes(3)), arguments: 0..<8)
        func randomMachines(batch: Int) async throws {
            var seen: [String: Int] = [:]
            for index in 0..<Self.machinesPerBatch {
                let seed = UInt64(batch * 10_000 + index + 1)
                try await runMachine(seed: seed, tally: &seen)
            }
            // The generator must reach every outcome and every kind of call, or the comparison
            // proves little.
            let required = ["alreadyInState", "transitionDenied", "illegalTransition", "dynamicTransitionNotDefined",
                            "finalState", "unknownState", "suspended", "nil", "transition", "suspend", "resume", "reset",
                            "redirected", "barrier", "dynamic", "followUp", "observed", "leaving", "entering"]
            let missing = required.filter { seen[$0, default: 0] == 0 }
            if !missing.isEmpty {
                // At full size every batch sees everything; a scaled-down run may not.
                Issue.record("batch \(batch) never saw \(missing); saw \(seen.sorted { $0.key < $1.key })",
                             severity: Stress.scale < 1 ? .warning : .error)
            }
        }

        /// Counts, by kind, what the model expected: outcomes (error codes, `nil`, change causes,
        /// `redirected`) and calls (barrier, dynamic, followUp, observed, leaving, entering).
        static func count(_ request: GSMRequest, _ outcome: GSMOutcome, _ events: [GSMEvent], into tally: inout [String: Int]) {
            switch outcome {
            case .none: tally["nil", default: 0] += 1
            case .failure(let code, _, _): tally["\(code)", default: 0] += 1
            case .change(_, let to, let cause):
                tally["\(cause)", default: 0] += 1
                if case .transition(let target) = request, target != to { tally["redirected", default: 0] += 1 }
            }
            for event in events {
                let kind = switch event {
                case .barrier: "barrier"
                case .dynamic: "dynamic"
                case .followUpIssued: "followUp"
                case .observed: "observed"
                case .beforeLeaving, .afterLeaving: "leaving"
                case .beforeEntering, .afterEntering: "entering"
                case .machineBefore, .machineAfter, .completed, .completionReturned: "other"
                }
                tally[kind, default: 0] += 1
            }
        }

        /// Runs one random machine, counting what happened into `tally`. Records an issue naming
        /// the seed and the step at the first mismatch, and stops there.
        func runMachine(seed: UInt64, tally: inout [String: Int]) async throws {
            var rng = GSMRandom(seed: seed)
            let config = GSMConfig.random(&rng)
            var model = GSMModel(config: config)
            let trace = GSMTrace(count: config.count)
            let name = "gsm-model-\(seed)"
            let observerStart = rng.chance(60) ? rng.below(Self.stepsPerMachine / 2) : Int.max
            let observerEnd = rng.chance(40) ? observerStart &+ rng.below(Self.stepsPerMachine) : Int.max
            var history: [String] = []
            var stepsRun = 0
            var machineReference: WeakRef?
            var changesStream: AsyncStream<StateTransition<Int>>?
            var statesStream: AsyncStream<Int>?
            var observation: StateObservation?

            func fail(_ step: Int, _ what: String) {
                Issue.record("""
                    seed \(seed), step \(step): \(what)
                    machine:
                    \(config)
                    last requests (oldest first):
                    \(history.suffix(12).joined(separator: "\n"))
                    """)
            }

            do {
                let machine = try config.makeMachine(name: name, trace: trace)
                machineReference = WeakRef(machine)
                changesStream = machine.changes
                statesStream = machine.stateUpdates
                steps: for step in 0..<Self.stepsPerMachine {
                    if step == observerStart {
                        observation = machine.observe { transition in trace.record(.observed(transition, trace.ref.snapshot())) }
                        model.observing = true
                    }
                    if step == observerEnd {
                        observation?.cancel()
                        model.observing = false
                    }
                    let request = model.randomRequest(&rng)
                    let form: Form = switch rng.below(100) {
                    case 0..<45: .completion
                    case 45..<85: .async
                    default: .noCompletion
                    }
                    // The completion handler sometimes makes a request too: it must be queued.
                    let completionFollowUp = form == .completion && rng.chance(25)
                        ? GSMRequest.random(&rng, count: config.count) : nil
                    let before = model.snapshot
                    model.followUpBudget = GSMConfig.followUpBudget
                    trace.setFollowUpBudget(GSMConfig.followUpBudget)
                    let (expected, expectedEvents) = model.run(
                        request, withCompletion: form == .completion, completionFollowUp: completionFollowUp)
                    Self.count(request, expected, expectedEvents, into: &tally)
                    var actual: GSMOutcome?
                    switch form {
                    case .completion:
                        let delivered = GSMLocked<[GSMOutcome]>([])
                        machine.submit(request) { outcome in
                            trace.record(.completed(followUpOf: nil, outcome, trace.ref.snapshot()))
                            delivered.withLock { $0.append(outcome) }
                            if let completionFollowUp, let machine = trace.ref.machine {
                                trace.record(.followUpIssued(by: -1, completionFollowUp, trace.ref.snapshot()))
                                machine.submit(completionFollowUp) { outcome in
                                    trace.record(.completed(followUpOf: -1, outcome, trace.ref.snapshot()))
                                }
                            }
                            trace.record(.completionReturned)
                        }
                        let outcomes = delivered.current
                        if outcomes.count != 1 {
                            fail(step, "\(request): the completion ran \(outcomes.count) times before the call returned "
                                + "(an idle machine without a transition queue completes synchronously)")
                            break steps
                        }
                        actual = outcomes[0]
                    case .async:
                        actual = await machine.outcome(of: request)
                    case .noCompletion:
                        machine.submitWithoutCompletion(request)
                    }
                    stepsRun = step + 1
                    history.append("\(step): \(before) \(request) [\(form)] -> \(actual?.description ?? "(\(expected))")")
                    if let actual, actual != expected {
                        fail(step, "\(request) [\(form)] in \(before): expected \(expected), got \(actual)")
                        break
                    }
                    let events = trace.take()
                    if events != expectedEvents {
                        fail(step, """
                            \(request) [\(form)] in \(before): calls differ
                            expected: \(expectedEvents)
                            actual:   \(events)
                            """)
                        break
                    }
                    let state = machine.state
                    let suspended = machine.isSuspended
                    if state != model.current || suspended != model.isSuspended {
                        fail(step, "\(request) [\(form)] in \(before): expected \(model.snapshot) after, got "
                            + "\(GSMSnapshot(state: state, suspended: suspended))")
                        break
                    }
                    for target in 0..<(config.count + 2) where machine.canTransition(to: target) != model.canTransition(to: target) {
                        fail(step, "after \(request) [\(form)], now \(model.snapshot): canTransition(to: \(target)) is "
                            + "\(machine.canTransition(to: target)), expected \(model.canTransition(to: target))")
                        break steps
                    }
                }
            }
            // The machine is gone: its streams have finished and hold every change, in order. (A
            // machine still alive is a leak; its streams would not finish, so do not read them.)
            observation?.cancel()  // harmless once the machine is gone
            guard machineReference?.isReleased == true else {
                Issue.record("seed \(seed): the machine was not released")
                return
            }
            if stepsRun == Self.stepsPerMachine {
                var streamed: [StateTransition<Int>] = []
                for await change in changesStream! { streamed.append(change) }
                if let difference = gsmFirstDifference(streamed, model.changes) {
                    Issue.record("seed \(seed): the changes stream \(difference)")
                }
                var states: [Int] = []
                for await state in statesStream! { states.append(state) }
                // A reset that only ends a suspension in the initial state (0 -> 0) is no new state.
                let expectedStates = [0] + model.changes.filter { $0.from != $0.to }.map(\.to)
                if let difference = gsmFirstDifference(states, expectedStates) {
                    Issue.record("seed \(seed): the stateUpdates stream \(difference)")
                }
            }
        }
    }
}
