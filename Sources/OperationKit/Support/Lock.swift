#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization
#if os(Linux)
internal import COperationKit
#endif

/// The lock of OperationKit: non-recursive, at a fixed heap address.
///
/// On Linux it is a futex word of our own: taking a free lock is one compare-and-swap and giving
/// it back one exchange, where a `pthread_mutex_t` cost about 70 instructions per round trip
/// (an operation takes five). A thread that finds it held watches it briefly, then sleeps in the
/// kernel until the holder wakes it. Elsewhere it is a `pthread_mutex_t`. Documentation/
/// Architecture.md ("Locking") gives the states and why not `Synchronization.Mutex`.
///
/// The lock's memory is an element of a `ManagedBuffer`, so its address never changes and is never
/// produced by `&` on a stored property (which Swift does not promise to be stable). A lock either
/// owns its memory (``init()``) or borrows one of ``LockStripes`` — the lock of every
/// ``ConcurrentOperation``, which saves an allocation per operation.
@usableFromInline
struct Lock: @unchecked Sendable {  // the word (or mutex) itself is the synchronisation
    /// The lock's memory: on Linux a futex word (``LockWord``), elsewhere a `pthread_mutex_t`.
    @usableFromInline let cell: UnsafeMutableRawPointer
    /// Keeps an owned lock's memory alive; `nil` for a striped lock, whose memory lives forever.
    @usableFromInline let storage: LockStorage?

    /// Creates a lock with memory of its own.
    @usableFromInline
    init() {
        self.init(owning: LockStorage.make(count: 1))
    }

    /// A lock on the first cell of `storage`.
    init(owning storage: LockStorage) {
        self.storage = storage
        cell = storage.withUnsafeMutablePointerToElements { UnsafeMutableRawPointer($0) }
    }

    private init(borrowing cell: UnsafeMutableRawPointer) {
        self.cell = cell
        storage = nil
    }

    /// The striped lock for `object`: one of a fixed set of locks, chosen by its address.
    /// Code holding a striped lock must never take another striped lock (two objects may share
    /// one), so such a lock is not recursive and guards only short, non-nesting sections.
    static func striped(for object: AnyObject) -> Lock {
        Lock(borrowing: LockStripes.cell(for: object))
    }

    /// Runs `body` with the lock held and returns its result.
    @inlinable @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body()
    }

    #if os(Linux)
    @usableFromInline var word: UnsafeMutablePointer<Atomic<UInt32>> {
        @inline(__always) get { cell.assumingMemoryBound(to: Atomic<UInt32>.self) }
    }

    @inlinable @inline(__always)
    func lock() {
        if !word.pointee.compareExchange(expected: LockWord.free, desired: LockWord.held, ordering: .acquiring).exchanged {
            lockContended()
        }
    }

    @inlinable @inline(__always)
    func unlock() {
        if word.pointee.exchange(LockWord.free, ordering: .releasing) == LockWord.heldWithSleepers {
            wakeOne()
        }
    }

    /// The lock was not free: watch it a moment, then sleep until a holder's `unlock` wakes us.
    ///
    /// Once a thread may sleep, the word says so (`heldWithSleepers`), and every thread that takes
    /// the lock after sleeping takes it in that state, since others may still sleep: its `unlock`
    /// then wakes one (perhaps none is left; a wake too many costs a system call, never a hang).
    @usableFromInline @inline(never)
    func lockContended() {
        var state = watchWhileHeld()
        if state == LockWord.free,
            word.pointee.compareExchange(expected: LockWord.free, desired: LockWord.held, ordering: .acquiring).exchanged
        {
            return
        }
        while true {
            if state != LockWord.heldWithSleepers,
                word.pointee.exchange(LockWord.heldWithSleepers, ordering: .acquiring) == LockWord.free
            {
                return
            }
            // Returns at once if the word is no longer `heldWithSleepers`.
            operationkit_futex_wait(futexAddress, LockWord.heldWithSleepers)
            state = watchWhileHeld()
        }
    }

    /// Reads the word while it says "held, nobody sleeps", at most `LockWord.watchLimit` times, and
    /// returns the last state read. Critical sections here are a few dozen instructions, so the
    /// holder usually lets go within the watch; a thread already asleep means a long wait, so the
    /// watch stops.
    private func watchWhileHeld() -> UInt32 {
        var remaining = LockWord.watchLimit
        while true {
            let state = word.pointee.load(ordering: .relaxed)
            if state != LockWord.held || remaining == 0 { return state }
            remaining &-= 1
            operationkit_spin_hint()
        }
    }

    @usableFromInline @inline(never)
    func wakeOne() {
        operationkit_futex_wake_one(futexAddress)
    }

    private var futexAddress: UnsafeMutablePointer<UInt32> {
        UnsafeMutablePointer(OpaquePointer(cell))
    }
    #else
    @usableFromInline var mutex: UnsafeMutablePointer<pthread_mutex_t> {
        @inline(__always) get { cell.assumingMemoryBound(to: pthread_mutex_t.self) }
    }

    @inlinable @inline(__always)
    func lock() {
        pthread_mutex_lock(mutex)
    }

    @inlinable @inline(__always)
    func unlock() {
        pthread_mutex_unlock(mutex)
    }
    #endif
}

