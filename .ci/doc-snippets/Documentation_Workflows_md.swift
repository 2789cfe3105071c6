// What Documentation/Workflows.md's snippets take for granted (RunLog, Offline and text(_:) as in
// Examples/Workflows/main.swift).
import Synchronization
import Foundation
import OperationKit

/// How many times each task of one example ran, by name.
public final class RunLog: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    public init() {}

    public func record(_ task: WorkflowTask) {
        counts.withLock { $0[task.name, default: 0] += 1 }
    }
}
public let log = RunLog()

public struct Offline: Error, CustomStringConvertible {
    public init() {}
    public var description: String { "offline" }
}

/// A result or an error as text, "nil" for none.
public func text(_ value: Any?) -> String {
    value.map { "\($0)" } ?? "nil"
}

public final class Client: Sendable {
    public func get(_ url: URL, completion: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        completion(Data(), nil)
    }
    public func data(from url: URL) async throws -> Data { Data() }
}
public let client = Client()
public let url = URL(string: "https://example.com/feed")!

public struct Feed: Decodable, Sendable {}
public enum ParseError: Error { case noData }
public let decoder = JSONDecoder()
public func decode(_ value: (any Sendable)?) throws -> Feed { Feed() }

public let workflow = Workflow(name: "workflow")
public let merge = ClosureTask(name: "merge") { run in run.finish(with: nil) }
public let cleanup = ClosureTask(name: "cleanup") { run in run.finish(with: nil) }
public let fetchUser = ClosureTask(name: "fetch user") { run in run.finish(with: "user") }
public let fetchProject = ClosureTask(name: "fetch project") { run in run.finish(with: "project") }
public let fetch = ClosureTask(name: "fetch") { run in run.finish(with: "data") }
public let save = ClosureTask(name: "save") { run in run.finish(with: "saved") }
