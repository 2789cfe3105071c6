// Progress as values: OperationProgress (of an operation, a queue, a group or a workflow), the
// policy that coalesces updates, and the token of a progress handler.

/// How far some work has come: an operation's own report, or the aggregate of a queue's, a
/// group's or a workflow's operations.
///
/// For one operation, ``completed`` and ``total`` are what it reported with
/// ``ConcurrentOperation/reportProgress(completed:total:)`` (an operation that never reported is
/// one unit: `0/1`, then `1/1` once finished). For an aggregate they are units of weight — one
/// per operation unless weighted — and ``completed`` counts the finished operations only, while
/// ``fractionCompleted`` also counts the reported fraction of those still running, as
/// Foundation's `Progress` does with its children.
public struct OperationProgress: Sendable, Hashable, CustomStringConvertible {
    /// The units done. For an aggregate, the weight of the operations that have finished
    /// (a cancelled operation finishes too).
    public var completed: Int64
    /// The units of the whole work; 0 when unknown (nothing counted yet).
    public var total: Int64
    /// The fraction done, from 0 to 1: for an aggregate, the finished operations plus the
    /// reported fraction of the running ones, over ``total``.
    public var fractionCompleted: Double
    /// Whether the work is complete: the operation has finished; for an aggregate, every
    /// operation it counts has finished (and, with a set total, ``completed`` reached it).
    public var isFinished: Bool

    /// Creates a progress value.
    ///
    /// - Parameters:
    ///   - completed: The units done.
    ///   - total: The units of the whole work.
    ///   - fractionCompleted: The fraction done; by default `completed / total` (0 if `total` is
    ///     0), clamped to 0…1.
    ///   - isFinished: Whether the work is complete.
    public init(completed: Int64, total: Int64, fractionCompleted: Double? = nil, isFinished: Bool = false) {
        self.completed = completed
        self.total = total
        let fraction = fractionCompleted ?? (total > 0 ? Double(completed) / Double(total) : 0)
        self.fractionCompleted = fraction.isNaN ? 0 : min(1, max(0, fraction))
        self.isFinished = isFinished
    }

    /// Nothing counted yet: `0/0`, not finished.
    public static let empty = OperationProgress(completed: 0, total: 0)

    /// The largest progress weight an operation or a task can have (2^32); a larger one set is
    /// clamped to it, a negative one to 0.
    public static let maximumWeight: Int64 = 1 << 32

    static func clampedWeight(_ weight: Int64) -> Int64 { min(max(weight, 0), maximumWeight) }

    /// For example `3/10 (30%)`, with `finished` once complete.
    public var description: String {
        let percent = Int((fractionCompleted * 100).rounded(.down))
        return "\(completed)/\(total) (\(percent)%)" + (isFinished ? " finished" : "")
    }
}

/// How often progress updates are delivered to a stream or a handler.
public enum ProgressUpdatePolicy: Sendable, Hashable {
    /// At most one update per `interval`, carrying the latest value (the changes between are
    /// coalesced); the first value at once, and the update that makes the work complete at once,
    /// whatever the interval.
    case coalesced(every: Duration)
    /// Every change, in order: one update per change.
    case everyChange

    /// At most ten updates a second: `.coalesced(every: .milliseconds(100))`.
    public static let `default` = ProgressUpdatePolicy.coalesced(every: .milliseconds(100))

    /// The interval, or `nil` for every change.
    var interval: Duration? {
        switch self {
        case .coalesced(let interval): interval > .zero ? interval : nil
        case .everyChange: nil
        }
    }
}

/// A progress handler's registration: ``cancel()`` stops the handler. Dropping the token does
/// not stop it; the handler also stops when the queue, group or workflow it observes is released.
public final class ProgressObservation: Sendable {
    private let stop: @Sendable () -> Void

    init(stop: @escaping @Sendable () -> Void) {
        self.stop = stop
    }

    /// Stops the handler: no call starts after this returns (one running on another thread may
    /// still complete). Calling it again does nothing.
    public func cancel() {
        stop()
    }
}
