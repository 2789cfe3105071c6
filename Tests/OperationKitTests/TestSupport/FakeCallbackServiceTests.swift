// Tests of the test kit's FakeCallbackService, wrapped in a ClosureProcedure, a ClosureOperation
// and a ResultProcedure subclass: answers, early answers, never answering, and cancels.
import OperationKit
import OperationKitTestSupport
import Testing

/// A procedure wrapping the fake service, passing a cancel on to the call in flight.
private final class FetchNumber: ResultProcedure<Int>, @unchecked Sendable {
    // `request` is behind its own lock; `service` is immutable.
    let service: FakeCallbackService<Int>
    private let request = Locked<FakeCallbackService<Int>.Request?>(nil)

    init(service: FakeCallbackService<Int>) {
        self.service = service
        super.init(name: "FetchNumber")
    }

    override func execute() {
        let request = service.fetch { result in self.finish(withResult: result) }
        self.request.withLock { $0 = request }
        if isCancelled { request.cancel() }  // cancelled before the request was stored
    }

    override func procedureDidCancel(with error: (any Error)?) {
        request.withLock { $0 }?.cancel()
    }
}

@Suite("TestSupport: FakeCallbackService", .offThePool)
struct FakeCallbackServiceTests {
    static func queue(_ name: String) throws -> ConcurrentOperationQueue {
        try ConcurrentOperationQueue(name: "kit-\(name)", maxConcurrentOperationCount: 2)
    }

    @Test("an answer given before the call is kept for it; one given after goes to the waiting call")
    func answers() async throws {
        let queue = try Self.queue("fake-answers")
        let service = FakeCallbackService<Int>()
        #expect(service.complete(with: 1) == false, "no call waits: kept")
        let early = ClosureProcedure<Int>(name: "early", asynchronous: { procedure in
            service.fetch { procedure.finish(withResult: $0) }
        })
        try queue.addOperation(early)
        await expectValue(early, equals: 1)
        let late = ClosureProcedure<Int>(name: "late", asynchronous: { procedure in
            service.fetch { procedure.finish(withResult: $0) }
        })
        try queue.addOperation(late)
        #expect(await service.called(times: 2, within: .seconds(30)))
        #expect(service.waitingCount == 1)
        #expect(service.complete(with: 2))
        await expectValue(late, equals: 2)
        #expect(service.callCount == 2 && !service.wasCancelled && service.waitingCount == 0)
    }

    @Test("a failure reaches the procedure's errors; a ClosureOperation wraps it too")
    func failure() async throws {
        let queue = try Self.queue("fake-failure")
        let service = FakeCallbackService<Int>()
        let procedure = ClosureProcedure<Int>(name: "fails", asynchronous: { procedure in
            service.fetch { procedure.finish(withResult: $0) }
        })
        try queue.addOperation(procedure)
        #expect(await service.called(within: .seconds(30)))
        service.fail(with: TestError(7))
        await expectFinished(procedure, errors: .equal(to: [TestError(7)]))
        let received = Locked<Int?>(nil)
        let operation = ClosureOperation(name: "plain", asynchronous: { operation in
            service.fetch { result in
                received.withLock { $0 = try? result.get() }
                operation.finish()
            }
        })
        try queue.addOperation(operation)
        service.complete(with: 8)
        await expectFinished(operation)
        #expect(received.withLock { $0 } == 8)
    }

    @Test("never answered: a cancel reaches the service and calls back once with CancellationError")
    func cancelReachesService() async throws {
        let queue = try Self.queue("fake-cancel")
        let service = FakeCallbackService<Int>()
        let fetch = FetchNumber(service: service)
        try queue.addOperation(fetch)
        #expect(await service.called(within: .seconds(30)))
        fetch.cancel()
        await expectCancelled(fetch, errors: .count(1))
        #expect(fetch.errors.first is CancellationError)
        #expect(service.cancelCount == 1 && service.wasCancelled)
        #expect(service.complete(with: 3) == false, "the cancelled call was answered already: kept for a next call")
        #expect(service.callCount == 1)
    }

    @Test("with callsBackOnCancel false a cancel is only recorded; cancelled before it runs, no call")
    func cancelOnlyRecorded() async throws {
        let queue = try Self.queue("fake-cancel-recorded")
        let service = FakeCallbackService<Int>(callsBackOnCancel: false)
        let fetch = FetchNumber(service: service)
        try queue.addOperation(fetch)
        #expect(await service.called(within: .seconds(30)))
        fetch.cancel()
        // The cancel reaches the request from the did-cancel hook, or from execute() if the
        // request was not stored yet; either may run on another thread after cancel() returns.
        let reached = await outcome(within: .seconds(30)) {
            var pause = PollPause()
            while !service.wasCancelled { await pause.next() }
        }
        #expect(reached != nil && service.waitingCount == 1)
        service.complete(with: 4)
        await expectCancelled(fetch)
        #expect(fetch.output == 4, "cancelled while executing, it still finished with the answer")
        let notRun = FetchNumber(service: FakeCallbackService<Int>())
        notRun.cancel()
        try queue.addOperation(notRun)
        await expectCancelled(notRun, errors: .empty)
        #expect(notRun.service.callCount == 0 && !notRun.service.wasCancelled)
    }

    @Test("a request cancelled twice counts once")
    func cancelTwice() {
        let service = FakeCallbackService<Int>()
        let calls = Locked(0)
        let request = service.fetch { _ in calls.withLock { $0 += 1 } }
        request.cancel()
        request.cancel()
        #expect(request.isCancelled && request.number == 1)
        #expect(service.cancelCount == 1 && calls.withLock { $0 } == 1)
    }
}
