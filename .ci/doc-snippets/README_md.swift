// What README.md's snippets take for granted.
import Foundation

public let url = URL(string: "https://example.com/a")!
public let urls = [url, URL(string: "https://example.com/b")!]

/// Downloads `url`'s contents.
public func fetch(_ url: URL) async throws -> Data { Data(url.absoluteString.utf8) }
