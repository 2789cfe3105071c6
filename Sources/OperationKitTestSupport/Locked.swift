// A value behind a lock, for test state that several threads touch (an `NSLock`, which the
// thread sanitizer understands).
import Foundation

/// A value that several threads read and change, always under a lock.
///
/// ```swift
/// let seen = Locked<Set<String>>([])
/// seen.withLock { _ = $0.insert("download") }
/// ```
///
/// It uses an `NSLock`, so runs under the thread sanitizer see every access ordered.
public final class Locked<Value> {
    private let lock = NSLock()
    private var value: Value

    /// Creates the box.
    ///
    /// - Parameter value: The first value.
    public init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock.
    ///
    /// - Parameter body: Reads or changes the value; must not take this lock again.
    /// - Returns: What `body` returns.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

// `value` is only touched under `lock`.
extension Locked: @unchecked Sendable where Value: Sendable {}
