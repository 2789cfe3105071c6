// LoggingInstrument.Levels: the swift-log level of each kind of event (or none), with defaults
// that keep a logger at `.info` quiet while operations succeed.

import Logging

extension LoggingInstrument {
    /// The level at which each kind of event is logged; `nil` leaves that kind out.
    ///
    /// The defaults follow swift-log's guidance, so that a logger at `.info` (the usual production
    /// level) stays quiet while work succeeds: the steps of an operation's life at `trace`, its
    /// start and end at `debug`, a retry at `info` (something went wrong and is being handled) and
    /// a failure at `warning`. The application chose to install the instrument, so a failed
    /// operation — its own work gone wrong — is worth a line at the usual level.
    ///
    /// | event | default |
    /// |---|---|
    /// | added, ready, conditions evaluated, exclusivity waited or granted, produced | `trace` |
    /// | started, cancelled, finished (succeeded or cancelled) | `debug` |
    /// | retrying | `info` |
    /// | finished (failed) | `warning` |
    /// | workflow task pending or ready | `trace` |
    /// | workflow task executing, finished or cancelled | `debug` |
    /// | workflow task failed | `warning` |
    /// | state machine transition | `trace` |
    public struct Levels: Sendable {
        /// An operation was added to a queue.
        public var added: Logger.Level? = .trace
        /// An operation's dependencies have finished.
        public var ready: Logger.Level? = .trace
        /// An operation's `execute()` is about to run.
        public var started: Logger.Level? = .debug
        /// An operation was cancelled (the request; its finish is logged as well).
        public var cancelled: Logger.Level? = .debug
        /// An operation finished without errors.
        public var succeeded: Logger.Level? = .debug
        /// An operation finished with errors, not cancelled.
        public var failed: Logger.Level? = .warning
        /// An operation finished cancelled.
        public var finishedCancelled: Logger.Level? = .debug
        /// A procedure's conditions were decided.
        public var conditionsEvaluated: Logger.Level? = .trace
        /// A procedure waits for, or was granted, mutually exclusive categories.
        public var exclusivity: Logger.Level? = .trace
        /// A retry starts another attempt.
        public var retrying: Logger.Level? = .info
        /// A procedure produced an operation.
        public var produced: Logger.Level? = .trace
        /// A workflow task became pending or ready.
        public var workflowTaskWaiting: Logger.Level? = .trace
        /// A workflow task's run started.
        public var workflowTaskExecuting: Logger.Level? = .debug
        /// A workflow task finished.
        public var workflowTaskFinished: Logger.Level? = .debug
        /// A workflow task failed.
        public var workflowTaskFailed: Logger.Level? = .warning
        /// A workflow task was cancelled.
        public var workflowTaskCancelled: Logger.Level? = .debug
        /// A state machine moved from one state to another.
        public var stateMachineTransition: Logger.Level? = .trace

        /// The defaults (see ``LoggingInstrument/Levels``).
        public init() {}

        /// Every kind of event at `level`: to see everything while debugging.
        ///
        /// - Parameter level: The level of every event.
        /// - Returns: The levels.
        public static func all(_ level: Logger.Level) -> Levels {
            var levels = Levels()
            levels.added = level
            levels.ready = level
            levels.started = level
            levels.cancelled = level
            levels.succeeded = level
            levels.failed = level
            levels.finishedCancelled = level
            levels.conditionsEvaluated = level
            levels.exclusivity = level
            levels.retrying = level
            levels.produced = level
            levels.workflowTaskWaiting = level
            levels.workflowTaskExecuting = level
            levels.workflowTaskFinished = level
            levels.workflowTaskFailed = level
            levels.workflowTaskCancelled = level
            levels.stateMachineTransition = level
            return levels
        }
    }
}
