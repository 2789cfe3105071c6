/// The one error type OperationKit throws.
///
/// Every misuse — adding an operation twice, a dependency cycle, finishing an operation that never
/// started — is reported as an `OperationError` with a ``Code`` and the names of the operations
/// involved. Nothing in OperationKit traps on bad input: the call that was wrong throws, and the
/// queue and every other operation carry on.
public struct OperationError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong. New codes may be added in later versions, so switch with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: Hashable, Sendable {
            case illegalTransition
            case noExecutionBlock
            case alreadyStarted
            case alreadyFinished
            case notStarted
            case alreadyEnqueued
            case enqueuedInAnotherQueue
            case managedByQueue
            case notReady
            case selfDependency
            case dependencyCycle
            case dependentAlreadyExecuting
            case dependentAlreadyFinished
            case invalidMaxConcurrentOperationCount
            case conditionFailed
            case dependenciesFailed
            case dependenciesCancelled
            case inputUnavailable
            case timedOut
            case invalidTimeout
            case tooLateToAddCondition
            case tooLateToAddObserver
            case requiresQueue
            case notExecuting
            case taskAlreadyInWorkflow
            case prerequisiteNotInWorkflow
            case missingPrerequisiteKeys
            case externalConditionNotFulfilled
            case cancelled
            case noValue
            case taskFailed
            case prerequisiteFailed
            case asynchronousClosure
            case eventAlreadyPast
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// An event the lifecycle does not allow in its current state (for example `finish()` on a
        /// state machine that never started). Nothing changed.
        public static let illegalTransition = Code(.illegalTransition)
        /// `start()` on an ``OperationStateMachine`` that has no execution block.
        public static let noExecutionBlock = Code(.noExecutionBlock)
        /// The operation has already started (or was configured too late).
        public static let alreadyStarted = Code(.alreadyStarted)
        /// The operation has already finished.
        public static let alreadyFinished = Code(.alreadyFinished)
        /// `finish()` was called on an operation that has not started.
        public static let notStarted = Code(.notStarted)
        /// The operation is already in this queue.
        public static let alreadyEnqueued = Code(.alreadyEnqueued)
        /// The operation is already in another queue.
        public static let enqueuedInAnotherQueue = Code(.enqueuedInAnotherQueue)
        /// `start()` was called by hand on an operation that a queue manages.
        public static let managedByQueue = Code(.managedByQueue)
        /// `start()` was called by hand before the operation's dependencies finished.
        public static let notReady = Code(.notReady)
        /// An operation was made to depend on itself.
        public static let selfDependency = Code(.selfDependency)
        /// A dependency would close a cycle; ``OperationError/operationNames`` lists the cycle.
        public static let dependencyCycle = Code(.dependencyCycle)
        /// A dependency was added to an operation that is already executing.
        public static let dependentAlreadyExecuting = Code(.dependentAlreadyExecuting)
        /// A dependency was added to an operation that has already finished.
        public static let dependentAlreadyFinished = Code(.dependentAlreadyFinished)
        /// A maximum concurrent operation count below 1.
        public static let invalidMaxConcurrentOperationCount = Code(.invalidMaxConcurrentOperationCount)
        /// A condition of a ``ProcedureOperation`` was not met (a built-in condition's own failure;
        /// a custom condition fails with whatever error it chooses).
        public static let conditionFailed = Code(.conditionFailed)
        /// ``NoFailedDependencies``: a dependency finished with errors. ``OperationError/underlyingErrors``
        /// holds them.
        public static let dependenciesFailed = Code(.dependenciesFailed)
        /// ``NoFailedDependencies`` or ``NoCancelledDependencies``: a dependency was cancelled.
        public static let dependenciesCancelled = Code(.dependenciesCancelled)
        /// Result injection: the producer failed, was cancelled or finished without a value, so the
        /// consumer was cancelled instead of running.
        public static let inputUnavailable = Code(.inputUnavailable)
        /// ``TimeoutObserver``: the procedure had not finished in time.
        public static let timedOut = Code(.timedOut)
        /// ``TimeoutObserver/init(timeout:action:clock:)``: the timeout was zero or negative.
        public static let invalidTimeout = Code(.invalidTimeout)
        /// A condition was added to a procedure whose conditions are being (or were) evaluated.
        public static let tooLateToAddCondition = Code(.tooLateToAddCondition)
        /// An observer was added to a procedure that has started executing or finished.
        public static let tooLateToAddObserver = Code(.tooLateToAddObserver)
        /// `start()` by hand on a procedure with conditions: only a queue evaluates conditions.
        public static let requiresQueue = Code(.requiresQueue)
        /// ``ProcedureOperation/produce(_:)`` outside the procedure's execution, or without a queue.
        public static let notExecuting = Code(.notExecuting)
        /// ``Workflow/add(_:prerequisites:keyedPrerequisites:)``: the task is already in a workflow.
        public static let taskAlreadyInWorkflow = Code(.taskAlreadyInWorkflow)
        /// ``Workflow/add(_:prerequisites:keyedPrerequisites:)``: a prerequisite is not in this
        /// workflow (add prerequisites first).
        public static let prerequisiteNotInWorkflow = Code(.prerequisiteNotInWorkflow)
        /// ``Workflow/add(_:prerequisites:keyedPrerequisites:)``: a required prerequisite key has
        /// no keyed prerequisite.
        public static let missingPrerequisiteKeys = Code(.missingPrerequisiteKeys)
        /// ``ExternalConditionTask``: started before it was fulfilled.
        public static let externalConditionNotFulfilled = Code(.externalConditionNotFulfilled)
        /// Awaiting a ``Workflow`` (``Workflow/run(whenCancelled:)``): tasks failed and nothing is
        /// executing, so the workflow cannot finish until they are retried.
        /// ``OperationError/operationNames`` lists the failed tasks in the order they were added,
        /// ``OperationError/underlyingErrors`` their errors.
        public static let taskFailed = Code(.taskFailed)
        /// Awaiting a ``WorkflowTask`` (``WorkflowTask/value``): the task is pending and a
        /// prerequisite, direct or not, failed, so it cannot run until that one is retried.
        /// ``OperationError/operationNames`` is the awaited task then the failed prerequisite,
        /// ``OperationError/underlyingErrors`` the prerequisite's error.
        public static let prerequisiteFailed = Code(.prerequisiteFailed)
        /// ``ProcedureOperation/produce(_:before:)`` or ``GroupOperation/addChild(_:before:)``
        /// with a ``PendingProcedureEvent`` the procedure is already past (or will never reach
        /// from where it is): nothing was added and no observer was told.
        public static let eventAlreadyPast = Code(.eventAlreadyPast)

