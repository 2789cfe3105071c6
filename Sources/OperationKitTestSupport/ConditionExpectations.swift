// Asking a condition directly for its answer, with a deadline, and checking the answer as a
// Swift Testing expectation (TestingProcedureKit's PKAssertConditionSatisfied / Failed).
import OperationKit
import Testing

/// What `condition` answers for `procedure`, asked directly: `evaluate(for:completion:)` is
/// called on the calling thread and its first answer returned; `nil` if it gives none within
/// `timeout`. Nothing else a queue does happens — the condition's produced dependency is not
/// made and its own dependencies are not waited for — so this tests the condition's decision
/// alone; to test it in place, add it to a procedure and expect how the procedure ends.
///
/// ```swift
/// let result = await answer(of: SignedIn(isSignedIn: false), for: TestProcedure())  // .failed(NotSignedIn())
/// ```
///
/// - Parameters:
///   - condition: The condition to ask.
///   - procedure: The procedure it is asked about (it need not be in a queue).
///   - timeout: The longest wait for the answer; 30 seconds by default.
/// - Returns: The first answer, or `nil` if none came in time. Later answers are ignored.
public func answer(
    of condition: any OperationCondition, for procedure: ProcedureOperation, within timeout: Duration = .seconds(30)
) async -> ConditionResult? {
    let (answers, continuation) = AsyncStream.makeStream(of: ConditionResult.self)
    condition.evaluate(for: procedure) { continuation.yield($0) }
    let first = await outcome(within: timeout) { () -> ConditionResult? in
        var iterator = answers.makeAsyncIterator()
        return await iterator.next()
    }
    continuation.finish()  // ends the abandoned wait, if the condition never answered
    guard case .success(let answer)? = first else { return nil }
    return answer
}

/// An answer a condition is expected to give: satisfied, ignored, or failed with the errors
/// expected.
public struct ExpectedAnswer: Sendable, CustomStringConvertible {
    /// What is expected, for the issue's message.
    public let description: String
    private let predicate: @Sendable (ConditionResult) -> Bool

    private init(_ description: String, _ predicate: @escaping @Sendable (ConditionResult) -> Bool) {
        self.description = description
        self.predicate = predicate
    }

    /// Whether `answer` is the one expected.
    ///
    /// - Parameter answer: A condition's answer.
    /// - Returns: `true` if it matches.
    public func matches(_ answer: ConditionResult) -> Bool { predicate(answer) }

    /// `.satisfied`.
    public static let satisfied = ExpectedAnswer("satisfied") { if case .satisfied = $0 { true } else { false } }
    /// `.ignored`.
    public static let ignored = ExpectedAnswer("ignored") { if case .ignored = $0 { true } else { false } }

    /// `.failed` with an error that `errors` accepts (as a one-element array).
    ///
    /// - Parameter errors: The error expected; any error by default.
    /// - Returns: The expected answer.
    public static func failed(_ errors: ExpectedErrors = .nonEmpty) -> ExpectedAnswer {
        ExpectedAnswer("failed with \(errors)") { answer in
            if case .failed(let error) = answer { errors.matches([error]) } else { false }
        }
    }
}

/// Records an issue unless `condition`, asked directly for `procedure` (see
/// ``answer(of:for:within:)``), answers as `expected` within `timeout`.
///
/// ```swift
/// await expectAnswer(of: SignedIn(isSignedIn: false), for: TestProcedure(), is: .failed(.equal(to: [NotSignedIn()])))
/// ```
///
/// - Parameters:
///   - condition: The condition to ask.
///   - procedure: The procedure it is asked about.
///   - expected: The answer expected.
///   - timeout: The longest wait for the answer; 30 seconds by default.
///   - sourceLocation: Where the issue is reported; the caller's line by default.
/// - Returns: `true` if it answered as expected in time.
@discardableResult
public func expectAnswer(
    of condition: any OperationCondition, for procedure: ProcedureOperation, is expected: ExpectedAnswer,
    within timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation
) async -> Bool {
    guard let answer = await answer(of: condition, for: procedure, within: timeout) else {
        Issue.record(
            Comment(rawValue: "\(condition.name) gave no answer within \(timeout), expected \(expected)"),
            sourceLocation: sourceLocation)
        return false
    }
    guard expected.matches(answer) else {
        Issue.record(
            Comment(rawValue: "\(condition.name) answered \(answer), expected \(expected)"), sourceLocation: sourceLocation)
        return false
    }
    return true
}
