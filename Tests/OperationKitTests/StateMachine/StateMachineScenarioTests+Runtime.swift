import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Scenarios O111–O118 (see `StateMachineScenarioTests` for the adaptations).
extension StateMachineScenarioTests {
    // MARK: 111, 112

    @Test("O111 barrier deny: transitionDenied, state unchanged, no action; canTransition still true")
    func barrierDeny() throws {
        let log = Recorder<String>()
        let machine = try Machine(name: "O111") {
            Self.recorded(.a, [.barred], log)
            Self.recorded(.barred, [], log).withTransitionBarrier { from in
                log.record("barrier from \(from)")
                return .deny
            }
        }
        // TK: can-fire still says true when the guard would decline.
        #expect(machine.canTransition(to: .barred))
        let error = try #require(machine.outcome(to: .barred)?.failureValue)
        #expect(error.code == .transitionDenied && error.state == .a && error.target == .barred)
        #expect(machine.state == .a)
        #expect(log.values == ["barrier from a"])
    }

    @Test("O111 barrier redirect: the machine ends in the redirect target, running its actions")
    func barrierRedirect() throws {
        let log = Recorder<String>()
        let machine = try Machine(name: "O111-redirect") {
            Self.recorded(.a, [.barred, .detour, .b], log)
            Self.recorded(.b, [.a], log)
            Self.recorded(.barred, [], log).withTransitionBarrier { from in
                log.record("barrier from \(from)")
                return from == .a ? .redirect(to: .detour) : .redirect(to: .c)
            }
            // The detour's own barrier is not consulted after a redirect.
            Self.recorded(.detour, [.b], log).withTransitionBarrier { _ in
                log.record("detour barrier")
                return .deny
            }
            Self.recorded(.c, [], log)
        }
        #expect(machine.outcome(to: .barred)?.successValue == StateTransition(from: .a, to: .detour))
        #expect(machine.state == .detour)
        #expect(log.values == ["barrier from a", "a beforeLeaving detour", "detour beforeEntering a",
                               "a afterLeaving detour", "detour afterEntering a"])
        // Back to a by way of b; then a redirect to a state not allowed from b is illegal.
        #expect(Summary(machine.outcome(to: .b)) == .changed(.init(from: .detour, to: .b)))
        let before = log.values.count
        let error = try #require(machine.outcome(to: .barred)?.failureValue)
        #expect(error.code == .illegalTransition && error.target == .c)
        #expect(machine.state == .b)
        #expect(log.values.dropFirst(before) == ["barrier from b"])
    }

    @Test("O112 dynamic transition: the closure picks, the usual checks apply; none defined is an error")
    func dynamicTransition() throws {
        let log = Recorder<String>()
        let picks = Recorder<N>()
        let machine = try Machine(name: "O112") {
            Self.recorded(.a, [.dyn], log)
            Self.recorded(.dyn, [.b], log).withDynamicTransition {
                let pick = picks.values.last ?? .b
                log.record("pick \(pick)")
                return pick
            }
            Self.recorded(.b, [.dyn], log)
            Self.recorded(.c, [], log)
        }
        let undefined = try #require(machine.dynamicOutcome()?.failureValue)
        #expect(undefined.code == .dynamicTransitionNotDefined && undefined.state == .a && undefined.target == nil)
        #expect(machine.state == .a && log.values.isEmpty)

        #expect(Summary(machine.outcome(to: .dyn)) == .changed(.init(from: .a, to: .dyn)))
        var mark = log.values.count
        // An illegal pick: refused, nothing runs but the closure.
        picks.record(.c)
        let illegal = try #require(machine.dynamicOutcome()?.failureValue)
        #expect(illegal.code == .illegalTransition && illegal.state == .dyn && illegal.target == .c)
        #expect(log.values.dropFirst(mark) == ["pick c"])
        mark = log.values.count
        picks.record(.unknown)
        #expect(Summary(machine.dynamicOutcome()) == .failed(.unknownState))
        #expect(log.values.dropFirst(mark) == ["pick unknown"])
        mark = log.values.count
        picks.record(.dyn)
        #expect(Summary(machine.dynamicOutcome()) == .nothing)
        #expect(log.values.dropFirst(mark) == ["pick dyn"])
        mark = log.values.count
        picks.record(.b)
        #expect(machine.dynamicOutcome()?.successValue == StateTransition(from: .dyn, to: .b))
        #expect(log.values.dropFirst(mark) == ["pick b", "dyn beforeLeaving b", "b beforeEntering dyn",
                                               "dyn afterLeaving b", "b afterEntering dyn"])
        #expect(machine.state == .b)
    }

    // MARK: 113

    @Test("O113 reset: back to the first state running no action; observers told with cause .reset")
    func reset() throws {
        let log = Recorder<String>()
        let machine = try Machine(
            name: "O113",
            beforeTransition: { _, _ in log.record("machine before") },
            afterTransition: { _, _ in log.record("machine after") }
        ) {
            Self.recorded(.a, [.b], log)
            Self.recorded(.b, [.c], log)
            Self.recorded(.c, [], log)
        }
        #expect(Summary(machine.resetOutcome()) == .nothing, "already in the initial state")
        #expect(Summary(machine.outcome(to: .b)) == .changed(.init(from: .a, to: .b)))
        #expect(Summary(machine.outcome(to: .c)) == .changed(.init(from: .b, to: .c)))
        let observed = Recorder<StateTransition<N>>()
        let observation = machine.observe { observed.record($0) }
        defer { observation.cancel() }
        let mark = log.values.count
        #expect(machine.resetOutcome()?.successValue == StateTransition(from: .c, to: .a, cause: .reset))
        #expect(machine.state == .a)
        #expect(log.values.count == mark, "no state or machine action ran")
        #expect(observed.values == [StateTransition(from: .c, to: .a, cause: .reset)])
        // The machine works as new afterwards.
        #expect(machine.outcome(to: .b)?.successValue == StateTransition(from: .a, to: .b))
    }

    // MARK: 114

    @Test("O114 transition queue: actions, observers and completion run on it; requests are asynchronous")
    func transitionQueue() throws {
        let tagged = TaggedDispatchQueue("O114")
        let log = Recorder<String>()
        @Sendable func where_() -> String { tagged.isCurrent ? "queue" : "elsewhere" }
        let machine = try Machine(
            name: "O114", transitionQueue: tagged.queue,
            beforeTransition: { _, _ in log.record("machine before \(where_())") },
            afterTransition: { _, _ in log.record("machine after \(where_())") }
        ) {
            StateDefinition(.a, allowedTransitions: .b)
                .beforeLeaving { _ in log.record("a beforeLeaving \(where_())") }
            StateDefinition(.b, allowedTransitions: .a).withTransitionBarrier { _ in
                log.record("barrier \(where_())")
                return .allow
            }
            .afterEntering { _ in log.record("b afterEntering \(where_())") }
        }
        #expect(machine.transitionQueue === tagged.queue)
        let observation = machine.observe { _ in log.record("observer \(where_())") }
        defer { observation.cancel() }
        // Hold the queue: the request cannot run before the call returns.
        let hold = Gate()
        tagged.queue.async { _ = hold.wait(timeout: stateMachineTestTimeout) }
        let done = Latch()
        machine.requestTransition(to: .b) { outcome in
            log.record("completion \(where_()) \(Summary(outcome).text)")
            done.countDown()
        }
        log.record("request returned")
        #expect(machine.state == .a)
        hold.open()
        #expect(done.wait(timeout: stateMachineTestTimeout))
        #expect(log.values == ["request returned", "barrier queue", "machine before queue", "a beforeLeaving queue",
                               "b afterEntering queue", "machine after queue", "observer queue", "completion queue a -> b"])
        #expect(machine.state == .b)
    }

    @Test("O114 a request made inside an action starts only after the current one completes")
    func requestInsideActionWithQueue() throws {
        let tagged = TaggedDispatchQueue("O114-nested")
        let log = Recorder<String>()
        let machines = Recorder<Machine>()
        let done = Latch()
        let machine = try Machine(name: "O114-nested", transitionQueue: tagged.queue) {
            StateDefinition(.a, allowedTransitions: .b)
            StateDefinition(.b, allowedTransitions: .c)
                .afterEntering { _ in
                    log.record("b afterEntering")
                    machines.values.first?.requestTransition(to: .c) { outcome in
                        log.record("inner completion \(tagged.isCurrent) \(Summary(outcome).text)")
                        done.countDown()
                    }
                    log.record("inner request returned")
                }
                .afterLeaving { _ in log.record("b afterLeaving") }
            StateDefinition(.c).beforeEntering { _ in log.record("c beforeEntering") }
        }
        machines.record(machine)
        machine.requestTransition(to: .b) { outcome in
            log.record("outer completion \(tagged.isCurrent) \(Summary(outcome).text)")
        }
        #expect(done.wait(timeout: stateMachineTestTimeout))
        #expect(log.values == ["b afterEntering", "inner request returned", "outer completion true a -> b",
                               "c beforeEntering", "b afterLeaving", "inner completion true b -> c"])
        #expect(machine.state == .c)
    }

    // MARK: 115

    @Test("O115 observers get every change in order; a cancelled one gets nothing more; several all get it")
    func observers() throws {
        let machine = try Self.plainMachine(Recorder())
        let first = Recorder<String>()
        let second = Recorder<String>()
        let one = machine.observe { first.record("\($0)") }
        let two = machine.observe { second.record("\($0)") }
        defer { two.cancel() }
        _ = machine.outcome(to: .b)
        one.cancel()
        one.cancel()  // harmless
        _ = machine.outcome(to: .c)
        _ = machine.resetOutcome()
        #expect(first.values == ["a -> b"])
        #expect(second.values == ["a -> b", "b -> c", "c -> a (reset)"])
        // Refusals and no-ops are not changes.
        _ = machine.outcome(to: .a)
        _ = machine.outcome(to: .d)
        #expect(second.values.count == 3)
    }

    @Test("O115 an observation that is dropped, not cancelled, keeps observing")
    func droppedObservation() throws {
        let machine = try Self.plainMachine(Recorder())
        let seen = Recorder<StateTransition<N>>()
        _ = machine.observe { seen.record($0) }
        _ = machine.outcome(to: .b)
        #expect(seen.values == [StateTransition(from: .a, to: .b)])
    }

    @Test("O115 changes and stateUpdates: the current state first, then each change, to every subscriber")
    func streams() async throws {
        let machine = try Self.plainMachine(Recorder())
        _ = machine.outcome(to: .b)
        let updates1 = machine.stateUpdates
        let updates2 = machine.stateUpdates
        let changes = machine.changes
        _ = machine.outcome(to: .c)
        _ = machine.outcome(to: .d)
        _ = machine.resetOutcome()
        let states1 = await stateMachineValue { await stateMachineCollect(updates1, 4) }
        let states2 = await stateMachineValue { await stateMachineCollect(updates2, 4) }
        let transitions = await stateMachineValue { await stateMachineCollect(changes, 3) }
        #expect(states1 == [.b, .c, .d, .a])
        #expect(states2 == [.b, .c, .d, .a])
        #expect(transitions == [StateTransition(from: .b, to: .c), StateTransition(from: .c, to: .d),
                                StateTransition(from: .d, to: .a, cause: .reset)])
    }

    // MARK: 116 is with the construction tests. 118

    @Test("O118 suspend runs only the suspension state's entering actions; resume only its leaving actions")
    func suspendAndResume() throws {
        let log = Recorder<String>()
        let machine = try Machine(
            name: "O118",
            beforeTransition: { _, _ in log.record("machine before") },
            afterTransition: { _, _ in log.record("machine after") }
        ) {
            Self.recorded(.a, [.b], log)
            Self.recorded(.b, [.a], log)
            Self.recorded(.background, [], log).withTransitionBarrier { _ in
                log.record("barrier")
                return .deny
            }
            Self.entering(.final, [], log).makeFinal().makeGlobal()
        }
        let observed = Recorder<String>()
        let observation = machine.observe { observed.record("\($0)") }
        defer { observation.cancel() }
        #expect(Summary(machine.outcome(to: .b)) == .changed(.init(from: .a, to: .b)))
        var mark = log.values.count
        #expect(machine.suspendOutcome(to: .background)?.successValue
                    == StateTransition(from: .b, to: .background, cause: .suspend))
        #expect(log.values.dropFirst(mark) == ["background beforeEntering b", "background afterEntering b"])
        #expect(machine.state == .background && machine.isSuspended)
        // While suspended: transitions fail with .suspended; a second suspend is ignored.
        #expect(!machine.canTransition(to: .a) && !machine.canTransition(to: .final))
        let refused = try #require(machine.outcome(to: .a)?.failureValue)
        #expect(refused.code == .suspended && refused.state == .background && refused.target == .a)
        #expect(Summary(machine.outcome(to: .final)) == .failed(.suspended))
        #expect(Summary(machine.dynamicOutcome()) == .failed(.suspended))
        #expect(Summary(machine.suspendOutcome(to: .a)) == .nothing)
        #expect(Summary(machine.suspendOutcome(to: .unknown)) == .failed(.unknownState))
        mark = log.values.count
        #expect(machine.resumeOutcome()?.successValue == StateTransition(from: .background, to: .b, cause: .resume))
        #expect(log.values.dropFirst(mark) == ["background beforeLeaving b", "background afterLeaving b"])
        #expect(machine.state == .b && !machine.isSuspended)
        #expect(Summary(machine.resumeOutcome()) == .nothing, "not suspended")
        #expect(observed.values == ["a -> b", "b -> background (suspend)", "background -> b (resume)"])
        // Suspending to the current state is ignored.
        #expect(Summary(machine.suspendOutcome(to: .b)) == .nothing)
        #expect(!machine.isSuspended)
    }

    @Test("O118 reset while suspended ends the suspension; a final state ignores suspend")
    func suspendResetAndFinal() throws {
        let log = Recorder<String>()
        let machine = try Machine(name: "O118-reset") {
            Self.recorded(.a, [.b], log)
            Self.recorded(.b, [.final], log)
            Self.recorded(.background, [], log)
            Self.entering(.final, [], log).makeFinal()
        }
        #expect(Summary(machine.outcome(to: .b)) == .changed(.init(from: .a, to: .b)))
        #expect(Summary(machine.suspendOutcome(to: .background)) == .changed(.init(from: .b, to: .background, cause: .suspend)))
        let mark = log.values.count
        #expect(machine.resetOutcome()?.successValue == StateTransition(from: .background, to: .a, cause: .reset))
        #expect(log.values.count == mark, "reset runs no action, not even the suspension state's leaving ones")
        #expect(machine.state == .a && !machine.isSuspended)
        #expect(Summary(machine.resumeOutcome()) == .nothing, "the remembered state is forgotten")
        // Suspended in the initial state: reset still ends the suspension.
        #expect(Summary(machine.outcome(to: .b)) == .changed(.init(from: .a, to: .b)))
        #expect(machine.suspendOutcome(to: .a)?.successValue == StateTransition(from: .b, to: .a, cause: .suspend))
        #expect(machine.resetOutcome()?.successValue == StateTransition(from: .a, to: .a, cause: .reset))
        #expect(!machine.isSuspended && machine.canTransition(to: .b))
        // In a final state, suspend is ignored.
        #expect(Summary(machine.outcome(to: .b)) == .changed(.init(from: .a, to: .b)))
        #expect(Summary(machine.outcome(to: .final)) == .changed(.init(from: .b, to: .final)))
        let finalMark = log.values.count
        #expect(Summary(machine.suspendOutcome(to: .background)) == .nothing)
        #expect(machine.state == .final && !machine.isSuspended)
        #expect(log.values.count == finalMark)
    }
}
