import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// An object whose release a test watches, captured by a machine's closures.
final class GSMToken: Sendable {
    init() {}
}

extension StressTests {
    @Suite("GeneralStateMachine is released")
    struct GeneralStateMachineLeaks {
        /// A small machine whose actions, barrier and dynamic transition capture `token`, and
        /// which makes re-entrant requests from an action.
        static func makeMachine(
            _ index: Int, queue: DispatchQueue?, token: GSMToken, ref: GSMMachineRef, reentrant: Latch
        ) throws -> StateMachine<Int> {
            let machine = try StateMachine<Int>(
                name: "gsm-leak-\(index)", transitionQueue: queue,
                beforeTransition: { _, _ in withExtendedLifetime(token) {} },
                afterTransition: { _, _ in withExtendedLifetime(token) {} },
                states: [
                    StateDefinition(0, allowedTransitions: 1, 2)
                        .beforeLeaving { _ in withExtendedLifetime(token) {} }
                        .withDynamicTransition { withExtendedLifetime(token) { 2 } },
                    StateDefinition(1, allowedTransitions: 2, 0)
                        .afterEntering { _ in
                            // A request from inside an action, queued behind this transition.
                            ref.machine?.requestTransition(to: 0) { _ in reentrant.countDown() }
                        },
                    StateDefinition(2, allowedTransitions: 0)
                        .withTransitionBarrier { _ in withExtendedLifetime(token) { .allow } },
                    StateDefinition(3).makeGlobal().makeFinal()
                        .afterEntering { _ in withExtendedLifetime(token) {} },
                ])
            ref.machine = machine
            return machine
        }

        /// The requests each machine gets, each changing the state: 0 → 1 (and the re-entrant
        /// 1 → 0), 0 → 2, 2 → 0, dynamic 0 → 2, suspend 2 → 1 (its re-entrant request fails: the
        /// machine is suspended), resume 1 → 2, reset 2 → 0, 0 → 3 (final).
        static let requests: [GSMRequest] = [
            .transition(to: 1), .transition(to: 2), .transition(to: 0), .dynamic, .suspend(to: 1), .resume,
            .reset, .transition(to: 3),
        ]
        static let expectedChanges = [
            StateTransition(from: 0, to: 1), StateTransition(from: 1, to: 0), StateTransition(from: 0, to: 2),
            StateTransition(from: 2, to: 0), StateTransition(from: 0, to: 2), StateTransition(from: 2, to: 1, cause: .suspend),
            StateTransition(from: 1, to: 2, cause: .resume), StateTransition(from: 2, to: 0, cause: .reset),
            StateTransition(from: 0, to: 3),
        ]

