import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// `ConcurrentOperation.lifecycleEvents`: started / cancelled / finished as an AsyncSequence, kept
/// in a process-wide side table. Serialized: the table checks look up operations by identity,
/// which another test's operation could take over once one is released.
@Suite("Concurrency: operation lifecycle event streams", .offThePool, .serialized)
struct OperationEventStreamTests {
    typealias Event = ConcurrentOperation.LifecycleEvent

    /// Collects a stream's events until it ends (failing by timeout if it never does).
    static func collect(_ stream: AsyncStream<Event>) async throws -> [Event] {
        try await awaitWithin {
            var events: [Event] = []
            for await event in stream { events.append(event) }
            return events
        }
    }

    /// Whether the side table has nothing for `operation`.
    static func leftNothing(_ operation: ConcurrentOperation) -> Bool {
        !LifecycleEventStreams.hasEntry(for: ObjectIdentifier(operation))
    }

    @Test("a closure operation on a queue: started, then finished (after the completion block); the stream ends")
    func startedThenFinished() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle")
        let completed = Latch()
        let operation = ClosureOperation(name: "one") {}
        operation.completionBlock = { completed.countDown() }
        let events = operation.lifecycleEvents
        #expect(LifecycleEventStreams.streamCount(for: ObjectIdentifier(operation)) == 1)
        try queue.addOperation(operation)
        let seen = try await awaitWithin { () -> [Event] in
            var seen: [Event] = []
            for await event in events {
                if event == .finished { #expect(completed.count == 0, "finished comes after the completion block") }
                seen.append(event)
            }
            return seen
        }
        #expect(seen == [.started, .finished])
        #expect(Self.leftNothing(operation))
    }

    @Test("cancelled before it starts: cancelled, finished — never started")
    func cancelledBeforeStart() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle-cancel")
        queue.isSuspended = true
        let executions = AtomicCounter()
        let operation = ClosureOperation(name: "cancelled") { executions.increment() }
        let events = operation.lifecycleEvents
        try queue.addOperation(operation)
        operation.cancel()
        queue.isSuspended = false
        #expect(try await Self.collect(events) == [.cancelled, .finished])
        #expect(executions.value == 0)
        #expect(Self.leftNothing(operation))

