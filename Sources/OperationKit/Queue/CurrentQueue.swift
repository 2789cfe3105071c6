#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A thread-local, unretained object pointer.
struct ThreadLocalReference<Object: AnyObject>: @unchecked Sendable {  // the key is immutable
    private let key: pthread_key_t

    /// - Parameter ownsValues: Whether a value set with ``setRetained(_:)`` is released when its
    ///   thread exits. Otherwise values are never retained (see ``with(_:_:)``).
    init(ownsValues: Bool = false) {
        var key = pthread_key_t()
        let result = ownsValues
            ? pthread_key_create(&key) { raw in if let raw { Unmanaged<AnyObject>.fromOpaque(raw).release() } }
            : pthread_key_create(&key, nil)
        precondition(result == 0, "pthread_key_create failed with \(result)")
        self.key = key
    }

    /// Sets this thread's value, retained until the thread exits. Only for a key that owns its
    /// values, and only once per thread.
    func setRetained(_ object: Object) {
        pthread_setspecific(key, Unmanaged<AnyObject>.passRetained(object).toOpaque())
    }

    var value: Object? {
        guard let raw = pthread_getspecific(key) else { return nil }
        return Unmanaged<Object>.fromOpaque(raw).takeUnretainedValue()
    }

    /// This thread's value, unretained: valid while whoever set it keeps it alive (for a value set
    /// with ``with(_:_:)``, until `body` returns).
    var unmanagedValue: Unmanaged<Object>? {
        guard let raw = pthread_getspecific(key) else { return nil }
        return Unmanaged<Object>.fromOpaque(raw)
    }

    /// Whether `object` is the value on this thread, without retaining anything.
    func holds(_ object: Object) -> Bool {
        // `pthread_getspecific` returns an implicitly unwrapped optional: keep it optional.
        let raw: UnsafeMutableRawPointer? = pthread_getspecific(key)
        return raw == Unmanaged.passUnretained(object).toOpaque()
    }

    /// Runs `body` with `object` as this thread's value; the caller keeps `object` alive.
    func with<Result>(_ object: Object, _ body: () -> Result) -> Result {
        let previous = pthread_getspecific(key)
        pthread_setspecific(key, Unmanaged.passUnretained(object).toOpaque())
        defer { pthread_setspecific(key, previous) }
        return body()
    }
}

/// The queue whose worker is running on this thread (set for the worker's whole loop).
let CurrentQueue = ThreadLocalReference<ConcurrentOperationQueue>()

/// The operation a queue worker is running on this thread (set while it starts and executes).
let WorkerOperation = ThreadLocalReference<ConcurrentOperation>()
