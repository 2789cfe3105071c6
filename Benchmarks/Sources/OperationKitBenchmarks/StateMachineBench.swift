// Transitions per second of `StateMachine`, side by side with the floor: a plain enum and a
// `switch` doing the same checks under a pthread mutex.
//
// The machine is a 5-state cycle, idle → connecting → connected → closing → closed → idle, each
// state allowing only the next, plus one global state (`failed`) that is never requested. Every run
// makes `count` requests that walk the cycle, so all of them must succeed; the contended runs let
// four threads race through the cycle, where a request is refused or ignored when another thread
// moved the machine first, and check that every request was answered and that the final state
// matches the number of successful ones. See Benchmarks/README.md.

import Dispatch
import Foundation
import OperationKit
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The benchmark's states. `failed` is global and never requested.
enum Link: Hashable, Sendable {
    case idle, connecting, connected, closing, closed, failed
}

/// The cycle every run walks; request `i` goes to `cycle[(i + 1) % 5]`.
let linkCycle: [Link] = [.idle, .connecting, .connected, .closing, .closed]

/// The state after `successes` transitions along the cycle from `idle`.
func linkState(afterSuccesses successes: Int) -> Link {
    linkCycle[successes % linkCycle.count]
}

// MARK: - The floor

/// A `pthread_mutex_t` at a fixed address (the last element of a `ManagedBuffer`, as swift-nio's
/// `NIOLock` does), of the same kind as OperationKit's own lock: adaptive on Glibc.
final class FloorMutex: ManagedBuffer<Void, pthread_mutex_t> {
    static func make() -> FloorMutex {
        let buffer = FloorMutex.create(minimumCapacity: 1) { _ in () }
        let storage = unsafeDowncast(buffer, to: FloorMutex.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            mutex.initialize(to: pthread_mutex_t())
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            #if canImport(Glibc)
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
            #endif
            let result = pthread_mutex_init(mutex, &attributes)
            precondition(result == 0, "pthread_mutex_init failed with \(result)")
            pthread_mutexattr_destroy(&attributes)
        }
        return storage
    }

    @inline(__always)
    func lock() {
        withUnsafeMutablePointerToElements { _ = pthread_mutex_lock($0) }
    }

    @inline(__always)
    func unlock() {
        withUnsafeMutablePointerToElements { _ = pthread_mutex_unlock($0) }
    }

    deinit {
        withUnsafeMutablePointerToElements { mutex in
            pthread_mutex_destroy(mutex)
            mutex.deinitialize(count: 1)
        }
    }
}

/// What the floor's request led to.
enum FloorOutcome {
    case changed, ignored, refused
}

/// The floor: the current state in a plain enum, the legality check a `switch (current, target)`,
/// and the other checks `StateMachine` makes, in its order (suspended? current state final? same
/// state? allowed or global?), all under one lock/unlock per request. (An enum value is always
/// "registered", and there is no barrier to look up.)
final class FloorMachine: @unchecked Sendable {  // every field is read and written under `mutex`
    private let mutex = FloorMutex.make()
    private var current = Link.idle
    private var suspended = false

    var state: Link {
        mutex.lock()
        defer { mutex.unlock() }
        return current
    }

    func transition(to target: Link) -> FloorOutcome {
        mutex.lock()
        defer { mutex.unlock() }
        if suspended {
            return .refused
        }
        if Self.isFinal(current) || target == current {
            return .ignored
        }
        guard Self.isGlobal(target) || Self.allows(current, target) else {
            return .refused
        }
        current = target
        return .changed
    }

    private static func isFinal(_ state: Link) -> Bool {
        switch state {
        case .idle, .connecting, .connected, .closing, .closed, .failed: return false
        }
    }

    private static func isGlobal(_ state: Link) -> Bool {
        switch state {
        case .failed: return true
        case .idle, .connecting, .connected, .closing, .closed: return false
        }
    }

    private static func allows(_ from: Link, _ to: Link) -> Bool {
        switch (from, to) {
        case (.idle, .connecting), (.connecting, .connected), (.connected, .closing), (.closing, .closed),
             (.closed, .idle):
            return true
        default:
            return false
        }
    }
}

// MARK: - The machines

