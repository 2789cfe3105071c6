// What Documentation/Procedures.md's snippets take for granted.
import Foundation
import OperationKit

public let queue = ConcurrentOperationQueue(name: "work")
public let uiQueue = ConcurrentOperationQueue(name: "ui")
public let backgroundQueue = ConcurrentOperationQueue(name: "background")
public let url = "https://example.com/data"
public let text = "name = example"

public struct NotReachable: Error { public let host: String; public init(host: String) { self.host = host } }
public struct NotSignedIn: Error { public init() {} }
public struct NotFound: Error { public init() {} }

/// An upload that reports its end through a callback.
public final class UploadTask: Sendable {
    public init() {}
    public func start(completion: @escaping @Sendable ((any Error)?) -> Void) { completion(nil) }
    public func stop() {}
    public func attach(_ image: Image) {}
}
public let task = UploadTask()

public struct Image: Sendable { public init(data: Data) throws {} }
public struct Config: Sendable { public init(parsing text: String) throws {} }

public enum Network {
    public static func probe(_ host: String, completion: @escaping @Sendable (Bool) -> Void) { completion(true) }
}

public final class Session: Sendable {
    public var isSignedIn: Bool { true }
}
public let session = Session()
public final class SignIn: ConcurrentOperation, @unchecked Sendable {
    public init(session: Session) { super.init(name: "sign in") }
    override public func execute() { finish() }
}

public final class Client: Sendable {
    public func get(_ url: String, completion: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        completion(.success(Data()))
    }
}
public let client = Client()

public final class Cache: Sendable { public func store(_ data: Data) {} }
public let cache = Cache()
public final class Metrics: Sendable { public func count(_ name: String) {} }
public let metrics = Metrics()
public func log(_ message: String) { print(message) }

public struct Page: Sendable { public let links = ["a", "b"] }
public let page = Page()
public func index(_ link: String) {}

public func syncContacts() throws {}
public func syncCalendars() throws {}

public let download = ClosureProcedure<Data>(name: "download") { Data() }
public let save = ClosureProcedure<Void>(name: "save") {}
public let upload = ClosureProcedure<Void>(name: "upload") {}
public let fetch = ClosureProcedure<Data>(name: "fetch") { Data() }
public let showAlert = ClosureProcedure<Void>(name: "alert") {}
public let otherAlert = ClosureProcedure<Void>(name: "other alert") {}
