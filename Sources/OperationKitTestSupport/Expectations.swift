// Swift Testing helpers for operations and procedures: a bounded wait that throws, and
// expectations that record an issue (never crash) when an operation ends the wrong way.
import Dispatch
import OperationKit
import Testing

extension ConcurrentOperation {
    /// Suspends the calling task until the operation has finished (its completion block and, for
    /// a procedure, its did-finish observers returned), or throws once `timeout` has passed.
    ///
    /// ```swift
    /// try queue.addOperation(download)
    /// try await download.finished(within: .seconds(5))
    /// ```
    ///
    /// The deadline is a dispatch timer, not a sleep: the wait ends as soon as the operation
    /// finishes, and a timed-out wait leaves nothing behind in the operation (it is untouched:
    /// not cancelled). Cancelling the calling task does not end the wait early; the deadline
    /// does.
    ///
    /// - Parameter timeout: The longest wait; must be positive.
    /// - Throws: `OperationError` naming the operation: code
    ///   `OperationError.timedOut` if it has not finished in
    ///   time, `OperationError.invalidTimeout` if `timeout` is
    ///   zero or negative.
    public func finished(within timeout: Duration) async throws(OperationError) {
        guard timeout > .zero else {
            throw OperationError(.invalidTimeout, operations: [displayName], "finished(within:) needs a positive timeout, not \(timeout)")
        }
        let waiting = Task { try await self.waitUntilFinished(whenCancelled: .stopWaiting) }
        let timer = DispatchWorkItem { waiting.cancel() }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout.testSupportDispatchInterval, execute: timer)
        let result = await waiting.result
        timer.cancel()
        guard case .failure = result else { return }
        throw OperationError(.timedOut, operations: [displayName], "did not finish within \(timeout)")
    }
}

extension Duration {
    /// The duration for a dispatch deadline, in nanoseconds (clamped to what an `Int` holds).
    var testSupportDispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        guard seconds < Int64(Int.max / 1_000_000_000) - 1 else { return .never }
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }
}

/// What errors an operation is expected to finish with, for ``expectFinished(_:errors:within:sourceLocation:)``
/// and ``expectCancelled(_:errors:within:sourceLocation:)``.
///
/// ```swift
/// await expectFinished(upload, errors: .codes([.conditionFailed]))
/// await expectFinished(parse, errors: .equal(to: [ParseError.truncated]))
/// ```
///
/// A plain `ConcurrentOperation` (not a procedure) has no errors: it is checked
/// as finishing with none.
public struct ExpectedErrors: Sendable, CustomStringConvertible {
    /// Says what is expected, for the issue recorded when it does not hold.
    public let description: String
    private let predicate: @Sendable ([any Error]) -> Bool

    /// An expectation of your own.
    ///
    /// - Parameters:
    ///   - description: What is expected, in words (it appears in the recorded issue).
    ///   - predicate: Whether the errors, in order, are as expected.
    public init(_ description: String, matching predicate: @escaping @Sendable ([any Error]) -> Bool) {
        self.description = description
        self.predicate = predicate
    }

    /// Whether `errors` are as expected.
    ///
    /// - Parameter errors: The errors an operation finished with, in order.
    /// - Returns: `true` if they match.
    public func matches(_ errors: [any Error]) -> Bool { predicate(errors) }

    /// No errors at all.
    public static let empty = ExpectedErrors("no errors") { $0.isEmpty }
    /// At least one error, whatever they are.
    public static let nonEmpty = ExpectedErrors("at least one error") { !$0.isEmpty }
    /// Any errors, or none: the errors are not checked.
    public static let ignored = ExpectedErrors("any errors") { _ in true }

    /// Exactly `count` errors.
    ///
    /// - Parameter count: How many errors.
    /// - Returns: The expectation.
    public static func count(_ count: Int) -> ExpectedErrors {
        ExpectedErrors("\(count) error\(count == 1 ? "" : "s")") { $0.count == count }
    }

    /// `OperationError`s with these codes, in this order, and no other error.
    ///
    /// - Parameter codes: The codes, in order.
    /// - Returns: The expectation.
    public static func codes(_ codes: [OperationError.Code]) -> ExpectedErrors {
        ExpectedErrors("OperationErrors with the codes \(codes)") { errors in
            errors.map { ($0 as? OperationError)?.code } == codes.map { Optional($0) }
        }
    }

    /// Errors equal to `expected`, in this order, and no other error.
    ///
    /// - Parameter expected: The errors, in order.
    /// - Returns: The expectation.
    public static func equal<E: Error & Equatable & Sendable>(to expected: [E]) -> ExpectedErrors {
        ExpectedErrors("the errors \(expected)") { errors in
            errors.count == expected.count && zip(errors, expected).allSatisfy { ($0 as? E) == $1 }
        }
    }
}

