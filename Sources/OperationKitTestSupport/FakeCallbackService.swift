// A callback API that calls back when the test says: the thing to wrap in a procedure in a
// test. It counts calls and records whether a cancel reached it.
import OperationKit

/// A stand-in for a callback-based API (a network client, a database driver) whose answers
/// the test controls: each ``fetch(_:)`` waits until the test calls ``complete(with:)`` or
/// ``fail(with:)`` — or forever, if it never does — and a request's ``Request/cancel()`` is
/// recorded.
///
/// ```swift
/// let service = FakeCallbackService<Int>()
/// let fetch = ClosureProcedure<Int>(name: "fetch", asynchronous: { procedure in
///     service.fetch { result in procedure.finish(withResult: result) }
/// })
/// try queue.addOperation(fetch)
/// service.complete(with: 7)             // answers the call, now or when it comes
/// await expectValue(fetch, equals: 7)
/// #expect(service.callCount == 1 && !service.wasCancelled)
/// ```
///
/// Answers go to the oldest call still waiting, on the thread of the test's call. An answer
/// given while no call waits is kept for the next call, which then calls back at once, inside
/// ``fetch(_:)``: the test need not wait for the procedure to reach the service first. Each
/// completion runs at most once.
public final class FakeCallbackService<Value: Sendable>: Sendable {
    /// What ``fetch(_:)`` calls back with.
    public typealias Completion = @Sendable (Result<Value, any Error>) -> Void

    /// One call to ``fetch(_:)``, which the caller may cancel.
    public final class Request: Sendable {
        private let service: FakeCallbackService<Value>
        /// The call's number, from 1.
        public let number: Int

        fileprivate init(service: FakeCallbackService<Value>, number: Int) {
            self.service = service
            self.number = number
        }

        /// Cancels the call: the service records that a cancel reached it and, if the call still
        /// waits for its answer and the service was made with `callsBackOnCancel`, calls back at
        /// once with `CancellationError`. A cancel after the answer is recorded and changes nothing
        /// else; a second cancel of the same call changes nothing at all.
        public func cancel() { service.cancel(number) }

        /// Whether ``cancel()`` was called.
        public var isCancelled: Bool { service.state.withLock { $0.cancelled.contains(number) } }
    }

    fileprivate struct State {
        var calls = 0
        var waiting: [(number: Int, completion: Completion)] = []
        var early: [Result<Value, any Error>] = []
        var cancelled: Set<Int> = []
        var cancels = 0
        var callLatches: [(count: Int, latch: Latch)] = []
    }

    fileprivate let state = Locked(State())
    private let callsBackOnCancel: Bool

    /// Creates the service.
    ///
    /// - Parameter callsBackOnCancel: Whether a cancelled call that still waits calls back at
    ///   once with `CancellationError` (as most cancellable APIs do); `true` by default. With
    ///   `false`, a cancel is only recorded and the call waits for the test's answer.
    public init(callsBackOnCancel: Bool = true) {
        self.callsBackOnCancel = callsBackOnCancel
    }

    /// Starts a call: `completion` runs once the test answers it (or at once, with an answer
    /// given earlier).
    ///
    /// - Parameter completion: Called once with the answer, on the thread that gives it.
    /// - Returns: The call, to cancel it.
    @discardableResult
    public func fetch(_ completion: @escaping Completion) -> Request {
        let (number, answer, opened) = state.withLock { state in
            state.calls += 1
            let opened = state.callLatches.filter { $0.count <= state.calls }.map(\.latch)
            state.callLatches.removeAll { $0.count <= state.calls }
            if state.early.isEmpty {
                state.waiting.append((state.calls, completion))
                return (state.calls, Result<Value, any Error>?.none, opened)
            }
            return (state.calls, state.early.removeFirst(), opened)
        }
        for latch in opened { latch.countDown() }
        if let answer { completion(answer) }
        return Request(service: self, number: number)
    }

    /// Answers the oldest waiting call with `value`, or keeps the answer for the next call.
    ///
    /// - Parameter value: The value to call back with.
    /// - Returns: `true` if a waiting call was answered now, `false` if the answer was kept.
    @discardableResult
    public func complete(with value: Value) -> Bool { answer(.success(value)) }

    /// Answers the oldest waiting call with `error`, or keeps the answer for the next call.
    ///
    /// - Parameter error: The error to call back with.
    /// - Returns: `true` if a waiting call was answered now, `false` if the answer was kept.
    @discardableResult
    public func fail(with error: any Error) -> Bool { answer(.failure(error)) }

    private func answer(_ result: Result<Value, any Error>) -> Bool {
        let completion = state.withLock { state -> Completion? in
            if state.waiting.isEmpty {
                state.early.append(result)
                return nil
            }
            return state.waiting.removeFirst().completion
        }
        completion?(result)
        return completion != nil
    }

    fileprivate func cancel(_ number: Int) {
        let completion = state.withLock { state -> Completion? in
            guard state.cancelled.insert(number).inserted else { return nil }
            state.cancels += 1
            guard callsBackOnCancel, let index = state.waiting.firstIndex(where: { $0.number == number }) else { return nil }
            return state.waiting.remove(at: index).completion
        }
        completion?(.failure(CancellationError()))
    }

    /// How many times ``fetch(_:)`` was called.
    public var callCount: Int { state.withLock { $0.calls } }
    /// How many calls wait for an answer.
    public var waitingCount: Int { state.withLock { $0.waiting.count } }
    /// How many calls were cancelled (a call cancelled twice counts once).
    public var cancelCount: Int { state.withLock { $0.cancels } }
    /// Whether a cancel reached the service.
    public var wasCancelled: Bool { cancelCount > 0 }

    /// Suspends the calling task until ``fetch(_:)`` has been called `count` times in all, or
    /// `timeout` passes (without blocking a pool thread).
    ///
    /// - Parameters:
    ///   - count: How many calls to wait for; 1 by default.
    ///   - timeout: The longest wait.
    /// - Returns: `true` if the calls came in time.
    public func called(times count: Int = 1, within timeout: Duration = .seconds(30)) async -> Bool {
        let latch = state.withLock { state -> Latch? in
            guard state.calls < count else { return nil }
            let latch = Latch()
            state.callLatches.append((count, latch))
            return latch
        }
        guard let latch else { return true }
        return await latch.opened(within: timeout)
    }
}
