// Instruments on queues: each lifecycle event of an operation told once, in order, to the
// instrument of its own queue only; refused adds not told; run(_:_:) around execute().

import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Observability: operation events told to a queue's instrument", .offThePool, .exclusiveInstrumentation)
struct OperationInstrumentTests {
    /// A queue with its own capturing instrument.
    static func instrumentedQueue(_ name: String) -> (ConcurrentOperationQueue, RecordingInstrument) {
        let queue = ConcurrentOperationQueue(name: name)
        let instrument = RecordingInstrument()
        queue.instrument = instrument
        return (queue, instrument)
    }

    static func drain(_ queue: ConcurrentOperationQueue) {
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("a closure operation: added, ready, started, finished(succeeded) — once each, with its queue, times in order")
    func plainLifecycle() throws {
        let (queue, instrument) = Self.instrumentedQueue("plain")
        let operation = ClosureOperation(name: "one") {}
        try queue.addOperation(operation)
        Self.drain(queue)
        #expect(instrument.kinds(of: operation) == ["added", "ready", "started", "finished(succeeded)"])
        let events = instrument.events(of: operation)
        #expect(events.allSatisfy { $0.queue === queue })
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.time <= $1.time })
    }

    @Test("finished is told after the completion block and before a wait for the operation returns")
    func finishedBeforeWaitReturns() throws {
        let (queue, instrument) = Self.instrumentedQueue("finished-order")
        let completed = Latch()
        let operation = ClosureOperation(name: "completing") {}
        operation.completionBlock = { completed.countDown() }
        try queue.addOperation(operation)
        operation.waitUntilFinishedBlocking()
        #expect(completed.count == 0)
        #expect(instrument.kinds(of: operation).last == "finished(succeeded)")
        Self.drain(queue)
    }

    @Test("cancelled before it starts: added, cancelled, ready, finished(cancelled); never started; cancelled once")
    func cancelledBeforeStart() throws {
        let (queue, instrument) = Self.instrumentedQueue("cancel-pending")
        queue.isSuspended = true
        let operation = ClosureOperation(name: "cancelled") {}
        try queue.addOperation(operation)
        operation.cancel()
        operation.cancel()
        queue.isSuspended = false
        Self.drain(queue)
        #expect(instrument.kinds(of: operation) == ["added", "cancelled", "ready", "finished(cancelled)"])
    }

    @Test("cancelled while executing: started, cancelled, then finished(cancelled) last")
    func cancelledWhileExecuting() throws {
        let (queue, instrument) = Self.instrumentedQueue("cancel-executing")
        let entered = Latch()
        let release = Gate()
        let operation = ClosureOperation(name: "long") {
            entered.countDown()
            _ = release.wait(timeout: operationTestTimeout)
        }
        try queue.addOperation(operation)
        #expect(entered.wait(timeout: operationTestTimeout))
        operation.cancel()
        release.open()
        Self.drain(queue)
        #expect(instrument.kinds(of: operation) == ["added", "ready", "started", "cancelled", "finished(cancelled)"])
    }

    @Test("an async operation that throws finishes failed with its error")
    func asyncFailure() async throws {
        let (queue, instrument) = Self.instrumentedQueue("async-failure")
        let operation = AsyncOperation<Int>(name: "throws") { throw InstrumentTestError(7) }
        try queue.addOperation(operation)
        #expect(await queue.waitUntilAllOperationsAreFinishedWithin())
        let last = try #require(instrument.events(of: operation).last)
        guard case .finished(.failed(let errors)) = last.kind else {
            Issue.record("expected finished(failed), got \(last.kind.shortName)")
            return
        }
        #expect(errors.compactMap { $0 as? InstrumentTestError } == [InstrumentTestError(7)])
    }

    @Test("a dependency finishes before its dependent is ready; both told in lifecycle order")
    func dependencyOrder() throws {
        let (queue, instrument) = Self.instrumentedQueue("dependencies")
        let first = ClosureOperation(name: "first") {}
        let second = ClosureOperation(name: "second") {}
        try second.addDependency(first)
        try queue.addOperations([second, first], waitUntilFinished: false)
        Self.drain(queue)
        #expect(instrument.kinds(of: first) == ["added", "ready", "started", "finished(succeeded)"])
        #expect(instrument.kinds(of: second) == ["added", "ready", "started", "finished(succeeded)"])
        let events = instrument.events
        let firstFinished = try #require(events.firstIndex { $0.operation === first && $0.kind.shortName.hasPrefix("finished") })
        let secondReady = try #require(events.firstIndex { $0.operation === second && $0.kind.shortName == "ready" })
        #expect(firstFinished < secondReady)
    }

    @Test("a batch add tells added for every operation; a refused add or batch tells nothing")
    func refusedAddsNotTold() throws {
        let (queue, instrument) = Self.instrumentedQueue("refusals")
        queue.isSuspended = true
        let batch = (0..<3).map { ClosureOperation(name: "batch\($0)") {} }
        try queue.addOperations(batch, waitUntilFinished: false)
        // Added twice: refused.
        #expect(caughtOperationError { try queue.addOperation(batch[0]) } != nil)
        // A batch with a cycle: refused as a whole.
        let a = ClosureOperation(name: "a") {}
        let b = ClosureOperation(name: "b") {}
        try a.addDependency(b)
        try b.addDependency(a)
        #expect(caughtOperationError { try queue.addOperations([a, b], waitUntilFinished: false) } != nil)
        queue.isSuspended = false
        Self.drain(queue)
        for operation in batch {
            #expect(instrument.kinds(of: operation).filter { $0 == "added" }.count == 1)
            #expect(instrument.kinds(of: operation).last == "finished(succeeded)")
        }
        #expect(instrument.events(of: a).isEmpty && instrument.events(of: b).isEmpty)
    }

    @Test("an instrument on queue A sees nothing of queue B's operations")
    func queuesAreSeparate() throws {
        let (queueA, instrumentA) = Self.instrumentedQueue("A")
        let (queueB, instrumentB) = Self.instrumentedQueue("B")
        let onA = ClosureOperation(name: "onA") {}
        let onB = ClosureOperation(name: "onB") {}
        try queueA.addOperation(onA)
        try queueB.addOperation(onB)
        Self.drain(queueA)
        Self.drain(queueB)
        #expect(instrumentA.events.allSatisfy { $0.operation === onA && $0.queue === queueA })
        #expect(instrumentB.events.allSatisfy { $0.operation === onB && $0.queue === queueB })
        #expect(instrumentA.kinds(of: onA).count == 4 && instrumentB.kinds(of: onB).count == 4)
    }

    @Test("a queue whose instrument was removed tells nothing more")
    func removed() throws {
        let (queue, instrument) = Self.instrumentedQueue("removed")
        queue.instrument = nil
        try queue.addOperation(ClosureOperation(name: "untold") {})
        Self.drain(queue)
        #expect(instrument.events.isEmpty)
    }

    @Test("many operations under concurrency: each told added, ready, started, finished exactly once, in that order")
    func manyOperations() throws {
        let (queue, instrument) = Self.instrumentedQueue("many")
        let operations = (0..<200).map { index in ClosureOperation(name: "op\(index)") {} }
        for (index, operation) in operations.enumerated() where index % 3 == 2 {
            try operation.addDependency(operations[index - 1])
        }
        try queue.addOperations(operations, waitUntilFinished: false)
        for operation in operations.prefix(50) where operation.name!.hasSuffix("7") { operation.cancel() }
        Self.drain(queue)
        var byOperation: [ObjectIdentifier: [String]] = [:]
        for event in instrument.events { byOperation[ObjectIdentifier(event.operation), default: []].append(event.kind.shortName) }
        for operation in operations {
            let kinds = byOperation[ObjectIdentifier(operation)] ?? []
            let expected = operation.isCancelled
                ? [["added", "cancelled", "ready", "finished(cancelled)"], ["added", "ready", "cancelled", "finished(cancelled)"],
                   ["added", "ready", "started", "cancelled", "finished(cancelled)"]]
                : [["added", "ready", "started", "finished(succeeded)"]]
            #expect(expected.contains(kinds), "\(operation.displayName): \(kinds)")
        }
    }
}

extension ConcurrentOperationQueue {
    /// Awaits the queue's emptying within the tests' timeout; `false` on timeout.
    func waitUntilAllOperationsAreFinishedWithin() async -> Bool {
        await outcome(within: operationTestTimeout) { await self.waitUntilAllOperationsAreFinished() } != nil
    }
}
