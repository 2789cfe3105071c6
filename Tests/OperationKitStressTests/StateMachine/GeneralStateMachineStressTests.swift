import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

// Storms of concurrent requests on one `StateMachine<Int>`: from 8 threads at once with completion
// handlers, and from thousands of child tasks with async/await, with re-entrant requests made from
// inside actions, without a transition queue, with a serial one and with a concurrent one.
//
// The machine (states 0…4, 5 is never registered):
//
//     0 → 1, 2      1 → 2, 3 (dynamic: cycles through `dynamicPicks`)      2 → 3, 4, 0
//     3 → 4, 0 (barrier: denies from 1)      4 → 0, 1 (global; barrier: redirects 3 → 0)
//
// Every state has the four kinds of actions, and the machine has before/after actions; every one
// checks that no other action runs at the same time, that the machine's state is the one it must
// be at that point, and (with a transition queue) that it runs on the queue. Entering state 2 also
// makes up to two requests from inside the action (1,000 in all), which must be queued.
//
// Afterwards: every request completed exactly once; each thread's requests completed in the order
// it made them; the changes, in completion order, form one chain that the observer saw; replayed
// in completion order through the reference model (`GSMModel`), every outcome is the model's; and
// observers and streams that joined mid-storm saw an unbroken stretch (or suffix) of the history.

/// Which thread runs the storm's transitions.
enum GSMStormMode: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// No transition queue: the requesting thread (or the one already running transitions).
    case immediate
    /// A serial transition queue.
    case serialQueue
    /// A concurrent dispatch queue as the transition queue.
    case concurrentQueue

    var testDescription: String { rawValue }

    func makeQueue() -> DispatchQueue? {
        switch self {
        case .immediate: nil
        case .serialQueue: DispatchQueue(label: "gsm-storm.serial")
        case .concurrentQueue: DispatchQueue(label: "gsm-storm.concurrent", attributes: .concurrent)
        }
    }
}

/// The storm machine's configuration, for the reference model, and its requests.
enum GSMStorm {
    static let count = 5
    /// What state 1's dynamic transition returns, call after call: allowed, same state, denied by
    /// 3's barrier, global, illegal.
    static let dynamicPicks = [2, 1, 3, 4, 0, 3]

    static let config = GSMConfig(
        count: count, options: [.sameStateIsError],
        allowed: [[1, 2], [2, 3], [3, 4, 0], [4, 0], [0, 1]],
        isGlobal: [false, false, false, false, true],
        isFinal: Array(repeating: false, count: count),
        barriers: [nil, nil, nil,
                   (0..<count).map { from in [from == 1 ? .deny : .allow] },
                   (0..<count).map { from in [from == 3 ? .redirect(0) : .allow] }],
        dynamicPicks: [nil, dynamicPicks, nil, nil, nil],
        beforeEntering: Array(repeating: 0, count: count), afterEntering: Array(repeating: 0, count: count),
        beforeLeaving: Array(repeating: 0, count: count), afterLeaving: Array(repeating: 0, count: count),
        followUps: Array(repeating: [], count: count), machineActions: false)

    /// The codes a storm request may fail with.
    static let expectedCodes: Set<StateMachineErrorCode> = [
        .illegalTransition, .transitionDenied, .alreadyInState, .suspended, .dynamicTransitionNotDefined, .unknownState,
    ]

    /// The request with number `id` (a pure function of `id`).
    static func request(_ id: Int) -> GSMRequest {
        var rng = GSMRandom(seed: UInt64(id) &* 0x2545_F491_4F6C_DD1D)
        switch rng.below(100) {
        case 0..<70: return .transition(to: rng.below(count))
        case 70..<72: return .transition(to: count)  // unregistered
        case 72..<82: return .dynamic
        case 82..<86: return .suspend(to: rng.below(count))
        case 86..<94: return .resume
        default: return .reset
        }
    }