/// A counter for code the machine runs on one thread at a time (actions and completions of an
/// uncontended machine run on the requesting thread, one after the other), so it needs no atomics.
final class PlainCounter: @unchecked Sendable {  // only touched by the thread running transitions
    var value = 0
}

/// Outcome counts for completions that may run on any of the racing threads.
final class OutcomeCounts: Sendable {
    let changed = Atomic<Int>(0)
    let ignored = Atomic<Int>(0)
    let refused = Atomic<Int>(0)

    func record(_ outcome: StateMachine<Link>.Outcome) {
        switch outcome {
        case .success(.some):
            changed.wrappingAdd(1, ordering: .relaxed)
        case .success(.none):
            ignored.wrappingAdd(1, ordering: .relaxed)
        case .failure:
            refused.wrappingAdd(1, ordering: .relaxed)
        }
    }

    var total: Int {
        changed.load(ordering: .acquiring) + ignored.load(ordering: .acquiring) + refused.load(ordering: .acquiring)
    }
}

/// The benchmark machine: the cycle plus the global `failed`; with `counter`, one `afterEntering`
/// action per state that counts.
func makeLinkMachine(counting counter: PlainCounter? = nil) -> StateMachine<Link> {
    func define(_ state: Link, _ next: Link?) -> StateDefinition<Link> {
        let definition = StateDefinition(state, allowedTransitions: next.map { [$0] } ?? [])
        guard let counter else { return definition }
        return definition.afterEntering { _ in counter.value += 1 }
    }
    do {
        return try StateMachine<Link>(name: "bench") {
            define(.idle, .connecting)
            define(.connecting, .connected)
            define(.connected, .closing)
            define(.closing, .closed)
            define(.closed, .idle)
            define(.failed, nil).makeGlobal()
        }
    } catch {
        fail("could not build the benchmark state machine: \(error)")
    }
}

// MARK: - Contenders

/// One contender of the state-machine section: runs `count` requests on a fresh machine, checks the
/// result and returns the wall time in ms.
struct TransitionContender {
    let name: String
    /// Whether the floor of the comparison (ratios are computed against it).
    let isFloor: Bool
    let run: (_ count: Int) -> TransitionRun
}

/// One run of a contender: its wall time, and for the contended runs that count them, how many
/// requests changed the state.
struct TransitionRun {
    let milliseconds: Double
    var changed: Int?
}

/// Stops the process unless `actual` is `expected`.
private func check<T: Equatable>(_ actual: T, _ expected: T, _ what: @autoclosure () -> String) {
    if actual != expected {
        fail("\(what()): got \(actual), expected \(expected)")
    }
}

/// Requests between two reads of `state` in the fire-and-forget runs, which get no outcome. Prime, so
/// the reads fall on every position of the 5-state cycle.
private let checkpointInterval = 997

