// What Documentation/SwiftConcurrency.md's snippets take for granted.
import Foundation
import OperationKit

public let queue = ConcurrentOperationQueue(name: "work")
public let url = URL(string: "https://example.com/a")!
public let urls = [url, URL(string: "https://example.com/b")!]
public let feedURL = URL(string: "https://example.com/feed")!
public let text = "name = example"
public let decoder = JSONDecoder()

public final class Client: Sendable {
    public func data(from url: URL) async throws -> Data { Data() }
}
public let client = Client()

public struct Image: Sendable { public init(data: Data) throws {} }
public struct Config: Sendable { public init(parsing text: String) throws {} }
public struct Feed: Decodable, Sendable {}
public struct Receipt: Sendable {}
public enum ParseError: Error { case noData }

public func writeReport() {}
public func makeThumbnail() async throws -> Image { try Image(data: Data()) }
public func makeThumbnail(from url: URL) async throws -> Image { try Image(data: Data()) }
public func show(_ feed: Feed) {}
public func log<Event>(_ event: Event) { print(event) }

public let report = ClosureOperation(name: "report") {}
public let download = ClosureProcedure<Data>(name: "download") { Data() }
public let upload = ClosureProcedure<Void>(name: "upload") {}
public let workflow = Workflow(name: "workflow")
public let save = ClosureTask(name: "save") { run in run.finish(with: Receipt()) }
