/// A strong reference to an object, or none, kept as unmanaged bits: setting it retains the new
/// object and releases the old one, as a strong field would, but nothing releases it when its
/// owner goes. The owner's `deinit` calls ``release()`` itself, after testing ``isNil`` — for a
/// field that is usually `nil`, one test instead of the release call that the compiler emits for
/// every strong field (see `ProcedureOperation`'s side objects).
struct ManualReference<Object: AnyObject> {
    private var bits: Unmanaged<Object>?

    /// Holds `object` (retained), or nothing.
    @inline(__always)
    init(_ object: Object?) {
        bits = object.map { Unmanaged.passRetained($0) }
    }

    /// Whether it holds nothing.
    @inline(__always)
    var isNil: Bool { bits == nil }

    /// The object held: reading does not take it over; setting retains the new object and
    /// releases the old one.
    var object: Object? {
        @inline(__always) get { bits?.takeUnretainedValue() }
        set {
            let old = bits
            bits = newValue.map { Unmanaged.passRetained($0) }
            old?.release()
        }
    }

    /// Gives back the retain on the object held, if any: only from the owner's `deinit`, once.
    @inline(__always)
    func release() {
        bits?.release()
    }
}
