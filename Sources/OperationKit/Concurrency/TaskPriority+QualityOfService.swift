import Dispatch

extension TaskPriority {
    /// The task priority that matches a dispatch quality of service, or `nil` for `.unspecified`.
    /// Interactive work gets `.high`, the highest priority Swift names.
    init?(_ qualityOfService: DispatchQoS.QoSClass) {
        switch qualityOfService {
        case .userInteractive, .userInitiated: self = .high
        case .default: self = .medium
        case .utility: self = .utility
        case .background: self = .background
        default: return nil
        }
    }
}

extension ConcurrentOperation {
    /// On the thread that runs ``execute()``: the priority for a task that does the work. The
    /// operation's quality of service if it set one, else its queue's; `nil` when neither says.
    /// `queuePriority` plays no part: it only orders the start among the queue's operations, and
    /// the start has happened.
    final var taskPriorityForExecution: TaskPriority? {
        // Written under the lock before the queue published the operation; read by the thread
        // the queue runs it on.
        var qualityOfService = queuedQualityOfService
        if qualityOfService == .unspecified {
            qualityOfService = WorkerOperation.holds(self)
                ? CurrentQueue.value?.qualityOfService ?? .unspecified
                : self.qualityOfService  // started by hand
        }
        return TaskPriority(qualityOfService)
    }
}

/// A task priority, or none, as a plain integer: `TaskPriority` is a resilient type, so every copy
/// or comparison of a `TaskPriority?` goes through value-witness calls (a few hundred instructions
/// per async operation on the runner's hand-off path). The code of `nil` is `none`; that of a
/// priority is its raw value.
struct TaskPriorityCode: Equatable {
    let rawValue: UInt16

    static let none = TaskPriorityCode(rawValue: 0x100)

    private init(rawValue: UInt16) {
        self.rawValue = rawValue
    }

    init(_ priority: TaskPriority?) {
        rawValue = priority.map { UInt16($0.rawValue) } ?? 0x100
    }

    /// The code of `TaskPriority(qualityOfService)`, without making the priority.
    init(_ qualityOfService: DispatchQoS.QoSClass) {
        switch qualityOfService {
        case .userInteractive, .userInitiated: self = Self.high
        case .default: self = Self.medium
        case .utility: self = Self.utility
        case .background: self = Self.background
        default: self = .none
        }
    }

    private static let high = TaskPriorityCode(TaskPriority.high)
    private static let medium = TaskPriorityCode(TaskPriority.medium)
    private static let utility = TaskPriorityCode(TaskPriority.utility)
    private static let background = TaskPriorityCode(TaskPriority.background)

    /// The priority this code stands for.
    var priority: TaskPriority? {
        self == .none ? nil : TaskPriority(rawValue: UInt8(truncatingIfNeeded: rawValue))
    }
}