    /// Whether `change` is a possible answer to `request` (the target, or the redirect 3 → 4 ⇒ 0).
    static func fits(_ change: StateTransition<Int>, _ request: GSMRequest) -> Bool {
        switch request {
        case .transition(let target):
            change.cause == .transition && (change.to == target || (target == 4 && change.from == 3 && change.to == 0))
        case .dynamic: change.cause == .transition && change.from == 1
        case .suspend(let target): change.cause == .suspend && change.to == target
        case .resume: change.cause == .resume
        case .reset: change.cause == .reset && change.to == 0
        }
    }
}

/// The calling thread's identity.
enum GSMThreadID {
    #if canImport(Darwin)
    static var current: UInt { UInt(bitPattern: pthread_self()) }
    #else
    static var current: UInt { UInt(pthread_self()) }
    #endif
}

/// A boolean flag for any thread.
final class GSMFlag: Sendable {
    private let value = Atomic<Bool>(false)

    init() {}

    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

/// A key marking the transition queue, to check that code runs on it.
final class GSMQueueKey: @unchecked Sendable {  // DispatchSpecificKey is immutable after init
    let key = DispatchSpecificKey<Int>()

    init() {}
}

/// What the storm machine's closures check and record.
final class GSMStormProbe: Sendable {
    let ref = GSMMachineRef()
    private let queueKey: GSMQueueKey?
    /// Requests made from inside actions: at most this many, numbered after the storm's own.
    let reentrantLimit: Int
    let firstReentrantID: Int

    /// Actions (and barriers, dynamic transitions) running right now.
    private let actionsInFlight = Atomic<Int>(0)
    /// Between a transition's `beforeTransition` and its `afterTransition`.
    private let transitionOpen = Atomic<Bool>(false)
    /// Two actions at once, two transitions at once, or an observer or completion during a
    /// transition.
    let overlaps = Atomic<Int>(0)
    /// An action that saw the machine in another state than the one it must be in.
    let wrongStates = Atomic<Int>(0)
    /// A closure that did not run on the transition queue.
    let wrongQueue = Atomic<Int>(0)
    let actionsRun = Atomic<Int>(0)
    private let dynamicCalls = Atomic<Int>(0)
    private let reentrantClaims = Atomic<Int>(0)
    /// A request made from inside an action whose completion ran before the call returned
    /// (it ran re-entrantly instead of being queued).
    let reentrantInline = Atomic<Int>(0)
    /// Completions, in the order they ran.
    let completions = GSMLocked<[(id: Int, outcome: GSMOutcome)]>([])
    /// What the observer saw, in order.
    let observed = GSMLocked<[StateTransition<Int>]>([])
    let completionsDone: Latch
    /// Opens when the requests numbered below `firstReentrantID` that were made with completion
    /// handlers (`firstRequestCompletions` of them) have completed.
    let firstRequestsDone: Latch

    init(queue: DispatchQueue?, expectedCompletions: Int, firstRequestCompletions: Int, firstReentrantID: Int,
         reentrantLimit: Int) {
        if let queue {
            let key = GSMQueueKey()
            queue.setSpecific(key: key.key, value: 1)
            queueKey = key
        } else {
            queueKey = nil
        }
        self.firstReentrantID = firstReentrantID
        self.reentrantLimit = reentrantLimit
        completionsDone = Latch(count: expectedCompletions)
        firstRequestsDone = Latch(count: firstRequestCompletions)
    }

    private func checkQueue() {
        if let queueKey, DispatchQueue.getSpecific(key: queueKey.key) != 1 {
            wrongQueue.add(1, ordering: .relaxed)
        }
    }

    /// An action that must run while the machine is in `state`.
    func action(expecting state: Int) {
        checkQueue()
        if actionsInFlight.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
            overlaps.add(1, ordering: .relaxed)
        }
        if let machine = ref.machine, machine.state != state { wrongStates.add(1, ordering: .relaxed) }
        actionsRun.add(1, ordering: .relaxed)
        actionsInFlight.subtract(1, ordering: .sequentiallyConsistent)
    }

    func beginTransition(from: Int, to: Int) {
        if transitionOpen.exchange(true, ordering: .sequentiallyConsistent) { overlaps.add(1, ordering: .relaxed) }
        action(expecting: from)
    }

