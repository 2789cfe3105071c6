import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// How `StateMachine` runs requests: serialisation of re-entrant and concurrent requests, the
/// completion-handler and async forms, where things run, and the lifetime of its streams. The
/// time limit bounds every `await` (a stream that never yields fails instead of hanging).
@Suite("StateMachine: behaviour", .offThePool, .timeLimit(.minutes(1)))
struct StateMachineBehaviourTests {
    enum Phase: String, Hashable, Sendable, CustomStringConvertible {
        case a, b, c, d
        var description: String { rawValue }
    }

    typealias Machine = StateMachine<Phase>
    typealias Summary = StateMachineOutcomeSummary<Phase>

    /// The number of registered observers (streams included).
    static func observerCount(_ machine: Machine) -> Int {
        machine.lock.withLock { machine.observers.count }
    }

    /// a → b → c → d → a, a → c; no action.
    static func ring(queue: DispatchQueue? = nil) throws -> Machine {
        try Machine(name: "ring", transitionQueue: queue) {
            StateDefinition(.a, allowedTransitions: .b, .c)
            StateDefinition(.b, allowedTransitions: .c)
            StateDefinition(.c, allowedTransitions: .d)
            StateDefinition(.d, allowedTransitions: .a)
        }
    }

    // MARK: Re-entrant requests

    /// Requests made from a barrier, an action, an observer and a completion handler each run
    /// after the request being handled has completed, in the order they were made.
    @Test("requests made while a transition runs are queued, first in first out", arguments: [false, true])
    func reentrantRequests(withQueue: Bool) throws {
        let runner = TaggedDispatchQueue("reentrant-runner")
        let log = Recorder<String>()
        let slot = Recorder<Machine>()
        let firstBarrier = AtomicCounter(), firstEntry = AtomicCounter(), firstObservation = AtomicCounter()
        let allDone = Latch()
        @Sendable func request(_ name: String, _ target: Phase, last: Bool = false) {
            slot.values.first?.requestTransition(to: target) { outcome in
                log.record("\(name) done \(Summary(outcome).text) on runner: \(runner.isCurrent)")
                if last { allDone.countDown() }
            }
        }
        let machine = try Machine(name: "reentrant", transitionQueue: withQueue ? runner.queue : nil) {
            StateDefinition(.a, allowedTransitions: .b)
            StateDefinition(.b, allowedTransitions: .c)
                .withTransitionBarrier { _ in
                    log.record("barrier")
                    if firstBarrier.increment() == 1 { request("X1", .c) }
                    return .allow
                }
                .afterEntering { _ in
                    log.record("b afterEntering")
                    if firstEntry.increment() == 1 { request("X2", .d) }
                }
            StateDefinition(.c, allowedTransitions: .d)
            StateDefinition(.d, allowedTransitions: .a)
        }
        slot.record(machine)
        let observation = machine.observe { change in
            log.record("observer \(change)")
            if firstObservation.increment() == 1 { request("X3", .a) }
        }
        defer { observation.cancel() }
        let returned = Latch()
        // Without a queue the request runs on the calling thread: make that the runner.
        runner.queue.async {
            machine.requestTransition(to: .b) { outcome in
                log.record("outer done \(Summary(outcome).text)")
                request("X4", .b, last: true)
            }
            log.record("outer request returned")
            returned.countDown()
        }
        #expect(allDone.wait(timeout: stateMachineTestTimeout))
        #expect(returned.wait(timeout: stateMachineTestTimeout))
        let handled = [
            "barrier", "b afterEntering", "observer a -> b", "outer done a -> b",
            "observer b -> c", "X1 done b -> c on runner: true",
            "observer c -> d", "X2 done c -> d on runner: true",
            "observer d -> a", "X3 done d -> a on runner: true",
            "barrier", "b afterEntering", "observer a -> b", "X4 done a -> b on runner: true",
        ]
        // Without a queue everything, the queued requests included, ran before the call returned;
        // with one, the call returned before anything ran (the runner is the queue, busy with the call).
        #expect(log.values == (withQueue ? ["outer request returned"] + handled : handled + ["outer request returned"]))
        #expect(machine.state == .b)
    }

