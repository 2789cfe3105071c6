import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

// Helpers shared by the `StateMachine<State>` suites. Every wait has a timeout, so a bug fails a
// test instead of hanging it; nothing sleeps to synchronise.

/// How long a `StateMachine` test waits for something that must happen.
let stateMachineTestTimeout: Duration = .seconds(30)

/// Runs `body` in a new task and returns its value, or `nil` if `timeout` passes first (the stuck
/// task is cancelled and abandoned). A `Task.sleep` is used here only as the timeout.
func stateMachineValue<T: Sendable>(
    within timeout: Duration = stateMachineTestTimeout, _ body: @escaping @Sendable () async -> T
) async -> T? {
    let (results, continuation) = AsyncStream.makeStream(of: T?.self)
    let work = Task {
        continuation.yield(await body())
    }
    let timer = Task {
        try? await Task.sleep(for: timeout)
        continuation.yield(nil)
    }
    var iterator = results.makeAsyncIterator()
    let value = await iterator.next() ?? nil
    timer.cancel()
    if value == nil { work.cancel() }
    continuation.finish()
    return value
}

extension StateMachine {
    /// Makes a request through its completion-handler form and waits (with a timeout) for the
    /// completion. `nil` means the completion was not called in time (recorded as an issue).
    ///
    /// The request is made from another thread, so that even a deadlock in the machine (a callback
    /// that takes the machine's lock while it is held) fails the test instead of hanging it.
    func waitForOutcome(
        timeout: Duration = stateMachineTestTimeout,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ request: @escaping @Sendable (_ completion: @escaping @Sendable (Outcome) -> Void) -> Void
    ) -> Outcome? {
        let outcomes = Recorder<Outcome>()
        let done = Latch()
        DispatchQueue(label: "StateMachineTests.request").async {  // serial, so it gets a thread at once
            request { outcome in
                outcomes.record(outcome)
                done.countDown()
            }
        }
        guard done.wait(timeout: timeout) else {
            Issue.record("the completion was not called", sourceLocation: sourceLocation)
            return nil
        }
        #expect(outcomes.values.count == 1, "the completion ran once", sourceLocation: sourceLocation)
        return outcomes.values.first
    }

    /// Requests a transition to `target` and waits for its outcome.
    func outcome(to target: State, sourceLocation: SourceLocation = #_sourceLocation) -> Outcome? {
        waitForOutcome(sourceLocation: sourceLocation) { self.requestTransition(to: target, completion: $0) }
    }

    /// Requests a dynamic transition and waits for its outcome.
    func dynamicOutcome(sourceLocation: SourceLocation = #_sourceLocation) -> Outcome? {
        waitForOutcome(sourceLocation: sourceLocation) { self.requestTransition(completion: $0) }
    }

    /// Suspends to `state` and waits for the outcome.
    func suspendOutcome(to state: State, sourceLocation: SourceLocation = #_sourceLocation) -> Outcome? {
        waitForOutcome(sourceLocation: sourceLocation) { self.requestSuspend(to: state, completion: $0) }
    }

    /// Resumes and waits for the change it reports.
    func resumeOutcome(sourceLocation: SourceLocation = #_sourceLocation) -> Outcome? {
        waitForOutcome(sourceLocation: sourceLocation) { completion in self.requestResume { completion(.success($0)) } }
    }

    /// Resets and waits for the change it reports.
    func resetOutcome(sourceLocation: SourceLocation = #_sourceLocation) -> Outcome? {
        waitForOutcome(sourceLocation: sourceLocation) { completion in self.requestReset { completion(.success($0)) } }
    }
}

extension Result {
    /// The success value, or `nil` for a failure.
    var successValue: Success? {
        if case .success(let value) = self { return value }
        return nil
    }

    /// The failure, or `nil` for a success.
    var failureValue: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// A completion outcome reduced to something `Equatable`, for `#expect(... == ...)`.
enum StateMachineOutcomeSummary<State: Hashable & Sendable>: Equatable {
    /// The change was made.
    case changed(StateTransition<State>)
    /// A quiet no-op: the completion got `nil`.
    case nothing
    /// Refused with this code.
    case failed(StateMachineErrorCode)
    /// The completion was not called.
    case noCompletion

    init(_ outcome: Result<StateTransition<State>?, StateMachineError<State>>?) {
        switch outcome {
        case .success(let change?)?: self = .changed(change)
        case .success(nil)?: self = .nothing
        case .failure(let error)?: self = .failed(error.code)
        case nil: self = .noCompletion
        }
    }

    /// `a -> b`, `nothing`, the error code, or `no completion`.
    var text: String {
        switch self {
        case .changed(let change): "\(change)"
        case .nothing: "nothing"
        case .failed(let code): "\(code)"
        case .noCompletion: "no completion"
        }
    }
}

/// The first `count` elements of `stream` (fewer if it ends first).
func stateMachineCollect<Element: Sendable>(_ stream: AsyncStream<Element>, _ count: Int) async -> [Element] {
    var result: [Element] = []
    for await element in stream.prefix(count) {
        result.append(element)
    }
    return result
}
