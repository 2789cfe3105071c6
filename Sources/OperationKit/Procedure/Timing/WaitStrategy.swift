// WaitStrategy: how long a RetryOperation or a RepeatProcedure waits before its next attempt —
// nothing, a constant, a growing series (incrementing, Fibonacci, exponential), a random wait, or a closure.

/// How long to wait before the next attempt of a ``RetryOperation`` or a ``RepeatProcedure``.
///
/// The wait after attempt *n* (from 1) is ``delay(after:)``. It runs on a timer of the clock the
/// procedure uses (its own, else its queue's, else real time) and holds no thread and no
/// concurrency slot.
///
/// ```swift
/// let waits = WaitStrategy.fibonacci(period: .seconds(1), maximum: .seconds(30))
/// let first = waits.delay(after: 1)   // 1 s; then 1, 2, 3, 5, 8 … 30, 30 s
/// ```
///
/// Every wait is clamped between zero and about 146 years, so no strategy makes a negative wait
/// or overflows for a late attempt. (``RetryOperation/WaitStrategy`` is this type.) It is not
/// `Hashable`: a ``custom(_:)`` strategy holds a closure.
public enum WaitStrategy: Sendable {
    /// No wait: the next attempt starts on the thread that finished the previous one.
    case immediate
    /// The same wait before each attempt (``constant(_:)`` is another name for it).
    case fixed(Duration)
    /// `initial` after the first attempt, then `increment` more after each further one (a
    /// negative increment shrinks the wait, never below zero), at most `maximum`.
    case incrementing(initial: Duration, increment: Duration, maximum: Duration? = nil)
    /// `period` times the Fibonacci numbers 1, 1, 2, 3, 5, 8 … (the wait after attempt *n* is
    /// `period × F(n)`), at most `maximum`.
    case fibonacci(period: Duration, maximum: Duration? = nil)
    /// `initial` after the first attempt, then `multiplier` times longer after each further
    /// one, at most `maximum`; then each wait is scaled by a random factor in
    /// `max(0, 1 - jitter) ... 1 + jitter`, so with jitter a wait may exceed `maximum` by up to
    /// that factor.
    case exponential(initial: Duration, multiplier: Double = 2, maximum: Duration? = nil, jitter: Double = 0)
    /// A random wait between `minimum` and `maximum` (both included), a new one each time. A
    /// `maximum` below `minimum` means `minimum`.
    case random(minimum: Duration, maximum: Duration)
    /// The wait `delay(attempt)` returns after attempt `attempt` (from 1). Called once per wait,
    /// on the thread that finished the attempt; it must not block.
    case custom(@Sendable (_ attempt: Int) -> Duration)

    /// The same wait before each attempt: ``fixed(_:)`` under ProcedureKit's name.
    ///
    /// - Parameter duration: The wait.
    /// - Returns: `.fixed(duration)`.
    public static func constant(_ duration: Duration) -> WaitStrategy { .fixed(duration) }

    /// The wait before attempt `attempt + 1`, once attempt `attempt` has ended.
    ///
    /// - Parameter attempt: The number of the attempt that ended, from 1 (0 and below count as 1).
    /// - Returns: The wait, never negative; `.zero` for ``immediate``. For ``exponential(initial:multiplier:maximum:jitter:)``
    ///   with jitter and for ``random(minimum:maximum:)``, a new random value each call.
    public func delay(after attempt: Int) -> Duration {
        let attempt = max(1, attempt)
        switch self {
        case .immediate:
            return .zero
        case .fixed(let duration):
            return max(duration, .zero)
        case .incrementing(let initial, let increment, let maximum):
            let seconds = initial.seconds + Double(attempt - 1) * increment.seconds
            return Self.clamped(seconds, maximum: maximum)
        case .fibonacci(let period, let maximum):
            var (previous, current) = (0.0, 1.0)  // F(0), F(1)
            for _ in 1..<attempt {
                (previous, current) = (current, previous + current)
                if current > 1e300 { break }  // far beyond any clamp
            }
            return Self.clamped(period.seconds * current, maximum: maximum)
        case .exponential(let initial, let multiplier, let maximum, let jitter):
            var seconds = initial.seconds
            for _ in 1..<attempt {
                seconds *= multiplier
                if seconds > 1e300 { break }
            }
            if let maximum { seconds = min(seconds, maximum.seconds) }
            if jitter > 0 { seconds *= Double.random(in: max(0, 1 - jitter)...(1 + jitter)) }
            return Self.clamped(seconds)
        case .random(let minimum, let maximum):
            let (low, high) = (minimum.seconds, max(minimum.seconds, maximum.seconds))
            return Self.clamped(low == high ? low : Double.random(in: low...high))
        case .custom(let delay):
            return Self.clamped(delay(attempt).seconds)
        }
    }

    /// `seconds`, at most `maximum`, as a duration between zero and about 146 years.
    static func clamped(_ seconds: Double, maximum: Duration? = nil) -> Duration {
        var seconds = seconds
        if let maximum { seconds = min(seconds, maximum.seconds) }
        guard seconds.isFinite || seconds > 0 else { return .zero }  // NaN, -inf
        let nanoseconds = min((seconds * 1e9).rounded(), Double(Int64.max / 2))
        return .nanoseconds(Int64(max(0, nanoseconds)))
    }
}

extension WaitStrategy: CustomStringConvertible {
    /// The strategy, as written in code (a custom one as `custom(…)`).
    public var description: String {
        switch self {
        case .immediate: "immediate"
        case .fixed(let duration): "fixed(\(duration))"
        case .incrementing(let initial, let increment, let maximum):
            "incrementing(initial: \(initial), increment: \(increment)\(maximum.map { ", maximum: \($0)" } ?? ""))"
        case .fibonacci(let period, let maximum):
            "fibonacci(period: \(period)\(maximum.map { ", maximum: \($0)" } ?? ""))"
        case .exponential(let initial, let multiplier, let maximum, let jitter):
            "exponential(initial: \(initial), multiplier: \(multiplier)\(maximum.map { ", maximum: \($0)" } ?? ""), jitter: \(jitter))"
        case .random(let minimum, let maximum): "random(minimum: \(minimum), maximum: \(maximum))"
        case .custom: "custom(…)"
        }
    }
}