        @Test("machines with observers and streams are released after use, and their streams finish",
              .timeLimit(.minutes(3)), arguments: GSMStormMode.allCases)
        func releasedAfterUse(mode: GSMStormMode) async throws {
            let count = Stress.count(150, minimum: 15)
            let workers = DispatchQueue(label: "gsm-leak.workers", attributes: .concurrent)
            for index in 0..<count {
                let queue = mode.makeQueue()
                let machineReference: WeakRef
                let tokenReference: WeakRef
                let observerTokenReference: WeakRef
                let cancelledTokenReference: WeakRef
                let observation: StateObservation
                let consumer: Task<[StateTransition<Int>], Never>
                let quitter: Task<Int, Never>
                let states: AsyncStream<Int>
                let observed = GSMLocked<[StateTransition<Int>]>([])
                do {
                    let token = GSMToken()
                    let observerToken = GSMToken()
                    tokenReference = WeakRef(token)
                    observerTokenReference = WeakRef(observerToken)
                    let ref = GSMMachineRef()
                    let reentrant = Latch(count: 2)
                    let machine = try Self.makeMachine(index, queue: queue, token: token, ref: ref, reentrant: reentrant)
                    machineReference = WeakRef(machine)
                    // Kept past the machine's life, never cancelled before it goes: must not keep it.
                    observation = machine.observe { change in
                        withExtendedLifetime(observerToken) { observed.withLock { $0.append(change) } }
                    }
                    // An observer cancelled while the machine works; only its closure holds its token.
                    let cancelled: StateObservation
                    do {
                        let cancelledToken = GSMToken()
                        cancelledTokenReference = WeakRef(cancelledToken)
                        cancelled = machine.observe { _ in withExtendedLifetime(cancelledToken) {} }
                    }
                    // A consumer waiting in the stream while the machine works and goes.
                    let changes = machine.changes
                    consumer = Task {
                        var all: [StateTransition<Int>] = []
                        for await change in changes { all.append(change) }
                        return all
                    }
                    // A consumer that stops early.
                    let early = machine.changes
                    quitter = Task {
                        var seen = 0
                        for await _ in early {
                            seen += 1
                            if seen == 2 { break }
                        }
                        return seen
                    }
                    // Never read until the machine is gone.
                    states = machine.stateUpdates

                    // Half the requests from another thread with completion handlers, half with
                    // async/await, in order.
                    for (position, request) in Self.requests.enumerated() {
                        if position.isMultiple(of: 2) {
                            let done = Latch()
                            workers.async { machine.submit(request) { _ in done.countDown() } }
                            #expect(done.wait(timeout: Stress.timeout))
                        } else {
                            _ = await machine.outcome(of: request)
                        }
                        if position == 3 { cancelled.cancel() }
                    }
                    #expect(reentrant.wait(timeout: Stress.timeout))
                    #expect(machine.state == 3)
                    if let queue { #expect(quiesce(queue)) }
                    #expect(quiesce(workers))
                    // Cancelled, the observer's closure is released while the machine lives.
                    #expect(cancelledTokenReference.isReleased, "machine \(index) (\(mode)): a cancelled observer is kept")
                }
                #expect(machineReference.isReleased, "machine \(index) (\(mode)) was not released")
                guard machineReference.isReleased else {
                    consumer.cancel()
                    quitter.cancel()
                    return
                }
                #expect(tokenReference.isReleased, "machine \(index) (\(mode)): its closures were not released")
                #expect(observerTokenReference.isReleased, "machine \(index) (\(mode)): its observer was not released")
                observation.cancel()  // harmless after the machine is gone

                // The streams have finished, with every change.
                let expected = observed.current
                #expect(expected == Self.expectedChanges, "machine \(index) (\(mode))")
                let streamed = await consumer.value
                #expect(streamed == expected, "machine \(index) (\(mode))")
                #expect(await quitter.value == 2)
                var stateList: [Int] = []
                for await state in states { stateList.append(state) }
                #expect(stateList == [0] + expected.map(\.to), "machine \(index) (\(mode))")
            }
        }

        @Test("a machine never used is released; its streams finish with nothing (or the initial state)")
        func releasedUnused() async throws {
            let machineReference: WeakRef
            let changes: AsyncStream<StateTransition<Int>>
            let states: AsyncStream<Int>
            do {
                let machine = try StateMachine<Int>(states: [StateDefinition(0, allowedTransitions: 1), StateDefinition(1)])
                machineReference = WeakRef(machine)
                changes = machine.changes
                states = machine.stateUpdates
                _ = machine.observe { _ in }
            }
            #expect(machineReference.isReleased)
            guard machineReference.isReleased else { return }
            var changeCount = 0
            for await _ in changes { changeCount += 1 }
            #expect(changeCount == 0)
            var stateList: [Int] = []
            for await state in states { stateList.append(state) }
            #expect(stateList == [0])
        }

        @Test("requests queued on a transition queue keep the dropped machine alive until they have run",
              arguments: [GSMStormMode.serialQueue, .concurrentQueue])
        func droppedWithQueuedRequests(mode: GSMStormMode) throws {
            let queue = try #require(mode.makeQueue())
            let requests = Stress.count(200, minimum: 20)
            let completed = Latch(count: requests)
            let states = GSMLocked<[Int]>([])
            let machineReference: WeakRef
            queue.suspend()
            do {
                let machine = try StateMachine<Int>(
                    name: "gsm-dropped-\(mode)", transitionQueue: queue,
                    states: [StateDefinition(0, allowedTransitions: 1), StateDefinition(1, allowedTransitions: 0)])
                machineReference = WeakRef(machine)
                for index in 0..<requests {
                    machine.requestTransition(to: (index + 1) % 2) { outcome in
                        if case .success(let change?) = outcome { states.withLock { $0.append(change.to) } }
                        completed.countDown()
                    }
                }
                #expect(completed.count == requests, "nothing may run while the queue is suspended")
            }
            // Only the queue holds the machine now.
            #expect(!machineReference.isReleased, "the machine went with requests still queued")
            queue.resume()
            #expect(completed.wait(timeout: Stress.timeout))
            #expect(quiesce(queue))
            #expect(machineReference.isReleased)
            #expect(states.current == (0..<requests).map { ($0 + 1) % 2 })
        }
    }
}
