// A condition for tests: an answer set up front or given by the test, an optional produced
// dependency and dependencies of its own, and counts of how often it was asked.
import OperationKit
import Synchronization

/// An `OperationCondition` whose answer a test sets up front, or gives by hand, and which
/// counts how many times it was evaluated — to check that a condition is evaluated exactly
/// once, or never, or to hold a procedure in its condition evaluation while the test acts.
///
/// ```swift
/// let signedIn = TestCondition(name: "signed in", answering: .byTest)
/// let upload = TestProcedure(name: "upload")
/// try upload.addCondition(signedIn)
/// try queue.addOperation(upload)
/// #expect(await signedIn.evaluating.opened(within: .seconds(5)))   // asked, not answered yet
/// upload.cancel()                                                   // cancelled while evaluating
/// signedIn.answer()
/// await expectCancelled(upload)
/// #expect(signedIn.evaluationCount == 1 && upload.executeCount == 0)
/// ```
///
/// It is a class, so its identity is the object: the same `TestCondition` given twice to a
/// procedure, or to `AllConditions` / `AnyCondition`, is evaluated once.
public final class TestCondition: OperationCondition, @unchecked Sendable {
    // Every stored property is immutable or synchronises itself (atomics, latches, `Locked`).

    /// When a ``TestCondition`` answers, once it is evaluated.
    public enum Answering: Sendable {
        /// Inside `evaluate(for:completion:)`, with the result given at init (the default).
        case atOnce
        /// When the test calls ``TestCondition/answer(_:)``: the evaluation waits until then
        /// without holding a thread.
        case byTest
    }

    private struct Pending: Sendable {
        /// Evaluations waiting for an answer, oldest first.
        var waiting: [@Sendable (ConditionResult) -> Void] = []
        /// Answers given before an evaluation asked, oldest first.
        var early: [ConditionResult] = []
    }

    /// The name given at init ("TestCondition" by default).
    public let name: String
    /// The categories given at init (none by default).
    public let mutuallyExclusiveCategories: Set<String>
    /// The dependencies given at init (none by default): the condition is evaluated once they
    /// have finished; it does not add them to a queue.
    public let dependencies: [ConcurrentOperation]

    private let result: ConditionResult
    private let answering: Answering
    private let makeDependency: (@Sendable () -> ConcurrentOperation)?
    private let evaluations = Atomic<Int>(0)
    private let pending = Locked(Pending())
    private let made = Recorder<ConcurrentOperation>()

    /// Opens when the condition is first evaluated (before it answers).
    public let evaluating = Latch()

    /// Creates the condition.
    ///
    /// - Parameters:
    ///   - name: A name for errors, snapshots and the test's messages.
    ///   - result: The answer when ``Answering/atOnce``; `.satisfied` by default. A `.failed`
    ///     answer's error is the procedure's cancel error.
    ///   - answering: When it answers; at once by default.
    ///   - produces: Makes the dependency the condition produces for each procedure it is
    ///     added to (`OperationCondition.dependency(for:)`); `nil` (the default) for none.
    ///   - dependencies: Operations that must finish before it is evaluated.
    ///   - categories: Its mutually exclusive categories.
    public init(
        name: String = "TestCondition", result: ConditionResult = .satisfied, answering: Answering = .atOnce,
        produces: (@Sendable () -> ConcurrentOperation)? = nil, dependencies: [ConcurrentOperation] = [],
        categories: Set<String> = []
    ) {
        self.name = name
        self.result = result
        self.answering = answering
        makeDependency = produces
        self.dependencies = dependencies
        mutuallyExclusiveCategories = categories
    }

    /// How many times it was evaluated.
    public var evaluationCount: Int { evaluations.load(ordering: .acquiring) }

    /// The dependencies it produced, in the order made (one per procedure it was added to, if
    /// it produces one).
    public var producedDependencies: [ConcurrentOperation] { made.values }

    /// How many evaluations wait for ``answer(_:)``.
    public var waitingCount: Int { pending.withLock { $0.waiting.count } }

    /// Makes the dependency given as `produces`, if any, and records it.
    ///
    /// - Parameter procedure: The procedure the condition was added to.
    /// - Returns: The new dependency, or `nil`.
    public func dependency(for procedure: ProcedureOperation) -> ConcurrentOperation? {
        guard let makeDependency else { return nil }
        let operation = makeDependency()
        made.record(operation)
        return operation
    }

    /// Counts the evaluation, opens ``evaluating``, and answers as ``Answering`` says.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose conditions are evaluated.
    ///   - completion: Called once with the answer.
    public func evaluate(for procedure: ProcedureOperation, completion: @escaping @Sendable (ConditionResult) -> Void) {
        evaluations.add(1, ordering: .acquiringAndReleasing)
        switch answering {
        case .atOnce:
            evaluating.countDown()
            completion(result)
        case .byTest:
            let early = pending.withLock { pending -> ConditionResult? in
                if !pending.early.isEmpty { return pending.early.removeFirst() }
                pending.waiting.append(completion)
                return nil
            }
            evaluating.countDown()
            if let early { completion(early) }
        }
    }

    /// Answers the oldest evaluation waiting (for ``Answering/byTest``), on the calling thread;
    /// with none waiting, the answer is kept for the next evaluation.
    ///
    /// - Parameter result: The answer; the result given at init by default.
    public func answer(_ result: ConditionResult? = nil) {
        let answer = result ?? self.result
        let completion = pending.withLock { pending -> (@Sendable (ConditionResult) -> Void)? in
            if pending.waiting.isEmpty {
                pending.early.append(answer)
                return nil
            }
            return pending.waiting.removeFirst()
        }
        completion?(answer)
    }
}
