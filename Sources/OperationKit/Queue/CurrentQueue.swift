#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// A `pthread_key_t` made on first use. Its global or static holder is initialised statically
/// (an atomic with a constant value), so reading the key is one load: a holder with a key made in
/// its initialiser would be a lazy global, and every read of it a call to `swift_once`.
struct LazyThreadKey: ~Copyable, @unchecked Sendable {  // the atomic is the synchronisation
    /// The key plus one, or 0 before it is made.
    private let keyPlusOne = Atomic<UInt>(0)
    /// What happens to a thread's non-nil value when the thread exits.
    private let destructor: Destructor

    enum Destructor {
        case none
        /// The value is a retained object, released.
        case release
        /// The value was allocated, and is freed.
        case free
    }

    init(destructor: Destructor) {
        self.destructor = destructor
    }

    @inline(__always)
    var key: pthread_key_t {
        let value = keyPlusOne.load(ordering: .acquiring)
        return value != 0 ? pthread_key_t(value - 1) : makeKey()
    }

    /// Makes the key; a thread that loses the race deletes its own.
    @inline(never)
    private func makeKey() -> pthread_key_t {
        var key = pthread_key_t()
        let result: Int32
        switch destructor {
        case .none: result = pthread_key_create(&key, nil)
        case .release: result = pthread_key_create(&key) { raw in if let raw { Unmanaged<AnyObject>.fromOpaque(raw).release() } }
        case .free: result = pthread_key_create(&key) { raw in free(raw) }
        }
        precondition(result == 0, "pthread_key_create failed with \(result)")
        let (won, current) = keyPlusOne.compareExchange(
            expected: 0, desired: UInt(key) + 1, ordering: .acquiringAndReleasing)
        if won { return key }
        pthread_key_delete(key)
        return pthread_key_t(current - 1)
    }
}

/// A thread-local, unretained object pointer.
struct ThreadLocalReference<Object: AnyObject>: ~Copyable, @unchecked Sendable {  // the key is the synchronisation
    private let lazyKey: LazyThreadKey
    private var key: pthread_key_t { lazyKey.key }

    /// - Parameter ownsValues: Whether a value set with ``setRetained(_:)`` is released when its
    ///   thread exits. Otherwise values are never retained (see ``with(_:_:)``).
    init(ownsValues: Bool = false) {
        lazyKey = LazyThreadKey(destructor: ownsValues ? .release : .none)
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

/// A thread-local, unretained object pointer kept in a word of its own per thread: after the
/// first use on a thread, setting it is one `pthread_getspecific` and a store, where
/// ``ThreadLocalReference/with(_:_:)`` costs two `pthread_setspecific` calls (about 70
/// instructions) — for a value set around every operation a worker runs.
struct ThreadLocalWord<Object: AnyObject>: ~Copyable, @unchecked Sendable {  // the key is the synchronisation
    /// The word is freed when its thread exits (the object in it is not retained).
    private let lazyKey = LazyThreadKey(destructor: .free)
    private var key: pthread_key_t { lazyKey.key }

    init() {}

    /// This thread's word, or `nil` if it has none yet.
    @inline(__always)
    private var existingWord: UnsafeMutablePointer<UnsafeMutableRawPointer?>? {
        let raw: UnsafeMutableRawPointer? = pthread_getspecific(key)
        return raw?.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
    }

    /// This thread's word, made on its first use.
    @inline(__always)
    private var word: UnsafeMutablePointer<UnsafeMutableRawPointer?> {
        existingWord ?? makeWord()
    }

    @inline(never)
    private func makeWord() -> UnsafeMutablePointer<UnsafeMutableRawPointer?> {
        let word = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: 1)
        word.initialize(to: nil)
        pthread_setspecific(key, UnsafeMutableRawPointer(word))
        return word
    }

    /// Whether `object` is the value on this thread, without retaining anything.
    func holds(_ object: Object) -> Bool {
        guard let word = existingWord else { return false }
        return word.pointee == Unmanaged.passUnretained(object).toOpaque()
    }

    /// Runs `body` with `object` as this thread's value; the caller keeps `object` alive.
    func with<Result>(_ object: Object, _ body: () -> Result) -> Result {
        // (Only this thread touches its word, and it stays allocated until the thread exits.)
        let word = self.word
        let previous = word.pointee
        word.pointee = Unmanaged.passUnretained(object).toOpaque()
        defer { word.pointee = previous }
        return body()
    }
}

/// The operation a queue worker is running on this thread (set while it starts and executes).
let WorkerOperation = ThreadLocalWord<ConcurrentOperation>()
