// What the DocC catalog's Procedures.md snippet takes for granted.
import Foundation
import OperationKit

public let url = URL(string: "https://example.com/data")!
public let queue = ConcurrentOperationQueue(name: "work")

public final class Client: Sendable {
    public func get(_ url: URL, completion: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        completion(.success(Data()))
    }
}
public let client = Client()
