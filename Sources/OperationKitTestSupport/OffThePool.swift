// A Swift Testing trait that runs each test's own code outside the shared thread pool, so tests
// that block (or whose operations block) cannot starve one another of threads.
import Dispatch
import Testing

/// A task executor that never waits for a pool thread: each job runs on a serial dispatch queue
/// of its own, and dispatch gives every such queue a thread at once ("overcommit") instead of
/// queueing it behind busy threads.
///
/// A task's jobs never run at the same time, so a task keeps its usual one-job-at-a-time order
/// on this executor; only the thread may change between jobs.
public final class OffThePoolExecutor: TaskExecutor {
    /// The executor ``OffThePoolTrait`` runs tests on.
    public static let shared = OffThePoolExecutor()

    private init() {}

    /// Runs `job` on a thread of its own.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        DispatchQueue(label: "OperationKitTestSupport.off-the-pool").async {
            job.runSynchronously(on: executor)
        }
    }
}

/// Runs each test of a suite (or one test) with ``OffThePoolExecutor`` as its task executor.
///
/// On Linux, Swift concurrency runs tasks on Dispatch's global pool, the same few threads (about
/// one per core, and a handful more when they block) that run a `ConcurrentOperationQueue`'s
/// workers. Swift Testing runs tests in parallel on that pool, so a synchronous test that blocks,
/// or an operation body held on a ``Gate`` while its test waits for something else, takes a
/// thread every other test needs. With enough of them at once, every test waits for a thread
/// none will give back, and the run stalls until bounded waits time out.
///
/// With this trait the test's own code (its body, and every resumption after an `await`) runs
/// on threads outside that pool; only the operations under test use it.
///
/// ```swift
/// import OperationKit
/// import OperationKitTestSupport
/// import Testing
///
/// @Suite("Uploads", .offThePool)
/// struct UploadTests {
///     @Test func waitsForTheGate() async throws {
///         let gate = Gate()
///         let queue = ConcurrentOperationQueue(name: "uploads")
///         let upload = ClosureOperation(name: "upload") { _ = gate.wait(timeout: .seconds(20)) }
///         try queue.addOperation(upload)
///         #expect(!upload.isFinished)
///         gate.open()
///         try await upload.finished(within: .seconds(20))
///     }
/// }
/// ```
///
/// Child tasks of a task group and `async let` inherit the executor; a `Task { }` does not.
public struct OffThePoolTrait: SuiteTrait, TestTrait, TestScoping {
    /// The trait applies to every test of a suite and of its nested suites.
    public var isRecursive: Bool { true }

    /// Runs the test with ``OffThePoolExecutor`` as its task executor.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(OffThePoolExecutor.shared) {
            try await function()
        }
    }
}

extension Trait where Self == OffThePoolTrait {
    /// Runs each test outside the shared thread pool: see ``OffThePoolTrait``.
    public static var offThePool: Self { OffThePoolTrait() }
}
