// What Documentation/StateMachines.md's snippets take for granted that uses their types:
// Examples/Connection/main.swift's helpers, and a machine and a connection to talk about.
import OperationKit
import Synchronization

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
/// Prints what a state's action does, indented under the step that caused it.
func action(_ state: ConnectionState, _ text: String) {
    print("    [\(state)] \(text)")
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

let machine = try! StateMachine<ConnectionState>(name: "machine") {
    StateDefinition(.disconnected, allowedTransitions: .connecting)
    StateDefinition(.connecting, allowedTransitions: .disconnected)
}
let connection = try! makeConnection(host: "example.org", network: Network(answers: []), attempts: Attempts())
