// What the DocC catalog's GettingStarted.md snippets take for granted.
import Foundation
import OperationKit

public let url = URL(string: "https://example.com/image.png")!
public struct Image: Sendable {}

public final class Client: Sendable {
    public func fetch(_ url: URL, completion: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        completion(.success(Data()))
    }
}
public let client = Client()
public func store(_ result: Result<Data, any Error>) {}
public func resizeImage() {}

public final class Renderer: Sendable {
    public func render(_ source: URL, completion: @escaping @Sendable (Image) -> Void) { completion(Image()) }
}
public let renderer = Renderer()

public let queue = ConcurrentOperationQueue(name: "images")
public let download = ClosureOperation(name: "download") {}
public let resize = ClosureOperation(name: "resize") {}
