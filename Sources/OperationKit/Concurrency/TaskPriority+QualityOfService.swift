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