/// Single-threaded contenders, in the order they are printed.
func uncontendedTransitionContenders() -> [TransitionContender] {
    [
        TransitionContender(name: "floor: enum + switch + pthread mutex", isFloor: true) { count in
            let floor = FloorMachine()
            var changed = 0
            let start = ContinuousClock.now
            var next = 1
            for _ in 0..<count {
                if floor.transition(to: linkCycle[next]) == .changed {
                    changed += 1
                }
                next = next == 4 ? 0 : next + 1
            }
            let elapsed = start.duration(to: .now)
            check(changed, count, "floor: successful transitions")
            check(floor.state, linkState(afterSuccesses: count), "floor: final state")
            return TransitionRun(milliseconds: milliseconds(elapsed))
        },
        TransitionContender(name: "StateMachine fire-and-forget", isFloor: false) { count in
            let machine = makeLinkMachine()
            let start = ContinuousClock.now
            var next = 1
            var untilCheckpoint = checkpointInterval
            for index in 0..<count {
                machine.requestTransition(to: linkCycle[next])
                next = next == 4 ? 0 : next + 1
                // No outcome to count: read the state now and then (0.1% of the requests).
                untilCheckpoint -= 1
                if untilCheckpoint == 0 {
                    untilCheckpoint = checkpointInterval
                    check(machine.state, linkState(afterSuccesses: index + 1), "fire-and-forget: state after \(index + 1)")
                }
            }
            let elapsed = start.duration(to: .now)
            check(machine.state, linkState(afterSuccesses: count), "fire-and-forget: final state")
            return TransitionRun(milliseconds: milliseconds(elapsed))
        },
        TransitionContender(name: "StateMachine + completion", isFloor: false) { count in
            let machine = makeLinkMachine()
            let changed = PlainCounter()
            let completion: @Sendable (StateMachine<Link>.Outcome) -> Void = { outcome in
                if case .success(.some) = outcome {
                    changed.value += 1
                }
            }
            let start = ContinuousClock.now
            var next = 1
            for _ in 0..<count {
                machine.requestTransition(to: linkCycle[next], completion: completion)
                next = next == 4 ? 0 : next + 1
            }
            let elapsed = start.duration(to: .now)
            check(changed.value, count, "completion: successful transitions")
            check(machine.state, linkState(afterSuccesses: count), "completion: final state")
            return TransitionRun(milliseconds: milliseconds(elapsed))
        },
        TransitionContender(name: "StateMachine async/await", isFloor: false) { count in
            let machine = makeLinkMachine()
            let result = AsyncRunResult()
            let done = DispatchSemaphore(value: 0)
            Task.detached {
                var changed = 0
                let start = ContinuousClock.now
                var next = 1
                for _ in 0..<count {
                    do {
                        if try await machine.transition(to: linkCycle[next]) != nil {
                            changed += 1
                        }
                    } catch {
                        fail("async: transition refused: \(error)")
                    }
                    next = next == 4 ? 0 : next + 1
                }
                result.set(milliseconds(start.duration(to: .now)), changed: changed)
                done.signal()
            }
            done.wait()
            let (elapsed, changed) = result.get()
            check(changed, count, "async: successful transitions")
            check(machine.state, linkState(afterSuccesses: count), "async: final state")
            return TransitionRun(milliseconds: elapsed)
        },
        TransitionContender(name: "StateMachine + 1 afterEntering/state", isFloor: false) { count in
            let entered = PlainCounter()
            let machine = makeLinkMachine(counting: entered)
            let start = ContinuousClock.now
            var next = 1
            for _ in 0..<count {
                machine.requestTransition(to: linkCycle[next])
                next = next == 4 ? 0 : next + 1
            }
            let elapsed = start.duration(to: .now)
            check(entered.value, count, "actions: afterEntering calls")
            check(machine.state, linkState(afterSuccesses: count), "actions: final state")
            return TransitionRun(milliseconds: milliseconds(elapsed))
        },
    ]
}

/// What the async contender's task hands back to the waiting thread.
private final class AsyncRunResult: @unchecked Sendable {  // written before `done.signal()`, read after `done.wait()`
    private var elapsed = 0.0
    private var changed = 0

    func set(_ elapsed: Double, changed: Int) {
        self.elapsed = elapsed
        self.changed = changed
    }

    func get() -> (Double, Int) {
        (elapsed, changed)
    }
}

/// Number of racing threads in the contended runs.
let contendingThreads = 4

/// Runs `body(thread)` on `contendingThreads` new threads released together; returns the wall time
/// in ms from the release to the last one finishing.
private func race(_ body: @escaping @Sendable (_ thread: Int) -> Void) -> Double {
    let ready = DispatchSemaphore(value: 0)
    let go = DispatchSemaphore(value: 0)
    let finished = DispatchGroup()
    for thread in 0..<contendingThreads {
        finished.enter()
        let worker = Thread {
            ready.signal()
            go.wait()
            body(thread)
            finished.leave()
        }
        worker.start()
    }
    for _ in 0..<contendingThreads {
        ready.wait()
    }
    let start = ContinuousClock.now
    for _ in 0..<contendingThreads {
        go.signal()
    }
    finished.wait()
    return milliseconds(start.duration(to: .now))
}

