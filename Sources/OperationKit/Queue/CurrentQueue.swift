#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A thread-local pointer to the queue whose worker is running on this thread. It is not
/// retained: the worker's dispatched block keeps the queue alive while it is set.
enum CurrentQueue {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let result = pthread_key_create(&key, nil)
        precondition(result == 0, "pthread_key_create failed with \(result)")
        return key
    }()

    static var value: ConcurrentOperationQueue? {
        guard let raw = pthread_getspecific(key) else { return nil }
        return Unmanaged<ConcurrentOperationQueue>.fromOpaque(raw).takeUnretainedValue()
    }

    /// Runs `body` with `queue` as the current queue of this thread.
    static func with<Result>(_ queue: ConcurrentOperationQueue, _ body: () -> Result) -> Result {
        let previous = pthread_getspecific(key)
        pthread_setspecific(key, Unmanaged.passUnretained(queue).toOpaque())
        defer { pthread_setspecific(key, previous) }
        return body()
    }
}
