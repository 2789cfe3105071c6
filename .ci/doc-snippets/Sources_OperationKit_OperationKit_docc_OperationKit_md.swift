// What the DocC catalog's OperationKit.md snippet takes for granted.
import Foundation

public let url = URL(string: "https://example.com/image.png")!

public final class Client: Sendable {
    public func fetch(_ url: URL, completion: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        completion(.success(Data()))
    }
}
public let client = Client()
public func resizeImage() {}