    func endTransition(from: Int, to: Int) {
        action(expecting: to)
        if !transitionOpen.exchange(false, ordering: .sequentiallyConsistent) { overlaps.add(1, ordering: .relaxed) }
    }

    /// Checks that nothing else runs: observers and completions run between transitions.
    private func checkQuiet() {
        checkQueue()
        if transitionOpen.load(ordering: .sequentiallyConsistent) || actionsInFlight.load(ordering: .sequentiallyConsistent) != 0 {
            overlaps.add(1, ordering: .relaxed)
        }
    }

    func dynamicPick() -> Int {
        action(expecting: 1)
        let call = dynamicCalls.add(1, ordering: .relaxed).oldValue
        return GSMStorm.dynamicPicks[call % GSMStorm.dynamicPicks.count]
    }

    func barrier(of state: Int, from: Int) -> BarrierResponse<Int> {
        action(expecting: from)
        return GSMStorm.config.barriers[state]![from][0].response
    }

    func observe(_ transition: StateTransition<Int>) {
        checkQuiet()
        if let machine = ref.machine, machine.state != transition.to { wrongStates.add(1, ordering: .relaxed) }
        observed.withLock { $0.append(transition) }
    }

    /// Takes the number of one more request to make from inside an action; `nil` once
    /// `reentrantLimit` requests have been claimed.
    func claimReentrant() -> Int? {
        let claim = reentrantClaims.add(1, ordering: .relaxed).oldValue
        return claim < reentrantLimit ? firstReentrantID + claim : nil
    }

    /// Completions that ran on another thread than the one that made the request: the request
    /// was queued behind one running there.
    let completedElsewhere = Atomic<Int>(0)

    /// Makes request `id` with a completion handler that records its outcome.
    func issue(_ id: Int, on machine: StateMachine<Int>, flag: GSMFlag? = nil) {
        let requester = GSMThreadID.current
        machine.submit(GSMStorm.request(id)) { outcome in
            if GSMThreadID.current != requester { self.completedElsewhere.add(1, ordering: .relaxed) }
            self.checkQuiet()
            if let machine = self.ref.machine {
                switch outcome {
                case .change(_, let to, _): if machine.state != to { self.wrongStates.add(1, ordering: .relaxed) }
                case .failure(_, let state, _): if machine.state != state { self.wrongStates.add(1, ordering: .relaxed) }
                case .none: break
                }
            }
            flag?.set()
            self.completions.withLock { $0.append((id, outcome)) }
            if id < self.firstReentrantID { self.firstRequestsDone.countDown() }
            self.completionsDone.countDown()
        }
    }

    /// Pairs of requests made one after the other from inside one action: they must complete in
    /// that order.
    let reentrantPairs = GSMLocked<[(first: Int, second: Int)]>([])

    /// From inside an action: makes up to two more requests, if the limit allows, and checks that
    /// they were queued (their completions have not run when the calls return).
    func reenter() {
        guard let machine = ref.machine else { return }
        var made: [Int] = []
        for _ in 0..<2 {
            guard let id = claimReentrant() else { break }
            let flag = GSMFlag()
            issue(id, on: machine, flag: flag)
            if flag.isSet { reentrantInline.add(1, ordering: .relaxed) }
            made.append(id)
        }
        if made.count == 2 { reentrantPairs.withLock { $0.append((made[0], made[1])) } }
    }

    /// Waits until the storm's own requests (made with ``issue(_:on:flag:)``) have completed, then
    /// makes the re-entrant requests that the actions have not made, from the caller's thread, so
    /// that exactly `reentrantLimit` are made in all. `false` on timeout.
    func issueRemainingReentrant(on machine: StateMachine<Int>) -> Bool {
        guard firstRequestsDone.wait(timeout: Stress.timeout) else { return false }
        while let id = claimReentrant() { issue(id, on: machine) }
        return true
    }