/// Contended contenders: four threads each walk the cycle for count / 4 requests, at once.
func contendedTransitionContenders() -> [TransitionContender] {
    [
        TransitionContender(name: "floor, 4 threads", isFloor: true) { count in
            let floor = FloorMachine()
            let changed = Atomic<Int>(0)
            let answered = Atomic<Int>(0)
            let perThread = count / contendingThreads
            let elapsed = race { thread in
                var localChanged = 0
                var next = 1 + thread % 4
                for _ in 0..<perThread {
                    if floor.transition(to: linkCycle[next]) == .changed {
                        localChanged += 1
                    }
                    next = next == 4 ? 0 : next + 1
                }
                changed.wrappingAdd(localChanged, ordering: .relaxed)
                answered.wrappingAdd(perThread, ordering: .relaxed)
            }
            let successes = changed.load(ordering: .acquiring)
            check(answered.load(ordering: .acquiring), perThread * contendingThreads, "contended floor: requests answered")
            check(floor.state, linkState(afterSuccesses: successes), "contended floor: final state after \(successes) successes")
            return TransitionRun(milliseconds: elapsed, changed: successes)
        },
        TransitionContender(name: "StateMachine fire-and-forget, 4 threads", isFloor: false) { count in
            let machine = makeLinkMachine()
            let perThread = count / contendingThreads
            let elapsed = race { thread in
                var next = 1 + thread % 4
                for _ in 0..<perThread {
                    machine.requestTransition(to: linkCycle[next])
                    next = next == 4 ? 0 : next + 1
                }
            }
            // No outcomes to count: check the machine is idle again (a request made now runs at once,
            // so nothing is left running) and still in a state of the cycle.
            let settled = PlainCounter()
            machine.requestTransition(to: .failed) { outcome in
                if case .success(.some) = outcome { settled.value = 1 }
            }
            check(settled.value, 1, "contended fire-and-forget: a request after the race ran at once")
            check(machine.state, Link.failed, "contended fire-and-forget: final state")
            return TransitionRun(milliseconds: elapsed)
        },
        TransitionContender(name: "StateMachine + completion, 4 threads", isFloor: false) { count in
            let machine = makeLinkMachine()
            let counts = OutcomeCounts()
            let perThread = count / contendingThreads
            let completion: @Sendable (StateMachine<Link>.Outcome) -> Void = { counts.record($0) }
            let elapsed = race { thread in
                var next = 1 + thread % 4
                for _ in 0..<perThread {
                    machine.requestTransition(to: linkCycle[next], completion: completion)
                    next = next == 4 ? 0 : next + 1
                }
            }
            // A request queued behind a running one is run by that thread before its own call returns,
            // so once every racing thread has returned, every outcome must have been delivered.
            check(counts.total, perThread * contendingThreads, "contended completion: outcomes delivered")
            let successes = counts.changed.load(ordering: .acquiring)
            check(machine.state, linkState(afterSuccesses: successes), "contended completion: final state after \(successes) successes")
            return TransitionRun(milliseconds: elapsed, changed: successes)
        },
    ]
}

// MARK: - Measuring and reporting

/// One contender's median: its wall time in ms for `count` requests.
struct TransitionRow {
    let name: String
    let isFloor: Bool
    let median: Double
    let count: Int

    var perSecond: Double { Double(count) / (median / 1_000) }
    var nanosecondsPerTransition: Double { median * 1e6 / Double(count) }
}

/// How many requests a measured run of a contender makes: `count`, unless a budget is set and the
/// warm-up (`warmUpCount` requests in `warmUpMilliseconds`) predicts a longer run; then as many as fit
/// the budget, a multiple of 20 (whole cycles on every thread), at least a tenth of `count`.
func cappedCount(_ count: Int, budget: Double?, warmUpCount: Int, warmUpMilliseconds: Double) -> Int {
    guard let budget, warmUpMilliseconds > 0 else { return count }
    let fitting = Double(warmUpCount) * budget / warmUpMilliseconds
    guard fitting < Double(count) else { return count }
    return max(count / 10, Int(fitting) / 20 * 20)
}

