import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// The general state machine model test (see GeneralStateMachineModelTests.swift): deterministic
// randomness, configurations, requests, outcomes and events.

// MARK: - Deterministic randomness

/// SplitMix64 with a modulo-based `below`, so a seed rebuilds the same machine and requests on
/// every platform and standard-library version.
struct GSMRandom {
    /// The stress target's SplitMix64 (StressSupport.swift) gives the bits; only `below` differs
    /// (modulo, not `Int.random(in:using:)`, whose use of the bits is the standard library's).
    private var bits: SplitMix64

    init(seed: UInt64) { bits = SplitMix64(seed: seed) }

    mutating func next() -> UInt64 { bits.next() }

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