    /// Builds the storm machine on `queue`.
    func makeMachine(name: String, queue: DispatchQueue?) throws -> StateMachine<Int> {
        func state(_ state: Int) -> StateDefinition<Int> {
            StateDefinition(state, allowedTransitions: GSMStorm.config.allowed[state])
                .beforeLeaving { _ in self.action(expecting: state) }
                .afterLeaving { to in self.action(expecting: to) }
                .beforeEntering { from in self.action(expecting: from) }
                .afterEntering { _ in self.action(expecting: state) }
        }
        let machine = try StateMachine(
            name: name, options: GSMStorm.config.options, transitionQueue: queue,
            beforeTransition: { from, to in self.beginTransition(from: from, to: to) },
            afterTransition: { from, to in self.endTransition(from: from, to: to) },
            states: [
                state(0),
                state(1).withDynamicTransition { self.dynamicPick() },
                state(2).afterEntering { _ in self.reenter() },
                state(3).withTransitionBarrier { from in self.barrier(of: 3, from: from) },
                state(4).makeGlobal().withTransitionBarrier { from in self.barrier(of: 4, from: from) },
            ])
        ref.machine = machine
        return machine
    }

    /// The checks every storm shares: nothing overlapped, every action saw the right state and
    /// ran on the right queue, re-entrant requests were queued.
    func expectCleanRun(_ mode: GSMStormMode, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(overlaps.load(ordering: .relaxed) == 0, "\(mode): actions, transitions or callbacks overlapped",
                sourceLocation: sourceLocation)
        #expect(wrongStates.load(ordering: .relaxed) == 0, "\(mode): a closure saw the wrong state",
                sourceLocation: sourceLocation)
        #expect(wrongQueue.load(ordering: .relaxed) == 0, "\(mode): a closure ran off the transition queue",
                sourceLocation: sourceLocation)
        #expect(reentrantInline.load(ordering: .relaxed) == 0, "\(mode): a request made in an action ran re-entrantly",
                sourceLocation: sourceLocation)
        #expect(actionsRun.load(ordering: .relaxed) > 0, sourceLocation: sourceLocation)
    }
}

/// Follows `changes` from state 0: the state they end in, and the index of the first change that
/// does not start where the previous one ended.
func gsmChain(_ changes: [StateTransition<Int>]) -> (last: Int, firstBreak: Int?) {
    var current = 0
    for (index, change) in changes.enumerated() {
        if change.from != current { return (current, index) }
        current = change.to
    }
    return (current, nil)
}

/// Where `slice` occurs in `history` as an unbroken stretch (`nil` if it does not). An empty
/// slice occurs at 0.
func gsmSliceStart(of slice: [StateTransition<Int>], in history: [StateTransition<Int>]) -> Int? {
    guard let first = slice.first else { return 0 }
    guard slice.count <= history.count else { return nil }
    for start in 0...(history.count - slice.count) where history[start] == first {
        if history[start..<(start + slice.count)].elementsEqual(slice) { return start }
    }
    return nil
}

/// Whether `states` (a `stateUpdates` stream's elements) is the machine's state at some point of
/// `history`, then the new state of each later change (skipping resets that change no state).
func gsmStatesFit(_ states: [Int], _ history: [StateTransition<Int>]) -> Bool {
    guard let first = states.first else { return false }
    let later = Array(states.dropFirst())
    // The latest point where exactly `later.count` state-changing changes follow.
    var start = history.count
    var counted = 0
    while counted < later.count && start > 0 {
        start -= 1
        if history[start].from != history[start].to { counted += 1 }
    }
    guard counted == later.count else { return false }
    let stateThen = start < history.count ? history[start].from : (history.last?.to ?? 0)
    let tail = history[start...].filter { $0.from != $0.to }.map(\.to)
    return first == stateThen && tail == later
}

/// Runs `body(index)` on `count` threads of their own (private serial dispatch queues), all
/// released at once, and waits until every one has returned and its block has been released.
/// Returns `false` on timeout.
func gsmOnThreads(_ count: Int, label: String, _ body: @escaping @Sendable (Int) -> Void) -> Bool {
    let start = Gate()
    let done = Latch(count: count)
    let queues = (0..<count).map { DispatchQueue(label: "\(label).\($0)") }
    for (index, queue) in queues.enumerated() {
        queue.async {
            if start.wait(timeout: Stress.timeout) { body(index) }
            done.countDown()
        }
    }
    start.open()
    guard done.wait(timeout: Stress.timeout) else { return false }
    for queue in queues { queue.sync {} }
    return true
}