/// Waits for `operation` to finish and records an issue (at the caller's line) unless it
/// finished within `timeout`, was not cancelled, and its errors are as `errors` says.
///
/// ```swift
/// try queue.addOperation(upload)
/// await expectFinished(upload)                                   // no errors
/// await expectFinished(retrying, errors: .codes([.timedOut]))
/// ```
///
/// Nothing traps: a test that fails here goes on to its next line (the return value says
/// whether to bother).
///
/// - Parameters:
///   - operation: The operation to wait for.
///   - errors: The errors expected (for a `ProcedureOperation`); none by default.
///   - timeout: The longest wait.
///   - sourceLocation: Where the issue is reported; the caller's line by default.
/// - Returns: `true` if every expectation held.
@discardableResult
public func expectFinished(
    _ operation: ConcurrentOperation,
    errors: ExpectedErrors = .empty,
    within timeout: Duration = .seconds(30),
    sourceLocation: SourceLocation = #_sourceLocation
) async -> Bool {
    await expectEnd(of: operation, cancelled: false, errors: errors, timeout: timeout, sourceLocation: sourceLocation)
}

/// Waits for `operation` to finish and records an issue (at the caller's line) unless it
/// finished within `timeout`, was cancelled, and its errors are as `errors` says.
///
/// ```swift
/// download.cancel()
/// await expectCancelled(download)                                // whatever its errors
/// await expectCancelled(gated, errors: .codes([.conditionFailed]))
/// ```
///
/// - Parameters:
///   - operation: The operation to wait for.
///   - errors: The errors expected; not checked by default (a cancel may carry an error, a
///     failed condition's for one).
///   - timeout: The longest wait.
///   - sourceLocation: Where the issue is reported; the caller's line by default.
/// - Returns: `true` if every expectation held.
@discardableResult
public func expectCancelled(
    _ operation: ConcurrentOperation,
    errors: ExpectedErrors = .ignored,
    within timeout: Duration = .seconds(30),
    sourceLocation: SourceLocation = #_sourceLocation
) async -> Bool {
    await expectEnd(of: operation, cancelled: true, errors: errors, timeout: timeout, sourceLocation: sourceLocation)
}

/// Waits for `procedure` to finish and records an issue (at the caller's line) unless it
/// finished within `timeout` with the value `expected` (and no error).
///
/// ```swift
/// let sum = ClosureProcedure<Int> { 2 + 2 }
/// try queue.addOperation(sum)
/// await expectValue(sum, equals: 4)
/// ```
///
/// - Parameters:
///   - procedure: The procedure to wait for.
///   - expected: The value it must finish with.
///   - timeout: The longest wait.
///   - sourceLocation: Where the issue is reported; the caller's line by default.
/// - Returns: `true` if the procedure finished with `expected`.
@discardableResult
public func expectValue<Output: Equatable & Sendable>(
    _ procedure: ResultProcedure<Output>,
    equals expected: Output,
    within timeout: Duration = .seconds(30),
    sourceLocation: SourceLocation = #_sourceLocation
) async -> Bool {
    do {
        try await procedure.finished(within: timeout)
    } catch {
        Issue.record(Comment(rawValue: "\(error)"), sourceLocation: sourceLocation)
        return false
    }
    let problem: String? = switch procedure.result {
    case .success(let value) where value == expected: nil
    case .success(let value): "\(procedure.displayName) finished with \(value), expected \(expected)"
    case .failure(let error): "\(procedure.displayName) failed with \(error), expected the value \(expected)"
    case nil: "\(procedure.displayName) finished without a value\(procedure.isCancelled ? " (cancelled)" : ""), expected \(expected)"
    }
    guard let problem else { return true }
    Issue.record(Comment(rawValue: problem), sourceLocation: sourceLocation)
    return false
}

/// The shared body of the two expectations.
private func expectEnd(
    of operation: ConcurrentOperation, cancelled: Bool, errors expected: ExpectedErrors,
    timeout: Duration, sourceLocation: SourceLocation
) async -> Bool {
    do {
        try await operation.finished(within: timeout)
    } catch {
        Issue.record(Comment(rawValue: "\(error)"), sourceLocation: sourceLocation)
        return false
    }
    var problems: [String] = []
    if operation.isCancelled != cancelled {
        problems.append(cancelled ? "was not cancelled" : "was cancelled")
    }
    let errors = (operation as? ProcedureOperation)?.errors ?? []
    if !expected.matches(errors) {
        problems.append("finished with \(errors.isEmpty ? "no errors" : "the errors \(errors)"), expected \(expected)")
    }
    for problem in problems {
        Issue.record(Comment(rawValue: "\(operation.displayName) \(problem)"), sourceLocation: sourceLocation)
    }
    return problems.isEmpty
}
