// A bounded await: runs async work in a task of its own and reports how it ended, or that it
// had not ended when the time ran out.
/// Runs `body` in a new task and returns how it ended, or `nil` if it has not ended within
/// `timeout` (the stuck task is abandoned): a test that awaits through this fails on a leaked
/// continuation or a hang instead of hanging itself.
///
/// - Parameters:
///   - timeout: The longest wait.
///   - body: The work to wait for.
/// - Returns: `.success` with the value, `.failure` with the error thrown, or `nil` on timeout.
public func outcome<Value: Sendable>(
    within timeout: Duration, of body: @escaping @Sendable () async throws -> Value
) async -> Result<Value, any Error>? {
    let (outcomes, continuation) = AsyncStream.makeStream(of: Result<Value, any Error>?.self)
    let work = Task {
        do {
            continuation.yield(.success(try await body()))
        } catch {
            continuation.yield(.failure(error))
        }
    }
    let timer = Task {
        try? await Task.sleep(for: timeout)
        continuation.yield(nil)
    }
    var iterator = outcomes.makeAsyncIterator()
    let outcome = await iterator.next() ?? nil
    timer.cancel()
    continuation.finish()
    _ = work
    return outcome
}
