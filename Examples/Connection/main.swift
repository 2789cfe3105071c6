// Connection: a network connection as a StateMachine.
//
// The machine has six states. `disconnected` is the initial state (it is defined first).
// `connecting` has a barrier: while the link is down, requests to enter it are denied.
// `backingOff` has a dynamic transition: it picks another attempt, or gives up after three.
// `failed` is global (any state may enter it without listing it) and final (only reset() leaves
// it). `paused` is where the machine is suspended while the system sleeps; resume() goes back to
// the state it was suspended from.
//
// The story: a request while the link is down (denied), an illegal request, a connection that
// succeeds at the second attempt, a sleep and a wake, a dropped connection whose three attempts
// to reconnect all fail, a request in the final state (ignored), a reset. An observer prints
// every change; the `changes` stream records them too. At the end the program prints the
// machine's transition graph as Mermaid.
//
// A real client requests the next transition from its socket's callbacks. Here the main task
// requests them one after the other, so that every run prints the same lines in the same order.
//
// Run it with `swift run Connection`.

import OperationKit
import Synchronization

/// The states of one connection to a server.
enum ConnectionState: Hashable, Sendable {
    case disconnected
    case connecting
    case connected
    case backingOff
    case paused
    case failed
}

typealias ConnectionMachine = StateMachine<ConnectionState>

/// The network, simulated so that every run prints the same thing: whether the link is up, and
/// the answer to each dial in turn.
final class Network: Sendable {
    private let answers: [Bool]
    private let dials = Atomic<Int>(0)
    private let up = Atomic<Bool>(false)

    init(answers: [Bool]) {
        self.answers = answers
    }

    var linkIsUp: Bool { up.load(ordering: .relaxed) }

    func setLinkUp(_ isUp: Bool) {
        up.store(isUp, ordering: .relaxed)
    }

    /// Dials the server; returns whether it answered (the next scripted answer, then no).
    func dial() -> Bool {
        let index = dials.add(1, ordering: .relaxed).oldValue
        return index < answers.count && answers[index]
    }
}

/// The dial attempts since the connection was last up.
final class Attempts: Sendable {
    static let limit = 3
    private let count = Atomic<Int>(0)

    var value: Int { count.load(ordering: .relaxed) }

    func increment() {
        count.add(1, ordering: .relaxed)
    }

    func reset() {
        count.store(0, ordering: .relaxed)
    }
}

/// Prints what a state's action does, indented under the step that caused it.
func action(_ state: ConnectionState, _ text: String) {
    print("    [\(state)] \(text)")
}

/// Builds the machine. Actions run on the thread that executes the transition, one at a time.
func makeConnection(host: String, network: Network, attempts: Attempts)
    throws(StateMachineError<ConnectionState>) -> ConnectionMachine
{
    try StateMachine(name: "connection") {
        StateDefinition(.disconnected, allowedTransitions: .connecting)
            // reset() runs no action, so this does not print when the machine is reset.
            .afterEntering { previous in action(.disconnected, "closed (was \(previous))") }

        StateDefinition(.connecting, allowedTransitions: .connected, .backingOff, .disconnected)
            // Consulted before every transition into `connecting`, including the dynamic ones.
            .withTransitionBarrier { _ in network.linkIsUp ? .allow : .deny }
            .beforeEntering { _ in attempts.increment() }
            .afterEntering { _ in
                action(.connecting, "dialing \(host), attempt \(attempts.value) of \(Attempts.limit)")
            }

        StateDefinition(.connected, allowedTransitions: .backingOff, .disconnected)
            .afterEntering { _ in
                attempts.reset()
                action(.connected, "session open")
            }
            .beforeLeaving { next in action(.connected, "session closed (going to \(next))") }

        StateDefinition(.backingOff, allowedTransitions: .connecting, .disconnected)
            // `failed` is global, so it need not be listed to be a target.
            .withDynamicTransition { attempts.value < Attempts.limit ? .connecting : .failed }
            .afterEntering { previous in
                action(.backingOff, previous == .connected
                    ? "connection lost" : "attempt \(attempts.value) got no answer")
            }

        // Only ever entered by suspend(to:) and left by resume(): no allowed transitions needed.
        StateDefinition(.paused)
            .afterEntering { previous in action(.paused, "keep-alives stopped (suspended in \(previous))") }
            .beforeLeaving { next in action(.paused, "keep-alives restarted (resuming to \(next))") }

        StateDefinition(.failed)
            .makeGlobal()
            .makeFinal()
            .afterEntering { previous in action(.failed, "gave up (from \(previous))") }
    }
}

