// A procedure for tests: configurable value, error, produced operation and when it finishes
// (at once, when a gate opens, or when the test says), with counters of its hooks.
import Dispatch
import OperationKit
import Synchronization

/// A `ResultProcedure` whose behaviour a test sets up front, and which counts
/// what happened to it.
///
/// ```swift
/// let gate = Gate()
/// let upload = TestProcedure(name: "upload", output: 42, finishing: .whenOpened(gate))
/// try queue.addOperation(upload)
/// #expect(await upload.executing.opened(within: .seconds(5)))   // it runs, held by the gate
/// gate.open()
/// await expectValue(upload, equals: 42)
/// #expect(upload.executeCount == 1)
/// ```
///
/// When it executes it counts the call, opens ``executing``, produces the operation given (if
/// any), then finishes as ``Finishing`` says: with `error` if one was given, else with the
/// value `output`. It counts each of its hooks (did cancel, will finish, did finish); the
/// counts are readable from any thread.
public final class TestProcedure<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    // Every stored property is immutable or synchronises itself (atomics, latches).

    /// When a ``TestProcedure`` finishes, once it executes.
    public enum Finishing: Sendable {
        /// Inside `execute()` (the default).
        case atOnce
        /// Once the gate is open: `execute()` returns at once and a thread of the test kit's
        /// own waits for the gate, then finishes the procedure. If the gate is still shut after
        /// the timeout, the procedure finishes with an `OperationError` with the
        /// code `OperationError.timedOut`, so a forgotten gate
        /// fails the test instead of hanging it.
        case whenOpened(Gate, timeout: Duration = .seconds(30))
        /// Never by itself: the test calls `ResultProcedure.finish(withValue:)`
        /// (or another finish), or sets `ProcedureOperation.finishesWhenCancelled`
        /// and cancels it.
        case byTest
    }

    private let expectedOutput: Output
    private let expectedError: (any Error)?
    private let finishing: Finishing
    private let produced: ConcurrentOperation?
    private let executions = Atomic<Int>(0)
    private let cancellations = Atomic<Int>(0)
    private let willFinishes = Atomic<Int>(0)
    private let didFinishes = Atomic<Int>(0)

    /// Opens when `execute()` starts.
    public let executing = Latch()
    /// Opens when the did-finish hook has run (just before the did-finish observers).
    public let didFinishHookRan = Latch()

    /// Creates the procedure.
    ///
    /// - Parameters:
    ///   - name: A name for logs, errors and the test's messages.
    ///   - output: The value it finishes with, unless `error` is given.
    ///   - error: The error it finishes with instead of a value; `nil` to succeed.
    ///   - finishing: When it finishes once it executes; inside `execute()` by default.
    ///   - produces: An operation it produces (`ProcedureOperation.produce(_:)`)
    ///     when it executes, before finishing; if producing throws, it finishes with that error.
    public init(
        name: String = "TestProcedure", output: Output, error: (any Error)? = nil,
        finishing: Finishing = .atOnce, produces: ConcurrentOperation? = nil
    ) {
        expectedOutput = output
        expectedError = error
        self.finishing = finishing
        produced = produces
        super.init(name: name)
    }

    /// How many times `execute()` ran (at most one).
    public var executeCount: Int { executions.load(ordering: .acquiring) }
    /// How many times the did-cancel hook ran (at most one).
    public var cancelCount: Int { cancellations.load(ordering: .acquiring) }
    /// How many times the will-finish hook ran (one once finished).
    public var willFinishCount: Int { willFinishes.load(ordering: .acquiring) }
    /// How many times the did-finish hook ran (one once finished).
    public var didFinishCount: Int { didFinishes.load(ordering: .acquiring) }

    /// Counts the call, opens ``executing``, produces, then finishes as set up.
    public override func execute() {
        executions.add(1, ordering: .acquiringAndReleasing)
        executing.countDown()
        if let produced {
            do {
                try produce(produced)
            } catch {
                finish(with: error)
                return
            }
        }
        switch finishing {
        case .atOnce:
            finishAsSetUp()
        case .whenOpened(let gate, let timeout):
            DispatchQueue(label: "OperationKitTestSupport.TestProcedure").async {
                if gate.wait(timeout: timeout) {
                    self.finishAsSetUp()
                } else {
                    self.finish(with: OperationError(.timedOut, operations: [self.displayName], "its gate was not opened within \(timeout)"))
                }
            }
        case .byTest:
            break
        }
    }

    private func finishAsSetUp() {
        if let expectedError { finish(with: expectedError) } else { finish(withValue: expectedOutput) }
    }

    /// Counts the call.
    ///
    /// - Parameter error: The cancel's error, if any.
    public override func procedureDidCancel(with error: (any Error)?) {
        cancellations.add(1, ordering: .acquiringAndReleasing)
    }

    /// Counts the call.
    ///
    /// - Parameter errors: The errors it finishes with.
    public override func procedureWillFinish(with errors: [any Error]) {
        willFinishes.add(1, ordering: .acquiringAndReleasing)
    }

    /// Counts the call and opens ``didFinishHookRan``.
    ///
    /// - Parameter errors: The errors it finished with.
    public override func procedureDidFinish(with errors: [any Error]) {
        didFinishes.add(1, ordering: .acquiringAndReleasing)
        didFinishHookRan.countDown()
    }
}

extension TestProcedure where Output == Void {
    /// Creates a procedure with no value: it finishes with `error`, or with none.
    ///
    /// - Parameters:
    ///   - name: A name for logs, errors and the test's messages.
    ///   - error: The error it finishes with; `nil` to succeed.
    ///   - finishing: When it finishes once it executes; inside `execute()` by default.
    ///   - produces: An operation it produces when it executes, before finishing.
    public convenience init(
        name: String = "TestProcedure", error: (any Error)? = nil,
        finishing: Finishing = .atOnce, produces: ConcurrentOperation? = nil
    ) {
        self.init(name: name, output: (), error: error, finishing: finishing, produces: produces)
    }
}

/// An error for tests, told apart by its number.
///
/// ```swift
/// let failing = TestProcedure(error: TestError(1))
/// ```
public struct TestError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Which error it is.
    public let id: Int

    /// Creates the error.
    ///
    /// - Parameter id: Which error it is; 0 by default.
    public init(_ id: Int = 0) { self.id = id }

    /// `TestError(id)`.
    public var description: String { "TestError(\(id))" }
}
