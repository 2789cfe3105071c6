import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// Event streams: a procedure's lifecycle events and a queue's events as AsyncSequences.
@Suite("Concurrency: event streams", .offThePool)
struct EventStreamTests {
    /// Collects a stream's events until it ends (failing by timeout if it never does).
    static func collect<Element: Sendable>(_ stream: AsyncStream<Element>) async throws -> [Element] {
        try await awaitWithin {
            var events: [Element] = []
            for await event in stream { events.append(event) }
            return events
        }
    }

    @Test("a procedure's events, read before it runs: every event in order, ending after did finish")
    func procedureEvents() async throws {
        let queue = ConcurrentOperationQueue(name: "events")
        let procedure = ClosureProcedure<Int>(name: "p") { 1 }
        let events = procedure.events
        try queue.addOperation(procedure)
        let names = try await Self.collect(events).map(\.description)
        #expect(names == ["willExecute", "didExecute", "willFinish(0 errors)", "didFinish(0 errors)"])
    }

    @Test("a cancelled procedure's events: did cancel, then the finish, no execution")
    func cancelledProcedureEvents() async throws {
        let queue = ConcurrentOperationQueue(name: "events-cancel")
        queue.isSuspended = true
        let procedure = ClosureProcedure<Int>(name: "p") { 1 }
        let events = procedure.events
        try queue.addOperation(procedure)
        procedure.cancel()
        queue.isSuspended = false
        let names = try await Self.collect(events).map(\.description)
        #expect(names == ["didCancel", "willFinish(0 errors)", "didFinish(0 errors)"])
    }

    @Test("read while the procedure executes, the stream yields the finish only, then ends")
    func lateStream() async throws {
        let queue = ConcurrentOperationQueue(name: "events-late")
        let started = Latch()
        let release = Gate()
        let procedure = ClosureProcedure<Int>(name: "p", asynchronous: { procedure in
            started.countDown()
            BlockingWaits.run {
                _ = release.wait(timeout: operationTestTimeout)
                procedure.finish(withValue: 1)
            }
        })
        try queue.addOperation(procedure)
        #expect(await opened(started))
        let events = procedure.events
        release.open()
        #expect(try await Self.collect(events).map(\.description) == ["didFinish(0 errors)"])
        // And after it finished: at once.
        #expect(try await Self.collect(procedure.events).map(\.description) == ["didFinish(0 errors)"])
    }

    @Test("a queue's events: will add, did add, did finish for each operation")
    func queueEvents() async throws {
        let queue = ConcurrentOperationQueue(name: "queue-events")
        let events = queue.events
        let operation = ClosureOperation(name: "one") {}
        try queue.addOperation(operation)
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        var iterator = events.makeAsyncIterator()
        var names: [String] = []
        for _ in 0..<3 { if let event = await iterator.next() { names.append(event.description) } }
        #expect(names == ["willAdd(one)", "didAdd(one)", "didFinish(one)"])
    }

    @Test("a queue's stream ends when the queue is released, and does not keep it alive")
    func queueStreamEnds() async throws {
        let released = Latch()
        let events: AsyncStream<ConcurrentOperationQueue.Event>
        do {
            let queue = ConcurrentOperationQueue(name: "released")
            events = queue.events
            queue.addOperation {}
            try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
            // The queue drops its own retain just after waking waiters: release ours then.
            queue.eventHandlers = nil
            _ = released
        }
        let all = try await Self.collect(events)
        #expect(all.count == 3)
    }

    @Test("a queue's delegate and event handlers still work next to streams; a stopped stream is dropped")
    func queueStreamsAndHandlers() async throws {
        let queue = ConcurrentOperationQueue(name: "both")
        let handled = Recorder<String>()
        queue.eventHandlers = QueueEventHandlers(didFinish: { handled.record($0.displayName) })
        let reader = Task { () -> Int in
            var count = 0
            for await event in queue.events {
                if case .didFinish = event { count += 1; if count == 2 { break } }
            }
            return count
        }
        try await untilTrue { queue.lock.withLock { queue._eventStreams?.continuations.count == 1 } }
        queue.addOperation {}
        queue.addOperation {}
        #expect(try await awaitWithin { await reader.value } == 2)
        try await untilTrue { queue.lock.withLock { queue._eventStreams?.continuations.isEmpty ?? true } }
        try await awaitWithin { await queue.waitUntilAllOperationsAreFinished() }
        #expect(handled.values.count == 2)
    }
}