extension StressTests {
    @Suite("GeneralStateMachine under concurrent requests")
    struct GeneralStateMachineStress {
        static let requests = Stress.count(10_000, minimum: 500)
        static let reentrant = Stress.count(1_000, minimum: 50)
        static let threads = 8

        /// What one storm thread watches from the middle of the storm on: an observer it registers
        /// and later cancels, and streams it opens.
        final class LateWatcher: Sendable {
            let seen = GSMLocked<[StateTransition<Int>]>([])
            let observation = GSMLocked<StateObservation?>(nil)
            let changes = GSMLocked<AsyncStream<StateTransition<Int>>?>(nil)
            let states = GSMLocked<AsyncStream<Int>?>(nil)

            init() {}
        }

        @Test("8 threads × completion handlers: every request completes once, in one consistent order",
              .timeLimit(.minutes(3)), arguments: GSMStormMode.allCases)
        func threadStorm(mode: GSMStormMode) async throws {
            let queue = mode.makeQueue()
            let requests = Self.requests
            let total = requests + Self.reentrant
            let probe = GSMStormProbe(queue: queue, expectedCompletions: total, firstRequestCompletions: requests,
                                      firstReentrantID: requests, reentrantLimit: Self.reentrant)
            let watchers = (0..<Self.threads).map { _ in LateWatcher() }
            let machineReference: WeakRef
            let finalState: Int
            let finalSuspended: Bool
            do {
                let machine = try probe.makeMachine(name: "gsm-storm-\(mode)", queue: queue)
                machineReference = WeakRef(machine)
                let observation = machine.observe { probe.observe($0) }
                defer { observation.cancel() }

                #expect(gsmOnThreads(Self.threads, label: "gsm-storm") { thread in
                    let ids = Array(stride(from: thread, to: requests, by: Self.threads))
                    let watcher = watchers[thread]
                    for (position, id) in ids.enumerated() {
                        if position == ids.count / 10 {
                            // Mid-storm: an observer and two streams join.
                            let late = machine.observe { change in watcher.seen.withLock { $0.append(change) } }
                            watcher.observation.withLock { $0 = late }
                            let changes = machine.changes
                            watcher.changes.withLock { $0 = changes }
                            let states = machine.stateUpdates
                            watcher.states.withLock { $0 = states }
                        }
                        if position == ids.count * 7 / 10 {
                            watcher.observation.withLock { $0?.cancel() }
                        }
                        probe.issue(id, on: machine)
                        // Readers racing with the transitions.
                        _ = machine.canTransition(to: id % (GSMStorm.count + 1))
                        _ = machine.state
                        _ = machine.isSuspended
                    }
                })
                #expect(probe.issueRemainingReentrant(on: machine), "\(mode): not every request completed")
                #expect(probe.completionsDone.wait(timeout: Stress.timeout), "\(mode): not every request completed")
                // Let the queue's last drain return before the machine goes.
                if let queue { #expect(quiesce(queue)) }
                finalState = machine.state
                finalSuspended = machine.isSuspended
            }

            let log = probe.completions.current
            // Every request completed exactly once.
            var times = [Int](repeating: 0, count: total)
            for entry in log { times[entry.id] += 1 }
            let wrong = offenders(total) { times[$0] != 1 }
            let examples = wrong.first.map { "#\($0) ×\(times[$0])" }
            #expect(wrong.count == 0, "\(mode): \(wrong.count) requests did not complete exactly once, e.g. \(examples)")

