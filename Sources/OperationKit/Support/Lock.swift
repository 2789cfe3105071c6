#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The one lock type of OperationKit: a `pthread_mutex_t` that lives at a fixed heap address.
///
/// The mutex is the tail element of a `ManagedBuffer`, so its address never changes and is never
/// produced by `&` on a stored property (which Swift does not promise to be stable). We do not use
/// `Synchronization.Mutex`: with Swift 6.3.1 on Linux the thread sanitizer reports its `withLock`
/// from two threads as a data race, which would hide real races. See Documentation/Architecture.md.
final class LockStorage: ManagedBuffer<Void, pthread_mutex_t> {
    static func make(recursive: Bool) -> LockStorage {
        let buffer = LockStorage.create(minimumCapacity: 1) { _ in () }
        let storage = unsafeDowncast(buffer, to: LockStorage.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            if recursive {
                pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE))
            }
            let result = pthread_mutex_init(mutex, &attributes)
            pthread_mutexattr_destroy(&attributes)
            precondition(result == 0, "pthread_mutex_init failed with \(result)")
        }
        return storage
    }

    deinit {
        _ = withUnsafeMutablePointerToElements { pthread_mutex_destroy($0) }
    }
}

/// A value-type handle on a ``LockStorage``. Copies share the same mutex.
struct Lock: @unchecked Sendable {  // the mutex itself is the synchronisation
    private let storage: LockStorage

    /// Creates a lock. A recursive lock may be taken again by the thread that holds it.
    init(recursive: Bool = false) {
        storage = LockStorage.make(recursive: recursive)
    }

    @inline(__always)
    func lock() {
        storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_lock($0) }
    }

    @inline(__always)
    func unlock() {
        storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_unlock($0) }
    }

    /// Runs `body` with the lock held and returns its result.
    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body()
    }
}