/// Requests transitions while the machine is connecting or backing off: in `connecting` it dials
/// and goes to `connected` or `backingOff`; in `backingOff` it waits a little, then lets the
/// dynamic transition choose between another attempt and `failed`.
func settle(_ connection: ConnectionMachine, network: Network, attempts: Attempts)
    async throws(StateMachineError<ConnectionState>)
{
    while true {
        switch connection.state {
        case .connecting:
            try await connection.transition(to: network.dial() ? .connected : .backingOff)
        case .backingOff:
            // A real client waits longer, and longer after each failure.
            try? await Task.sleep(for: .milliseconds(10 * attempts.value))
            try await connection.transition()
        default:
            return
        }
    }
}

/// Requests a transition to `target` and prints the outcome: the change, `nil` for a quiet no-op,
/// or the error.
func request(_ target: ConnectionState, of connection: ConnectionMachine) async {
    let label = "transition(to: .\(target))"
    do {
        let change = try await connection.transition(to: target)
        print("\(label) -> \(change.map { "\($0)" } ?? "nil (a quiet no-op)")")
    } catch {
        print("\(label) -> error \(error.code): \(error.message)")
    }
}

func run() async throws {
    // Attempt 1 fails and attempt 2 connects; after the drop, three attempts fail.
    let network = Network(answers: [false, true, false, false, false])
    let attempts = Attempts()
    let connection = try makeConnection(host: "example.org", network: network, attempts: attempts)

    // Observers run after the actions of each change, before its completion; so here, before
    // the awaited call returns. Keep the observation: dropping it would not stop the observer,
    // cancel() does.
    let observation = connection.observe { change in print("  observer: \(change)") }
    // The stream gets the same changes; a task collects them until the reset.
    let changes = connection.changes
    let history = Task {
        var seen: [StateTransition<ConnectionState>] = []
        for await change in changes {
            seen.append(change)
            if change.cause == .reset { break }
        }
        return seen
    }

    print("== The link is down")
    print("canTransition(to: .connecting) -> \(connection.canTransition(to: .connecting)) (barriers are not consulted)")
    await request(.connecting, of: connection)
    await request(.connected, of: connection)

    print("\n== The link comes up: connect")
    network.setLinkUp(true)
    try await connection.transition(to: .connecting)
    try await settle(connection, network: network, attempts: attempts)
    print("state: \(connection.state)")

    print("\n== The system sleeps: suspend to paused (connected's leaving actions do not run)")
    try await connection.suspend(to: .paused)
    print("isSuspended: \(connection.isSuspended)")
    await request(.disconnected, of: connection)

    print("\n== The system wakes: resume")
    await connection.resume()
    print("state: \(connection.state)")

    print("\n== The server drops the connection; every attempt to reconnect fails")
    try await connection.transition(to: .backingOff)
    try await settle(connection, network: network, attempts: attempts)
    print("state: \(connection.state)")

    print("\n== In the final state")
    await request(.connecting, of: connection)
    print("canTransition(to: .connecting) -> \(connection.canTransition(to: .connecting))")

    print("\n== Reset (no action runs; observers are told)")
    await connection.reset()
    print("state: \(connection.state)")

    observation.cancel()
    let seen = await history.value
    print("\nThe changes stream saw \(seen.count) changes, the last \(seen.last.map { "\($0)" } ?? "none").")

    print("\n== The transition graph (Mermaid)")
    print(connection.mermaidDiagram(), terminator: "")
}

// Top-level code is where a synchronous twin of an async method used to win: a
// `try await connection.transition(to:)` here picked the fire-and-forget form and dropped the
// error. The fire-and-forget form is now `requestTransition(to:)`, so this awaits and throws
// (Documentation/Semantics.md, "Synchronous and asynchronous twins"). Prints nothing unless the
// check fails.
let probe = try makeConnection(host: "probe", network: Network(answers: []), attempts: Attempts())
do {
    try await probe.transition(to: .connected)  // illegal: disconnected may only go to connecting
    fatalError("an illegal transition awaited at the top level did not throw")
} catch {
    precondition(error.code == .illegalTransition, "unexpected error \(error)")
}

try await run()
