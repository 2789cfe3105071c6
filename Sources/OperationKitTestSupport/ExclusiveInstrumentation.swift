import Testing

/// Runs each test while no other test with this trait runs, in any suite of the process: for
/// tests that set the process-wide `OperationInstrumentation.default`, and for tests that check
/// the events an instrument receives.
///
/// The default instrument is one value for the whole process. While a test has one installed,
/// every queue made meanwhile — including a group's queue for its children — starts with it, and
/// an operation in no queue tells it its events (a cancel before the operation is added, for
/// instance). A test that checks the events of its own instrument can then miss some: they went
/// to the default. Swift Testing runs suites in parallel, and `.serialized` orders only the tests
/// of one suite; give this trait to both kinds of suite instead.
///
/// ```swift
/// import OperationKit
/// import OperationKitTestSupport
/// import Testing
///
/// @Suite("Default instrument", .offThePool, .exclusiveInstrumentation)
/// struct DefaultInstrumentChecks {
///     @Test func newQueuesTakeTheDefault() {
///         let instrument = RecordingInstrument()
///         OperationInstrumentation.default = instrument
///         defer { OperationInstrumentation.default = nil }
///         #expect(ConcurrentOperationQueue(name: "new").instrument === instrument)
///     }
/// }
/// ```
///
/// The tests wait for their turn in the order they ask for it; a test waiting takes no thread.
public struct ExclusiveInstrumentationTrait: SuiteTrait, TestTrait, TestScoping {
    /// The trait applies to every test of a suite and of its nested suites.
    public var isRecursive: Bool { true }

    /// Runs the test once no other test with the trait runs.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        await InstrumentationTurn.shared.acquire()
        do {
            try await function()
        } catch {
            await InstrumentationTurn.shared.release()
            throw error
        }
        await InstrumentationTurn.shared.release()
    }
}

extension Trait where Self == ExclusiveInstrumentationTrait {
    /// Runs each test while no other test with this trait runs: see
    /// ``ExclusiveInstrumentationTrait``.
    public static var exclusiveInstrumentation: Self { ExclusiveInstrumentationTrait() }
}

/// One turn at a time, handed to the waiting tests in order.
actor InstrumentationTurn {
    static let shared = InstrumentationTurn()

    private var taken = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        if !taken {
            taken = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty {
            taken = false
        } else {
            // The turn passes straight to the next test: `taken` stays true.
            waiting.removeFirst().resume()
        }
    }
}
