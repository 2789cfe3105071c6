// What Documentation/StateMachines.md's snippets take for granted.
import OperationKit

public enum Light: Hashable, Sendable { case off, on, broken }

public func render<State>(_ state: State) { print(state) }
