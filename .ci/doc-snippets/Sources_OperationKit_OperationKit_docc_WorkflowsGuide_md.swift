// What the DocC catalog's WorkflowsGuide.md snippet takes for granted.
import Foundation

public let url = URL(string: "https://example.com/image.png")!

public final class Client: Sendable {
    public func get(_ url: URL, completion: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        completion(Data(), nil)
    }
}
public let client = Client()
public func resized(_ data: Data) -> Data { data }