            // First in, first out: each thread's requests, and each pair made in one action,
            // complete in the order they were made.
            var position = [Int](repeating: -1, count: total)
            for (index, entry) in log.enumerated() { position[entry.id] = index }
            for thread in 0..<Self.threads {
                let ids = Array(stride(from: thread, to: requests, by: Self.threads))
                if let late = zip(ids, ids.dropFirst()).first(where: { position[$0.0] > position[$0.1] }) {
                    Issue.record("\(mode): request #\(late.1) of thread \(thread) completed before #\(late.0)")
                }
            }
            let pairs = probe.reentrantPairs.current
            let swapped = pairs.filter { position[$0.first] > position[$0.second] }
            #expect(swapped.isEmpty, "\(mode): requests made in one action completed out of order: \(swapped.prefix(3))")
            if pairs.isEmpty {
                Issue.record("\(mode): no action made two requests", severity: .warning)
            }

            // In completion order the changes form one chain from the initial state, the observer
            // saw exactly them, and the machine ends where the chain ends.
            let changes = log.compactMap { entry -> StateTransition<Int>? in
                guard case .change(let from, let to, let cause) = entry.outcome else { return nil }
                return StateTransition(from: from, to: to, cause: cause)
            }
            let chain = gsmChain(changes)
            #expect(chain.firstBreak == nil, "\(mode): change #\(chain.firstBreak ?? -1) does not start where the previous ended")
            let observed = probe.observed.current
            #expect(observed == changes, "\(mode): the observer saw \(observed.count) changes, completions report \(changes.count)")
            #expect(finalState == chain.last)
            #expect(changes.count > requests / 20, "\(mode): only \(changes.count) changes")

            // Replayed in completion order, the reference model gives every outcome: completion
            // order is the order the requests ran in, and each ran alone.
            var model = GSMModel(config: GSMStorm.config)
            var codes: [StateMachineErrorCode: Int] = [:]
            for (index, entry) in log.enumerated() {
                let request = GSMStorm.request(entry.id)
                let expected = model.outcome(of: request)
                if case .failure(let code, _, _) = entry.outcome { codes[code, default: 0] += 1 }
                if entry.outcome != expected {
                    let before = log[max(0, index - 5)..<index].map { "\(GSMStorm.request($0.id)) → \($0.outcome)" }
                    Issue.record("\(mode): completion #\(index) (request #\(entry.id), \(request)): expected \(expected), got \(entry.outcome); the requests before it: \(before)")
                    break
                }
            }
            #expect(finalState == model.current && finalSuspended == model.isSuspended)
            #expect(Set(codes.keys).isSubset(of: GSMStorm.expectedCodes), "\(mode): codes \(codes)")
            probe.expectCleanRun(mode)
            if probe.completedElsewhere.load(ordering: .relaxed) == 0 {
                // Not wrong, but the threads never met: the storm tested little.
                Issue.record("\(mode): no request was queued behind another thread's", severity: .warning)
            }