/// Runs `contenders` once each as a warm-up (a tenth of `count`: the requests are all alike, so that is
/// enough to fault in code and metadata), then `runs` times taking turns, and prints one line each.
///
/// With a `budget` (ms, quick mode), a contender whose warm-up predicts a longer run than that makes
/// fewer requests; its rate and its ratio to the floor are per transition, so they stay comparable.
func measureTransitions(_ contenders: [TransitionContender], count: Int, runs: Int, budget: Double?) -> [TransitionRow] {
    let warmUpCount = count / 10
    let counts = contenders.map { contender in
        cappedCount(count, budget: budget, warmUpCount: warmUpCount,
                    warmUpMilliseconds: contender.run(warmUpCount).milliseconds)
    }
    var samples = Array(repeating: [TransitionRun](), count: contenders.count)
    for _ in 0..<runs {
        for (index, contender) in contenders.enumerated() {
            samples[index].append(contender.run(counts[index]))
        }
    }
    return contenders.indices.map { index in
        let contender = contenders[index]
        let runs = samples[index]
        let count = counts[index]
        let times = runs.map(\.milliseconds)
        let result = median(times)
        let name = contender.name.padding(toLength: 40, withPad: " ", startingAt: 0)
        let rate = format(Double(count) / (result / 1_000) / 1e6)
        var line = "  \(name) median \(format(result)) ms = \(rate) M/s  (\(runs.count) runs; "
            + "min \(format(times.min() ?? 0)), max \(format(times.max() ?? 0)))"
        if count != counts[0] {
            line += "; capped at \(count) requests per run"
        }
        let unchanged = runs.compactMap { run in run.changed.map { Double(count - $0) } }
        if !unchanged.isEmpty {
            line += "; refused or ignored: median \(Int(median(unchanged)))"
        }
        report(line)
        return TransitionRow(name: contender.name, isFloor: contender.isFloor, median: result, count: count)
    }
}

/// The rows as a Markdown table; the ratio is the contender's time per transition over the floor's (of
/// the same group).
func transitionTable(_ groups: [[TransitionRow]]) -> [String] {
    var lines = [
        "| contender | threads | requests/run | median ms | transitions/s | ns/transition | time / floor |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (group, rows) in groups.enumerated() {
        guard let floor = rows.first(where: \.isFloor) else { continue }
        for row in rows {
            let cells = [
                row.name,
                group == 0 ? "1" : "\(contendingThreads)",
                "\(row.count)",
                format(row.median),
                formatRate(row.perSecond),
                format(row.nanosecondsPerTransition, decimals: 1),
                format(row.nanosecondsPerTransition / floor.nanosecondsPerTransition),
            ]
            lines.append("| " + cells.joined(separator: " | ") + " |")
        }
    }
    return lines
}

/// `12.3 M` style, for transitions per second.
func formatRate(_ perSecond: Double) -> String {
    perSecond >= 1e6 ? "\(format(perSecond / 1e6)) M" : "\(format(perSecond / 1e3)) k"
}

/// The state-machine section: uncontended and contended groups, their table and the target line.
func stateMachineReport(sizes: Sizes) -> [String] {
    let count = sizes.transitions
    let budget = sizes.transitionRunBudget
    report("## State machine: \(count) transitions along a 5-state cycle")
    if let budget {
        report("  (quick mode: a contender whose warm-up predicts a run over \(Int(budget)) ms makes fewer requests)")
    }
    let uncontended = measureTransitions(uncontendedTransitionContenders(), count: count, runs: sizes.runs, budget: budget)
    report("## State machine, contended: \(contendingThreads) threads x \(count / contendingThreads) requests")
    let contended = measureTransitions(contendedTransitionContenders(), count: count, runs: sizes.runs, budget: budget)
    report()
    var lines = ["## State machine: transitions per second (median of \(sizes.runs) runs)", ""]
    lines += transitionTable([uncontended, contended])
    lines.append("")
    if let floor = uncontended.first(where: \.isFloor), let fireAndForget = uncontended.first(where: { !$0.isFloor }) {
        let ratio = fireAndForget.nanosecondsPerTransition / floor.nanosecondsPerTransition
        lines.append("StateMachine fire-and-forget, no actions, / floor: "
            + "\(format(fireAndForget.nanosecondsPerTransition, decimals: 1)) ns / "
            + "\(format(floor.nanosecondsPerTransition, decimals: 1)) ns per transition = \(format(ratio)) (target <= 3)")
    }
    lines.append("Contended rows race through the cycle: a request is refused or ignored when another thread moved")
    lines.append("the machine first (counts above). They are reported, not held to a target.")
    return lines
}