    @Test("without a queue, a request made from another thread while one runs is run by the running thread")
    func requestFromAnotherThreadWhileRunning() throws {
        let runner = TaggedDispatchQueue("running-thread")
        let log = Recorder<String>()
        let entered = Latch()
        let release = Gate()
        let innerDone = Latch()
        let machine = try Machine(name: "cross-thread") {
            StateDefinition(.a, allowedTransitions: .b)
            StateDefinition(.b, allowedTransitions: .c).afterEntering { _ in
                entered.countDown()
                log.record("b entered, waiting: \(release.wait(timeout: stateMachineTestTimeout))")
            }
            StateDefinition(.c)
        }
        runner.queue.async {
            machine.requestTransition(to: .b) { outcome in log.record("outer done \(Summary(outcome).text)") }
        }
        #expect(entered.wait(timeout: stateMachineTestTimeout))
        let requested = Latch()
        DispatchQueue(label: "inner-request").async {  // not the test's thread, in case the request blocks
            machine.requestTransition(to: .c) { outcome in
                log.record("inner done \(Summary(outcome).text) on the running thread: \(runner.isCurrent)")
                innerDone.countDown()
            }
            requested.countDown()
        }
        // The request returned at once, queued, not run: the machine is still in the first transition.
        #expect(requested.wait(timeout: stateMachineTestTimeout))
        #expect(log.values.isEmpty)
        #expect(machine.state == .b)
        release.open()
        #expect(innerDone.wait(timeout: stateMachineTestTimeout))
        #expect(log.values == ["b entered, waiting: true", "outer done a -> b",
                               "inner done b -> c on the running thread: true"])
    }

    // MARK: Completion handlers and async

    @Test("without a queue, an idle machine calls the completion on the caller's thread before returning")
    func synchronousCompletion() throws {
        let caller = TaggedDispatchQueue("caller")
        for quiet in [true, false] {
            let log = Recorder<String>()
            let machine = try Machine(name: "sync") {
                if quiet {
                    StateDefinition(.a, allowedTransitions: .b)
                    StateDefinition(.b).withDynamicTransition { .a }
                } else {
                    StateDefinition(.a, allowedTransitions: .b).afterLeaving { _ in log.record("action") }
                    StateDefinition(.b).withDynamicTransition { .a }
                }
                StateDefinition(.c)
            }
            caller.queue.sync {
                let record: @Sendable (String) -> @Sendable (Machine.Outcome) -> Void = { name in
                    { outcome in log.record("\(name) \(Summary(outcome).text) \(caller.isCurrent)") }
                }
                machine.requestTransition(to: .b, completion: record("transition"))
                log.record("returned")
                machine.requestTransition(to: .b, completion: record("same"))
                machine.requestTransition(completion: record("dynamic"))
                machine.requestSuspend(to: .c, completion: record("suspend"))
                machine.requestResume { log.record("resume \($0.map { "\($0)" } ?? "nil") \(caller.isCurrent)") }
                machine.requestReset { log.record("reset \($0.map { "\($0)" } ?? "nil") \(caller.isCurrent)") }
                log.record("end")
            }
            let actions = quiet ? [] : ["action"]
            #expect(log.values == actions + [
                "transition a -> b true", "returned", "same nothing true", "dynamic illegalTransition true",
                "suspend b -> c (suspend) true", "resume c -> b (resume) true", "reset b -> a (reset) true", "end",
            ], "quiet: \(quiet)")
        }
    }

    @Test("without a completion, an idle machine has changed state when the request returns")
    func fireAndForget() throws {
        let machine = try Self.ring()
        machine.requestTransition(to: .b)
        #expect(machine.state == .b)
        machine.requestSuspend(to: .d)
        #expect(machine.state == .d && machine.isSuspended)
        machine.requestResume()
        #expect(machine.state == .b && !machine.isSuspended)
        machine.requestReset()
        #expect(machine.state == .a)
        machine.requestTransition(to: .d)  // illegal: nothing changes, nothing traps
        #expect(machine.state == .a)
    }

    @Test("the async forms return the change, nil for a no-op, and throw the typed error")
    func asyncForms() async throws {
        for queue in [nil, DispatchQueue(label: "async-forms")] {
            let machine = try Self.ring(queue: queue)
            #expect(try await machine.transition(to: .b) == StateTransition(from: .a, to: .b))
            #expect(try await machine.transition(to: .b) == nil)
            do {
                try await machine.transition(to: .a)
                Issue.record("an illegal transition succeeded")
            } catch {
                #expect(error.code == .illegalTransition && error.state == .b && error.target == .a)
            }
            await #expect(throws: StateMachineError<Phase>(.dynamicTransitionNotDefined, machine: "ring", state: .b,
                                                           target: nil, "")) {
                try await machine.transition()
            }
            #expect(try await machine.suspend(to: .d) == StateTransition(from: .b, to: .d, cause: .suspend))
            #expect(try await machine.suspend(to: .a) == nil)
            #expect(await machine.resume() == StateTransition(from: .d, to: .b, cause: .resume))
            #expect(await machine.resume() == nil)
            #expect(await machine.reset() == StateTransition(from: .b, to: .a, cause: .reset))
            #expect(await machine.reset() == nil)
            #expect(machine.state == .a)
        }
    }

    @Test("async requests from many tasks are serialised: one transition's actions never interleave with another's")
    func concurrentAsyncRequests() async throws {
        for queue in [nil, DispatchQueue(label: "concurrent-async")] {
            let log = Recorder<String>()
            let machine = try Machine(
                name: "concurrent", transitionQueue: queue,
                beforeTransition: { from, to in log.record("begin \(from)\(to)") },
                afterTransition: { from, to in log.record("end \(from)\(to)") }
            ) {
                StateDefinition(.a).makeGlobal().afterEntering { _ in log.record("entered") }
                StateDefinition(.b).makeGlobal().afterEntering { _ in log.record("entered") }
                StateDefinition(.c).makeGlobal().afterEntering { _ in log.record("entered") }
                StateDefinition(.d).makeGlobal().afterEntering { _ in log.record("entered") }
            }
            let targets: [Phase] = (0..<200).map { [.a, .b, .c, .d][$0 % 4] }
            let changes = await withTaskGroup(of: StateTransition<Phase>?.self) { group in
                for target in targets {
                    group.addTask { try? await machine.transition(to: target) }
                }
                var changes: [StateTransition<Phase>] = []
                for await change in group { if let change { changes.append(change) } }
                return changes
            }
            let entries = log.values
            #expect(entries.count == changes.count * 3)
            for index in stride(from: 0, to: entries.count - 2, by: 3) {
                let begin = entries[index]
                #expect(begin.hasPrefix("begin "))
                #expect(entries[index + 1] == "entered")
                #expect(entries[index + 2] == "end " + begin.dropFirst(6))
            }
            // Each change starts where the previous one ended.
            let chained = entries.enumerated().compactMap { $0.offset % 3 == 0 ? String($0.element.dropFirst(6)) : nil }
            for (previous, next) in zip(chained, chained.dropFirst()) {
                #expect(previous.last == next.first)
            }
        }
    }

    // MARK: Streams and observers

    @Test("changes and stateUpdates end when the machine is released")
    func streamsEndWithMachine() async throws {
        var machine: Machine? = try Self.ring()
        weak let released = machine
        let changes = machine!.changes
        let updates = machine!.stateUpdates
        let changeConsumer = Task { await stateMachineCollect(changes, .max) }
        let updateConsumer = Task { await stateMachineCollect(updates, .max) }
        machine!.requestTransition(to: .b, completion: nil)  // runs at once on this thread: nothing is left holding the machine
        #expect(machine!.state == .b)
        machine = nil
        #expect(released == nil, "nothing else keeps the machine")
        let collectedChanges = await stateMachineValue { await changeConsumer.value }
        let collectedUpdates = await stateMachineValue { await updateConsumer.value }
        #expect(collectedChanges == [StateTransition(from: .a, to: .b)], "the changes stream finished")
        #expect(collectedUpdates == [.a, .b], "the stateUpdates stream finished")
    }

    @Test("a stream's observer goes when the stream is dropped or its consumer is cancelled")
    func streamObserversRemoved() async throws {
        let machine = try Self.ring()
        do {
            let changes = machine.changes
            let updates = machine.stateUpdates
            #expect(Self.observerCount(machine) == 2)
            _ = (changes, updates)
        }
        #expect(Self.observerCount(machine) == 0)

        let updates = machine.stateUpdates
        #expect(Self.observerCount(machine) == 1)
        let consumer = Task {
            var seen: [Phase] = []
            for await state in updates { seen.append(state) }
            return seen
        }
        // Cancelled before or while it iterates: either way the stream terminates and ends.
        consumer.cancel()
        let seen = await stateMachineValue { await consumer.value }
        #expect(seen == [] || seen == [.a])
        #expect(Self.observerCount(machine) == 0)
        machine.requestTransition(to: .b, completion: nil)  // nobody left to tell; nothing breaks
        #expect(machine.state == .b)
    }

    @Test("an observation can be cancelled after its machine is gone")
    func cancelAfterRelease() throws {
        var machine: Machine? = try Self.ring()
        weak let released = machine
        let seen = Recorder<StateTransition<Phase>>()
        let observation = machine!.observe { seen.record($0) }
        machine!.requestTransition(to: .b, completion: nil)
        machine = nil
        #expect(released == nil, "an observation does not keep its machine")
        observation.cancel()
        #expect(seen.values == [StateTransition(from: .a, to: .b)])
    }

    @Test("an observer registered inside an action sees only later changes; observers run outside the lock")
    func observerRegisteredDuringTransition() throws {
        let slot = Recorder<Machine>()
        let late = Recorder<String>()
        let observations = Recorder<StateObservation>()
        let machine = try Machine(name: "late") {
            StateDefinition(.a, allowedTransitions: .b)
            StateDefinition(.b, allowedTransitions: .c).afterEntering { _ in
                guard let machine = slot.values.first else { return }
                observations.record(machine.observe { late.record("\($0) state \(machine.state)") })
            }
            StateDefinition(.c)
        }
        slot.record(machine)
        #expect(Summary(machine.outcome(to: .b)) == .changed(.init(from: .a, to: .b)))
        #expect(Summary(machine.outcome(to: .c)) == .changed(.init(from: .b, to: .c)))
        #expect(late.values == ["b -> c state c"])
        observations.values.forEach { $0.cancel() }
    }
}
