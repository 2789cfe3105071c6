#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// The one lock type of OperationKit: a `pthread_mutex_t` that lives at a fixed heap address.
///
/// The mutex is an element of a `ManagedBuffer`, so its address never changes and is never
/// produced by `&` on a stored property (which Swift does not promise to be stable). We do not use
/// `Synchronization.Mutex`: with Swift 6.3.1 on Linux the thread sanitizer reports its `withLock`
/// from two threads as a data race, which would hide real races. See Documentation/Architecture.md.
///
/// A lock either owns its mutex (``init(recursive:)``) or borrows one of ``LockStripes`` — the
/// lock of every ``ConcurrentOperation``, which saves an allocation per operation.
@usableFromInline
struct Lock: @unchecked Sendable {  // the mutex itself is the synchronisation
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Keeps an owned mutex alive; `nil` for a striped lock, whose mutex lives forever.
    @usableFromInline let storage: LockStorage?

    /// Creates a lock with a mutex of its own. A recursive lock may be re-taken by its holder.
    @usableFromInline
    init(recursive: Bool = false) {
        self.init(owning: LockStorage.make(count: 1, recursive: recursive))
    }

    /// A lock on the first mutex of `storage`.
    init(owning storage: LockStorage) {
        self.storage = storage
        mutex = storage.withUnsafeMutablePointerToElements { UnsafeMutableRawPointer($0).assumingMemoryBound(to: pthread_mutex_t.self) }
    }

    private init(borrowing mutex: UnsafeMutablePointer<pthread_mutex_t>) {
        self.mutex = mutex
        storage = nil
    }

    /// The striped lock for `object`: one of a fixed set of mutexes, chosen by its address.
    /// Code holding a striped lock must never take another striped lock (two objects may share
    /// one), so such a lock is not recursive and guards only short, non-nesting sections.
    static func striped(for object: AnyObject) -> Lock {
        Lock(borrowing: LockStripes.mutex(for: object))
    }

    @inlinable @inline(__always)
    func lock() {
        pthread_mutex_lock(mutex)
    }

    @inlinable @inline(__always)
    func unlock() {
        pthread_mutex_unlock(mutex)
    }

    /// Runs `body` with the lock held and returns its result.
    @inlinable @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A mutex padded to a cache line, so that neighbouring stripes do not share one.
@usableFromInline
struct PaddedMutex {
    var mutex = pthread_mutex_t()
    var padding: (Int, Int, Int) = (0, 0, 0)
}

/// Mutexes at fixed addresses, each padded to its own cache line.
@usableFromInline
final class LockStorage: ManagedBuffer<Void, PaddedMutex> {
    static func make(count: Int, recursive: Bool) -> LockStorage {
        let buffer = LockStorage.create(minimumCapacity: count) { _ in () }
        let storage = unsafeDowncast(buffer, to: LockStorage.self)
        storage.withUnsafeMutablePointerToElements { elements in
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            if recursive {
                pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE))
            } else {
                #if canImport(Glibc)
                // Spin briefly before sleeping: every critical section here is a few dozen
                // instructions, so a waiter usually gets the lock without a futex round trip.
                pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
                #endif
            }
            for index in 0..<count {
                (elements + index).initialize(to: PaddedMutex())
                let mutex = UnsafeMutableRawPointer(elements + index).assumingMemoryBound(to: pthread_mutex_t.self)
                let result = pthread_mutex_init(mutex, &attributes)
                precondition(result == 0, "pthread_mutex_init failed with \(result)")
            }
            pthread_mutexattr_destroy(&attributes)
        }
        return storage
    }

    deinit {
        // Only owned (single) locks are ever released; the stripes live for the process.
        withUnsafeMutablePointerToElements { elements in
            let mutex = UnsafeMutableRawPointer(elements).assumingMemoryBound(to: pthread_mutex_t.self)
            pthread_mutex_destroy(mutex)
        }
    }
}

/// The striped locks shared by all operations: 1,024 non-recursive mutexes.
enum LockStripes {
    static let count = 1024
    /// The address of the first stripe, or 0 before the first lock. An atomic with a constant
    /// initial value is initialised statically, so reading it is one load; a lazy `static let`
    /// would call `swift_once` on every lock (about ten instructions, several times per operation).
    private static let baseAddress = Atomic<UInt>(0)

    private static var base: UnsafeMutablePointer<PaddedMutex> {
        @inline(__always) get {
            let address = baseAddress.load(ordering: .acquiring)
            if let base = UnsafeMutablePointer<PaddedMutex>(bitPattern: address) { return base }
            return makeBase()
        }
    }

    /// Creates the stripes once; a thread that loses the race frees its own buffer.
    @inline(never)
    private static func makeBase() -> UnsafeMutablePointer<PaddedMutex> {
        let storage = LockStorage.make(count: count, recursive: false)
        let mine = storage.withUnsafeMutablePointerToElements { $0 }
        let (won, current) = baseAddress.compareExchange(
            expected: 0, desired: UInt(bitPattern: mine), ordering: .acquiringAndReleasing)
        guard won else { return UnsafeMutablePointer(bitPattern: current)! }
        // The winner's buffer is never released, and its mutexes are the synchronisation.
        _ = Unmanaged.passRetained(storage)
        return mine
    }

    static func mutex(for object: AnyObject) -> UnsafeMutablePointer<pthread_mutex_t> {
        // The address itself: `ObjectIdentifier.hashValue` runs SipHash (about 80 instructions) on every lock.
        let address = UInt(bitPattern: ObjectIdentifier(object))
        let index = Int((address >> 4) & UInt(count - 1))
        return UnsafeMutableRawPointer(base + index).assumingMemoryBound(to: pthread_mutex_t.self)
    }
}