        // The same by hand, through start().
        let manual = ClosureOperation(name: "manual") { executions.increment() }
        let manualEvents = manual.lifecycleEvents
        manual.cancel()
        try manual.start()
        #expect(try await Self.collect(manualEvents) == [.cancelled, .finished])
        #expect(executions.value == 0)
    }

    @Test("cancelled while executing: started, cancelled, finished")
    func cancelledWhileExecuting() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle-executing")
        let operation = ManuallyFinishedOperation(name: "executing")
        let events = operation.lifecycleEvents
        try queue.addOperation(operation)
        #expect(await opened(operation.executed))
        operation.cancel()
        operation.cancel()  // a second cancel changes nothing
        operation.finish()
        #expect(try await Self.collect(events) == [.started, .cancelled, .finished])
        #expect(Self.leftNothing(operation))
    }

    @Test("made after the finish: the whole lifecycle at once, then the end; nothing registered")
    func afterFinish() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle-after")

        let plain = ClosureOperation(name: "plain") {}
        try queue.addOperation(plain)
        try await awaitWithin { await plain.finished }
        #expect(try await Self.collect(plain.lifecycleEvents) == [.started, .finished])
        #expect(Self.leftNothing(plain))

        let skipped = ClosureOperation(name: "skipped") {}
        skipped.cancel()
        try queue.addOperation(skipped)
        try await awaitWithin { await skipped.finished }
        #expect(try await Self.collect(skipped.lifecycleEvents) == [.cancelled, .finished])

        let interrupted = ManuallyFinishedOperation(name: "interrupted")
        try queue.addOperation(interrupted)
        #expect(await opened(interrupted.executed))
        interrupted.cancel()
        interrupted.finish()
        #expect(try await Self.collect(interrupted.lifecycleEvents) == [.started, .cancelled, .finished])
        #expect(Self.leftNothing(interrupted))
    }

    @Test("made mid-way: what already happened at once, then the rest")
    func midway() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle-midway")
        let executing = ManuallyFinishedOperation(name: "executing")
        try queue.addOperation(executing)
        #expect(await opened(executing.executed))
        let events = executing.lifecycleEvents
        var iterator = events.makeAsyncIterator()
        #expect(await iterator.next() == .started)  // buffered already: no wait
        executing.finish()
        #expect(await iterator.next() == .finished)
        #expect(await iterator.next() == nil)

        queue.isSuspended = true
        let pending = ClosureOperation(name: "pending") {}
        try queue.addOperation(pending)
        pending.cancel()
        let pendingEvents = pending.lifecycleEvents
        queue.isSuspended = false
        #expect(try await Self.collect(pendingEvents) == [.cancelled, .finished])
    }

    @Test("two streams, one made before and one during the run, both get every event")
    func twoSubscribers() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle-two")
        let operation = ManuallyFinishedOperation(name: "shared")
        let first = operation.lifecycleEvents
        try queue.addOperation(operation)
        #expect(await opened(operation.executed))
        let second = operation.lifecycleEvents
        #expect(LifecycleEventStreams.streamCount(for: ObjectIdentifier(operation)) == 2)
        async let firstEvents = Self.collect(first)
        async let secondEvents = Self.collect(second)
        operation.cancel()
        operation.finish()
        #expect(try await firstEvents == [.started, .cancelled, .finished])
        #expect(try await secondEvents == [.started, .cancelled, .finished])
        #expect(Self.leftNothing(operation))
    }

    @Test("leaving the loop early removes that stream; the others go on")
    func breakRemovesStream() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle-break")
        let operation = ManuallyFinishedOperation(name: "break")
        let id = ObjectIdentifier(operation)
        let kept = operation.lifecycleEvents
        try queue.addOperation(operation)
        #expect(await opened(operation.executed))
        let firstEvent = try await awaitWithin { () -> Event? in
            for await event in operation.lifecycleEvents { return event }  // leaves at the first
            return nil
        }
        #expect(firstEvent == .started)
        try await untilTrue { LifecycleEventStreams.streamCount(for: id) == 1 }
        operation.finish()
        #expect(try await Self.collect(kept) == [.started, .finished])
        #expect(Self.leftNothing(operation))

        // The last stream leaving removes the entry, before any finish.
        let unfinished = ManuallyFinishedOperation(name: "unfinished")
        let reader = Task { () -> Int in
            var count = 0
            for await _ in unfinished.lifecycleEvents { count += 1 }
            return count
        }
        try await untilTrue { LifecycleEventStreams.streamCount(for: ObjectIdentifier(unfinished)) == 1 }
        reader.cancel()
        #expect(try await awaitWithin { await reader.value } == 0)
        try await untilTrue { Self.leftNothing(unfinished) }
    }

    @Test("an operation released without finishing ends its streams and leaves no entry")
    func releasedUnfinished() async throws {
        let deallocated = Latch(count: 2)
        let events: AsyncStream<Event>
        let cancelledEvents: AsyncStream<Event>
        let id: ObjectIdentifier
        let cancelledID: ObjectIdentifier
        do {
            let operation = DeallocationProbeOperation(name: "never run", deallocated: deallocated)
            id = ObjectIdentifier(operation)
            events = operation.lifecycleEvents
            #expect(LifecycleEventStreams.hasEntry(for: id))

            let cancelled = DeallocationProbeOperation(name: "cancelled, never run", deallocated: deallocated)
            cancelledID = ObjectIdentifier(cancelled)
            cancelledEvents = cancelled.lifecycleEvents
            cancelled.cancel()
        }
        // The streams did not keep them alive.
        #expect(deallocated.count == 0)
        #expect(!LifecycleEventStreams.hasEntry(for: id))
        #expect(!LifecycleEventStreams.hasEntry(for: cancelledID))
        #expect(try await Self.collect(events) == [])
        #expect(try await Self.collect(cancelledEvents) == [.cancelled])
    }

    @Test("a procedure: its own events stream works as before, next to its lifecycle events")
    func procedureStreams() async throws {
        let queue = ConcurrentOperationQueue(name: "lifecycle-procedure")
        let procedure = ClosureProcedure<Int>(name: "p") { 1 }
        let events = procedure.events
        let lifecycle = procedure.lifecycleEvents
        try queue.addOperation(procedure)
        let names = try await awaitWithin { () -> [String] in
            var names: [String] = []
            for await event in events { names.append(event.description) }
            return names
        }
        #expect(names == ["willExecute", "didExecute", "willFinish(0 errors)", "didFinish(0 errors)"])
        #expect(try await Self.collect(lifecycle) == [.started, .finished])

        // Cancelled through cancel(with:) before it runs.
        queue.isSuspended = true
        let cancelled = ClosureProcedure<Int>(name: "c") { 1 }
        let cancelledLifecycle = cancelled.lifecycleEvents
        let cancelledEvents = cancelled.events
        try queue.addOperation(cancelled)
        cancelled.cancel(with: nil)
        queue.isSuspended = false
        #expect(try await Self.collect(cancelledLifecycle) == [.cancelled, .finished])
        let cancelledNames = try await awaitWithin { () -> [String] in
            var names: [String] = []
            for await event in cancelledEvents { names.append(event.description) }
            return names
        }
        #expect(cancelledNames == ["didCancel", "willFinish(0 errors)", "didFinish(0 errors)"])
        #expect(Self.leftNothing(procedure) && Self.leftNothing(cancelled))
    }

    @Test("async operations one after another on a runner: started, finished each")
    func asyncOperations() async throws {
        let queue = try ConcurrentOperationQueue(name: "lifecycle-async", maxConcurrentOperationCount: 1)
        let operations = (0..<4).map { index in AsyncOperation(name: "async\(index)") { index } }
        let streams = operations.map(\.lifecycleEvents)
        for operation in operations { try queue.addOperation(operation) }
        for stream in streams { #expect(try await Self.collect(stream) == [.started, .finished]) }
        #expect(operations.allSatisfy(Self.leftNothing))
    }

    @Test("cancels racing the runs: every stream yields a lifecycle in order, and nothing is left")
    func racingCancels() async throws {
        let queue = try ConcurrentOperationQueue(name: "lifecycle-race", maxConcurrentOperationCount: 2)
        let operations = (0..<200).map { index in ClosureOperation(name: "race\(index)") {} }
        let before = operations.map(\.lifecycleEvents)
        let cancelling = Task.detached {
            for operation in operations.reversed() { operation.cancel() }
        }
        for operation in operations { try queue.addOperation(operation) }
        let during = operations.map(\.lifecycleEvents)
        await cancelling.value
        let valid: Set<[Event]> = [[.started, .finished], [.cancelled, .finished], [.started, .cancelled, .finished]]
        for (index, operation) in operations.enumerated() {
            let first = try await Self.collect(before[index])
            let second = try await Self.collect(during[index])
            #expect(valid.contains(first), "\(operation.displayName): \(first)")
            #expect(first == second, "\(operation.displayName)")
            #expect(first.contains(.cancelled) == operation.isCancelled)
            #expect(try await Self.collect(operation.lifecycleEvents) == first)
            #expect(Self.leftNothing(operation))
        }
    }
}
