import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

// Observer event queues (issue 16, part 5): an observer told its events on a dispatch queue of its
// choosing — exactly once, in order, will execute / will finish still ahead of what follows — and
// no deadlock when that queue is the one raising the event.

/// A serial queue that knows whether the current thread runs on it.
final class MarkedQueue: Sendable {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Int>()

    init(_ label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: 1)
    }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == 1 }
}

/// An observer that names its own event queue (the protocol requirement).
struct QueueNamingObserver: OperationObserver {
    let marked: MarkedQueue
    let log: Recorder<String>
    let finished: Latch

    var eventQueue: DispatchQueue? { marked.queue }

    private func note(_ event: String) { log.record("\(event):\(marked.isCurrent)") }

    func didAttach(to procedure: ProcedureOperation) { note("didAttach") }
    func willExecute(_ procedure: ProcedureOperation) { note("willExecute") }
    func didExecute(_ procedure: ProcedureOperation) { note("didExecute") }
    func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) { note("didCancel") }
    func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation) { note("willAdd") }
    func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation) { note("didAdd") }
    func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) { note("didProduce") }
    func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { note("willFinish") }
    func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        note("didFinish")
        finished.countDown()
    }
}

@Suite("Events: observer event queues", .offThePool)
struct ObserverEventQueueTests {
    @Test("an observer with an eventQueue is told every event on it, once each, in order")
    func eventsOnTheQueue() async throws {
        let marked = MarkedQueue("event-queue.observer")
        let log = Recorder<String>()
        let finished = Latch()
        let queue = ConcurrentOperationQueue(name: "event-queue")
        let procedure = ClosureProcedure<Void>(name: "observed", asynchronous: { procedure in
            try? procedure.produce(ClosureOperation(name: "p") {})
            procedure.cancel()
            procedure.finish()
        })
        try procedure.addObserver(QueueNamingObserver(marked: marked, log: log, finished: finished))
        try queue.addOperation(procedure)
        #expect(await finished.opens())
        #expect(log.values == [
            "didAttach:true", "willExecute:true", "willAdd:true", "didAdd:true", "didProduce:true", "didCancel:true",
            "didExecute:true", "willFinish:true", "didFinish:true",
        ])
        #expect(await queue.empties())
    }

    @Test("observer.on(queue): the wrapped observer is told on the queue, only the events it wants")
    func onWrapper() async throws {
        let marked = MarkedQueue("event-queue.on")
        let seen = Recorder<String>()
        let done = Latch()
        let observer = ClosureObserver(
            willExecute: { _ in seen.record("willExecute:\(marked.isCurrent)") },
            didFinish: { _, _ in
                seen.record("didFinish:\(marked.isCurrent)")
                done.countDown()
            }).on(marked.queue)
        #expect(observer.observedEvents == [.willExecute, .didFinish])
        #expect(observer.eventQueue === marked.queue)
        // Wrapping twice keeps one hop.
        #expect(observer.on(marked.queue).base is ClosureObserver)
        let queue = ConcurrentOperationQueue(name: "event-queue-on")
        let procedure = ClosureProcedure<Void>(name: "on") {}
        try procedure.addObserver(observer)
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(seen.values == ["willExecute:true", "didFinish:true"])
    }

    @Test("will execute on the observer's queue has returned before the work starts; did finish before a wait returns")
    func willExecuteWaits() async throws {
        let marked = MarkedQueue("event-queue.wait")
        let seen = Recorder<String>()
        let queue = ConcurrentOperationQueue(name: "event-queue-wait")
        let procedure = ClosureProcedure<Void>(name: "waits") { seen.record("work") }
        try procedure.addObserver(ClosureObserver(
            willExecute: { _ in seen.record("willExecute") },
            didFinish: { _, _ in seen.record("didFinish") }).on(marked.queue))
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        #expect(seen.values == ["willExecute", "work", "didFinish"])
    }

    @Test("no deadlock when the events are raised on the observer's own queue: told there directly")
    func raisedOnTheObserversQueue() async throws {
        let marked = MarkedQueue("event-queue.same")
        let log = Recorder<String>()
        let finished = Latch()
        let queue = ConcurrentOperationQueue(name: "event-queue-same")
        // The work hops onto the observer's queue to produce and finish: will add and will finish
        // (which wait for the observer) are raised on that queue — once the worker is telling
        // did execute, which it used to wait to tell on that same queue (a deadlock).
        let executed = Gate()
        let procedure = ClosureProcedure<Void>(name: "same", asynchronous: { procedure in
            marked.queue.async {
                _ = executed.wait(timeout: .seconds(30))
                try? procedure.produce(ClosureOperation(name: "p") {})
                procedure.finish()
            }
        })
        // Told on the worker, before the observer with the event queue.
        try procedure.addObserver(ClosureObserver(didExecute: { _ in executed.open() }))
        try procedure.addObserver(QueueNamingObserver(marked: marked, log: log, finished: finished))
        try queue.addOperation(procedure)
        #expect(await finished.opens())
        #expect(log.values.allSatisfy { $0.hasSuffix(":true") })
        #expect(log.values.map { $0.split(separator: ":")[0] } == [
            "didAttach", "willExecute", "didExecute", "willAdd", "didAdd", "didProduce", "willFinish", "didFinish",
        ])

        // Started by hand from a block on the observer's queue: every event is raised there.
        let byHand = ClosureProcedure<Void>(name: "by-hand") {}
        let handLog = Recorder<String>()
        let handFinished = Latch()
        try byHand.addObserver(QueueNamingObserver(marked: marked, log: handLog, finished: handFinished))
        marked.queue.async { try? byHand.start() }
        #expect(await handFinished.opens())
        #expect(handLog.values == ["didAttach:true", "willExecute:true", "didExecute:true", "willFinish:true", "didFinish:true"])
    }

    @Test("many procedures with observers on one serial queue: every event once, in each procedure's order")
    func manyProceduresOneQueue() async throws {
        let marked = MarkedQueue("event-queue.many")
        let queue = ConcurrentOperationQueue(name: "event-queue-many")
        let count = 40
        var logs: [Recorder<String>] = []
        var latches: [Latch] = []
        for index in 0..<count {
            let log = Recorder<String>()
            let finished = Latch()
            let procedure = ClosureProcedure<Void>(name: "p\(index)", asynchronous: { procedure in
                if index.isMultiple(of: 2) { procedure.cancel() }
                procedure.finish()
            })
            try procedure.addObserver(QueueNamingObserver(marked: marked, log: log, finished: finished))
            try queue.addOperation(procedure)
            logs.append(log)
            latches.append(finished)
        }
        for (index, latch) in latches.enumerated() {
            #expect(await latch.opens())
            let expected = index.isMultiple(of: 2)
                ? ["didAttach", "willExecute", "didCancel", "didExecute", "willFinish", "didFinish"]
                : ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"]
            #expect(logs[index].values == expected.map { "\($0):true" })
        }
    }
}
