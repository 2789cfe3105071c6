// CoarseClock: a cheap monotonic millisecond stamp in 32 bits, for the "time since added / since
// started" of a snapshot (written when an operation is added and when it starts).

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A monotonic clock read at the kernel's tick resolution (a few milliseconds), kept as 32-bit
/// milliseconds that wrap every 49.7 days. Two stamps less than 24.8 days apart give the time
/// between them (to the tick) by wrapping subtraction; 0 means "never stamped".
///
/// On Linux it reads `CLOCK_MONOTONIC_COARSE`, served by the vDSO without a system call or a
/// timestamp-counter read (a few nanoseconds); elsewhere the ordinary monotonic clock.
enum CoarseClock {
    /// The current stamp, never 0.
    @inline(__always)
    static func stamp() -> UInt32 {
        var time = timespec()
        #if os(Linux)
        clock_gettime(CLOCK_MONOTONIC_COARSE, &time)
        #else
        clock_gettime(CLOCK_MONOTONIC, &time)
        #endif
        let milliseconds = UInt32(truncatingIfNeeded: Int(time.tv_sec) &* 1_000 &+ Int(time.tv_nsec) / 1_000_000)
        return milliseconds == 0 ? 1 : milliseconds
    }

    /// The time from `stamp` to `now`, or nil if `stamp` is 0 (never stamped). A `stamp` read
    /// after `now` (by another thread) gives zero.
    static func elapsed(since stamp: UInt32, now: UInt32) -> Duration? {
        guard stamp != 0 else { return nil }
        let difference = now &- stamp
        return .milliseconds(difference > UInt32.max / 2 ? 0 : Int64(difference))
    }
}