        /// Awaiting the value of an operation (``ResultProcedure/value``, ``AsyncOperation/value``):
        /// it was cancelled and finished without a value and without an error.
        public static let cancelled = Code(.cancelled)
        /// Awaiting the value of an operation (``ResultProcedure/value``): it finished without a
        /// value and without an error, and was not cancelled.
        public static let noValue = Code(.noValue)
        /// ``ClosureOperation/addExecutionBlock(_:)`` on an operation made with
        /// ``ClosureOperation/init(name:asynchronous:)``: its closure finishes it, so there is no
        /// point at which more blocks would run. Nothing was added.
        public static let asynchronousClosure = Code(.asynchronousClosure)

        /// The code's name, for example `dependencyCycle`.
        public var description: String { "\(value)" }
    }

    /// What went wrong.
    public let code: Code
    /// The names of the operations involved, in a meaningful order (for a cycle: the cycle).
    public let operationNames: [String]
    /// A human-readable explanation.
    public let message: String
    /// Errors that caused this one (for example the errors of failed dependencies).
    public let underlyingErrors: [any Error]
    /// The source file that threw.
    public let file: String
    /// The source line that threw.
    public let line: Int

    /// Creates an error. OperationKit creates these; you rarely need to.
    public init(
        _ code: Code,
        operations operationNames: [String] = [],
        _ message: String,
        underlying underlyingErrors: [any Error] = [],
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.operationNames = operationNames
        self.message = message
        self.underlyingErrors = underlyingErrors
        self.file = file
        self.line = line
    }

    /// The code, the operations involved, the message and the underlying errors, on one line:
    /// `OperationError.dependenciesFailed [upload]: a dependency failed (underlying: Disk full; …)`.
    public var description: String {
        let names = operationNames.isEmpty ? "" : " [\(operationNames.joined(separator: ", "))]"
        var text = "OperationError.\(code)\(names): \(message)"
        if !underlyingErrors.isEmpty {
            text += " (underlying: \(underlyingErrors.map { String(describing: $0) }.joined(separator: "; ")))"
        }
        return text
    }

    /// Two errors are equal when their codes and operation names are equal.
    public static func == (lhs: OperationError, rhs: OperationError) -> Bool {
        lhs.code == rhs.code && lhs.operationNames == rhs.operationNames
    }

    /// Hashes the code and the operation names, as ``==(_:_:)`` compares them.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(operationNames)
    }
}
