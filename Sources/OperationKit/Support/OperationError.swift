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

        /// The code's name, for example `dependencyCycle`.
        public var description: String { "\(value)" }
    }

    /// What went wrong.
    public let code: Code
    /// The names of the operations involved, in a meaningful order (for a cycle: the cycle).
    public let operationNames: [String]
    /// A human-readable explanation.
    public let message: String
    /// The source file that threw.
    public let file: String
    /// The source line that threw.
    public let line: Int

    /// Creates an error. OperationKit creates these; you rarely need to.
    public init(
        _ code: Code,
        operations operationNames: [String] = [],
        _ message: String,
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.operationNames = operationNames
        self.message = message
        self.file = file
        self.line = line
    }

    /// The code, the operations involved and the message, on one line.
    public var description: String {
        let names = operationNames.isEmpty ? "" : " [\(operationNames.joined(separator: ", "))]"
        return "OperationError.\(code)\(names): \(message)"
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