            // The observers that joined and left mid-storm saw an unbroken stretch of the history.
            for (thread, watcher) in watchers.enumerated() {
                let seen = watcher.seen.current
                #expect(gsmSliceStart(of: seen, in: observed) != nil,
                        "\(mode): thread \(thread)'s late observer saw \(seen.count) changes that are not a stretch of the history")
            }
            // Released, the machine finishes the streams opened mid-storm: each holds every change
            // from when it was opened (a suffix of the history), the state stream the state then
            // and each new state after.
            #expect(machineReference.isReleased, "\(mode): the machine was not released")
            guard machineReference.isReleased else { return }
            for (thread, watcher) in watchers.enumerated() {
                guard let changeStream = watcher.changes.current, let stateStream = watcher.states.current else {
                    Issue.record("\(mode): thread \(thread) opened no stream")
                    continue
                }
                var streamed: [StateTransition<Int>] = []
                for await change in changeStream { streamed.append(change) }
                #expect(observed.suffix(streamed.count).elementsEqual(streamed),
                        "\(mode): thread \(thread)'s changes stream is not a suffix of the history")
                var states: [Int] = []
                for await state in stateStream { states.append(state) }
                #expect(gsmStatesFit(states, observed), "\(mode): thread \(thread)'s stateUpdates \(states.prefix(5))… do not fit the history")
            }
        }

        @Test("10,000 child tasks × async transition(to:): every request answered once, changes consistent",
              .timeLimit(.minutes(3)), arguments: GSMStormMode.allCases)
        func taskStorm(mode: GSMStormMode) async throws {
            let queue = mode.makeQueue()
            let requests = Self.requests
            // The storm's own requests are awaited, so only the re-entrant ones have completions.
            let probe = GSMStormProbe(queue: queue, expectedCompletions: Self.reentrant, firstRequestCompletions: 0,
                                      firstReentrantID: requests, reentrantLimit: Self.reentrant)
            let machineReference: WeakRef
            let streamed: Task<[StateTransition<Int>], Never>
            var results: [(id: Int, outcome: GSMOutcome)] = []
            let finalState: Int
            do {
                let machine = try probe.makeMachine(name: "gsm-task-storm-\(mode)", queue: queue)
                machineReference = WeakRef(machine)
                let observation = machine.observe { probe.observe($0) }
                defer { observation.cancel() }
                // A consumer iterating the `changes` stream during the storm; it ends when the
                // machine is released.
                let changes = machine.changes
                streamed = Task {
                    var all: [StateTransition<Int>] = []
                    for await change in changes { all.append(change) }
                    return all
                }

                results = await withTaskGroup(of: (Int, GSMOutcome).self) { group in
                    for id in 0..<requests {
                        group.addTask { (id, await machine.outcome(of: GSMStorm.request(id))) }
                    }
                    var all: [(id: Int, outcome: GSMOutcome)] = []
                    all.reserveCapacity(requests)
                    for await result in group { all.append(result) }
                    return all
                }
                #expect(probe.issueRemainingReentrant(on: machine))
                #expect(probe.completionsDone.wait(timeout: Stress.timeout), "\(mode): not every re-entrant request completed")
                finalState = machine.state
                if let queue { #expect(quiesce(queue)) }
            }

            // Every request was answered once, with an answer that fits it.
            var times = [Int](repeating: 0, count: requests)
            for entry in results { times[entry.id] += 1 }
            let wrong = offenders(requests) { times[$0] != 1 }
            #expect(wrong.count == 0, "\(mode): \(wrong.count) requests not answered exactly once")
            var codes: [StateMachineErrorCode: Int] = [:]
            var unfit: [String] = []
            var answered: [StateTransition<Int>: Int] = [:]
            for entry in results + probe.completions.current {
                switch entry.outcome {
                case .change(let from, let to, let cause):
                    let change = StateTransition(from: from, to: to, cause: cause)
                    answered[change, default: 0] += 1
                    if !GSMStorm.fits(change, GSMStorm.request(entry.id)) { unfit.append("#\(entry.id) \(GSMStorm.request(entry.id)) → \(change)") }
                case .failure(let code, _, _):
                    codes[code, default: 0] += 1
                case .none:
                    break
                }
            }
            #expect(unfit.isEmpty, "\(mode): changes that do not fit their request: \(unfit.prefix(5))")
            #expect(Set(codes.keys).isSubset(of: GSMStorm.expectedCodes), "\(mode): codes \(codes)")

            // The observer saw one chain from the initial state, made of exactly the changes the
            // requests reported (async answers and re-entrant completions), ending in the final state.
            let observed = probe.observed.current
            let chain = gsmChain(observed)
            #expect(chain.firstBreak == nil, "\(mode): observed change #\(chain.firstBreak ?? -1) does not start where the previous ended")
            #expect(chain.last == finalState)
            var observedCounts: [StateTransition<Int>: Int] = [:]
            for change in observed { observedCounts[change, default: 0] += 1 }
            #expect(observedCounts == answered, "\(mode): observed and reported changes differ")
            #expect(observed.count > requests / 20, "\(mode): only \(observed.count) changes")
            probe.expectCleanRun(mode)

            // Released, the machine finishes the stream, which delivered the observer's changes.
            #expect(machineReference.isReleased, "\(mode): the machine was not released")
            if !machineReference.isReleased { streamed.cancel() }
            let streamedChanges = await streamed.value
            if machineReference.isReleased {
                #expect(streamedChanges == observed, "\(mode): the changes stream differs from the observer")
            }
        }
    }
}