#if os(Linux)
/// The states of a ``Lock``'s futex word, and how long a thread watches a held lock.
@usableFromInline
enum LockWord {
    @usableFromInline static let free: UInt32 = 0
    /// Held, and no thread sleeps on it: `unlock` makes no system call.
    @usableFromInline static let held: UInt32 = 1
    /// Held, and a thread may sleep on it: `unlock` wakes one.
    @usableFromInline static let heldWithSleepers: UInt32 = 2
    /// Reads of a held lock before sleeping, each with a spin hint: about the length of the
    /// longest critical section on a queue's or an operation's lock (glibc's adaptive mutex, used
    /// here before, also gives up after 100).
    static let watchLimit = 100
}

/// One lock's memory, padded to 64 bytes so that neighbouring stripes do not share a cache line.
@usableFromInline
struct LockCell {
    var word: UInt32 = LockWord.free
    var padding: (UInt32, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
}
#else
/// One lock's memory: a mutex, padded so that neighbouring stripes do not share a cache line.
@usableFromInline
struct LockCell {
    var mutex = pthread_mutex_t()
    var padding: (Int, Int, Int) = (0, 0, 0)
}
#endif

/// Lock cells at fixed addresses.
@usableFromInline
final class LockStorage: ManagedBuffer<Void, LockCell> {
    static func make(count: Int) -> LockStorage {
        let buffer = LockStorage.create(minimumCapacity: count) { _ in () }
        let storage = unsafeDowncast(buffer, to: LockStorage.self)
        storage.withUnsafeMutablePointerToElements { elements in
            #if os(Linux)
            elements.initialize(repeating: LockCell(), count: count)
            #else
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            for index in 0..<count {
                (elements + index).initialize(to: LockCell())
                let mutex = UnsafeMutableRawPointer(elements + index).assumingMemoryBound(to: pthread_mutex_t.self)
                let result = pthread_mutex_init(mutex, &attributes)
                precondition(result == 0, "pthread_mutex_init failed with \(result)")
            }
            pthread_mutexattr_destroy(&attributes)
            #endif
        }
        return storage
    }

    deinit {
        // Only owned (single) locks are ever released; the stripes live for the process.
        #if !os(Linux)
        withUnsafeMutablePointerToElements { elements in
            pthread_mutex_destroy(UnsafeMutableRawPointer(elements).assumingMemoryBound(to: pthread_mutex_t.self))
        }
        #endif
    }
}

/// A recursive lock: a `pthread_mutex_t` of type `PTHREAD_MUTEX_RECURSIVE` at a fixed heap
/// address, which its holder may take again. For the two places that re-enter their lock: a public
/// ``OperationStateMachine`` (`withLock(_:)`) and a ``GroupOperation``'s children.
struct RecursiveLock: @unchecked Sendable {  // the mutex itself is the synchronisation
    private let storage: RecursiveLockStorage
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        storage = RecursiveLockStorage.make()
        mutex = storage.withUnsafeMutablePointerToElements { $0 }
    }

    func lock() {
        pthread_mutex_lock(mutex)
    }

    func unlock() {
        pthread_mutex_unlock(mutex)
    }

    /// Runs `body` with the lock held and returns its result.
    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// The memory of a ``RecursiveLock``.
final class RecursiveLockStorage: ManagedBuffer<Void, pthread_mutex_t> {
    static func make() -> RecursiveLockStorage {
        let buffer = RecursiveLockStorage.create(minimumCapacity: 1) { _ in () }
        let storage = unsafeDowncast(buffer, to: RecursiveLockStorage.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            mutex.initialize(to: pthread_mutex_t())
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE))
            let result = pthread_mutex_init(mutex, &attributes)
            precondition(result == 0, "pthread_mutex_init failed with \(result)")
            pthread_mutexattr_destroy(&attributes)
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointerToElements { mutex in
            _ = pthread_mutex_destroy(mutex)
        }
    }
}

/// The striped locks shared by all operations: 1,024 non-recursive locks.
enum LockStripes {
    static let count = 1024
    /// The address of the first stripe, or 0 before the first lock. An atomic with a constant
    /// initial value is initialised statically, so reading it is one load; a lazy `static let`
    /// would call `swift_once` on every lock (about ten instructions, several times per operation).
    private static let baseAddress = Atomic<UInt>(0)

    private static var base: UnsafeMutablePointer<LockCell> {
        @inline(__always) get {
            let address = baseAddress.load(ordering: .acquiring)
            if let base = UnsafeMutablePointer<LockCell>(bitPattern: address) { return base }
            return makeBase()
        }
    }

    /// Creates the stripes once; a thread that loses the race frees its own buffer.
    @inline(never)
    private static func makeBase() -> UnsafeMutablePointer<LockCell> {
        let storage = LockStorage.make(count: count)
        let mine = storage.withUnsafeMutablePointerToElements { $0 }
        let (won, current) = baseAddress.compareExchange(
            expected: 0, desired: UInt(bitPattern: mine), ordering: .acquiringAndReleasing)
        guard won else { return UnsafeMutablePointer(bitPattern: current)! }
        // The winner's buffer is never released, and its locks are the synchronisation.
        _ = Unmanaged.passRetained(storage)
        return mine
    }

    static func cell(for object: AnyObject) -> UnsafeMutableRawPointer {
        // The address itself: `ObjectIdentifier.hashValue` runs SipHash (about 80 instructions) on every lock.
        let address = UInt(bitPattern: ObjectIdentifier(object))
        let index = Int((address >> 4) & UInt(count - 1))
        return UnsafeMutableRawPointer(base + index)
    }
}
