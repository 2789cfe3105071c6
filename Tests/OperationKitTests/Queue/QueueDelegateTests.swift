import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// M93: the queue's delegate and event handlers — will add, did add, will finish, did finish —
/// in order, with the procedure's state at each.
@Suite("M93 Queue delegate and event handlers", .offThePool)
struct QueueDelegateTests {
    @Test("M93 a procedure: will add (initialized), did add (pending), will finish (finishing), did finish (finished)")
    func procedureEvents() async throws {
        let queue = suspendedProcedureQueue("M93")
        let delegate = RecordingQueueDelegate()
        queue.delegate = delegate
        #expect(queue.delegate === delegate)
        let procedure = ClosureProcedure<Int>(name: "M93") { 93 }
        try queue.addOperation(procedure)
        // OD's did-add sees an initialized task; ours is already pending in its queue.
        #expect(delegate.events(of: "M93") == ["willAdd initialized", "didAdd pending"])
        queue.isSuspended = false
        #expect(await delegate.didFinishAll.opens())
        // OD's will-finish comes while the task is executing; ours once it is finishing, before
        // the will-finish observers.
        #expect(delegate.events(of: "M93") == [
            "willAdd initialized", "didAdd pending", "willFinish finishing", "didFinish finished",
        ])
    }

    @Test("M93 will-finish reaches the delegate before the procedure's will-finish observers")
    func willFinishBeforeObservers() async throws {
        let queue = ConcurrentOperationQueue(name: "M93-order")
        let order = Recorder<String>()
        let done = Latch()
        queue.eventHandlers = QueueEventHandlers(
            willFinish: { _ in order.record("queue willFinish") },
            didFinish: { _ in order.record("queue didFinish") })
        let procedure = ClosureProcedure<Void>(name: "order") {}
        procedure.completionBlock = { order.record("completion block") }
        try procedure.addObserver(ClosureObserver(
            willFinish: { _, _ in order.record("observer willFinish") },
            didFinish: { _, _ in order.record("observer didFinish"); done.countDown() }))
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(order.values == [
            "queue willFinish", "observer willFinish", "completion block", "queue didFinish", "observer didFinish",
        ])
    }

    @Test("a cancelled procedure still goes through will finish and did finish")
    func cancelledProcedureEvents() async throws {
        let queue = suspendedProcedureQueue("M93-cancelled")
        let delegate = RecordingQueueDelegate()
        queue.delegate = delegate
        let procedure = ClosureProcedure<Void>(name: "cancelled") {}
        procedure.cancel()
        try queue.addOperation(procedure)
        queue.isSuspended = false
        #expect(await delegate.didFinishAll.opens())
        #expect(delegate.events(of: "cancelled") == [
            "willAdd initialized", "didAdd pending", "willFinish finishing", "didFinish finished",
        ])
    }

    @Test("M93 did-add comes before will-finish and did-finish, even in a batch whose other did-adds are slow")
    func didAddBeforeFinish() async throws {
        let queue = ConcurrentOperationQueue(name: "M93-batch")
        let order = Recorder<String>()
        let secondFinished = Latch()
        queue.eventHandlers = QueueEventHandlers(
            didAdd: { operation in
                // A slow listener: while it handles the first did-add, the second operation, already
                // in the queue, may run (bounded: an implementation that tells did-add before an
                // operation can start makes this wait time out).
                if operation.name == "first" { _ = secondFinished.wait(timeout: .seconds(1)) }
                order.record("didAdd \(operation.name ?? "")")
            },
            willFinish: { order.record("willFinish \($0.name ?? "")") },
            didFinish: { operation in
                order.record("didFinish \(operation.name ?? "")")
                if operation.name == "second" { secondFinished.countDown() }
            })
        let first = ClosureProcedure<Void>(name: "first") {}
        let second = ClosureProcedure<Void>(name: "second") {}
        // Added from a thread of its own: the slow listener blocks the adding thread.
        let added = await waitingOffThePool {
            (try? queue.addOperations([first, second], waitUntilFinished: false)) != nil
        }
        #expect(added)
        #expect(await queue.empties())
        let ofSecond = order.values.filter { $0.hasSuffix("second") }
        #expect(ofSecond == ["didAdd second", "willFinish second", "didFinish second"])
    }

    @Test("a plain operation has no finishing state: only did finish")
    func plainOperationEvents() async throws {
        let queue = suspendedProcedureQueue("M93-plain")
        let delegate = RecordingQueueDelegate()
        queue.delegate = delegate
        try queue.addOperation(ClosureOperation(name: "plain") {})
        queue.isSuspended = false
        #expect(await delegate.didFinishAll.opens())
        let events = delegate.events(of: "plain")
        #expect(events.map { String($0.split(separator: " ")[0]) } == ["willAdd", "didAdd", "didFinish"])
        #expect(events.last == "didFinish finished")
    }

    @Test("event handlers are told before the delegate, each event once")
    func handlersAndDelegate() async throws {
        let queue = suspendedProcedureQueue("M93-both")
        let order = Recorder<String>()
        final class Delegate: ConcurrentOperationQueueDelegate {
            // No mutable state of its own.
            let order: Recorder<String>
            let finished = Latch()
            init(_ order: Recorder<String>) { self.order = order }
            func operationQueue(_ queue: ConcurrentOperationQueue, didAdd operation: ConcurrentOperation) {
                order.record("delegate didAdd")
            }
            func operationQueue(_ queue: ConcurrentOperationQueue, didFinish operation: ConcurrentOperation) {
                order.record("delegate didFinish")
                finished.countDown()
            }
        }
        let delegate = Delegate(order)
        queue.delegate = delegate
        queue.eventHandlers = QueueEventHandlers(
            didAdd: { _ in order.record("handler didAdd") },
            didFinish: { _ in order.record("handler didFinish") })
        #expect(queue.eventHandlers != nil)
        try queue.addOperation(ClosureProcedure<Void>(name: "both") {})
        queue.isSuspended = false
        #expect(await delegate.finished.opens())
        #expect(order.values == ["handler didAdd", "delegate didAdd", "handler didFinish", "delegate didFinish"])
    }

    @Test("the queue holds its delegate weakly")
    func weakDelegate() {
        let queue = ConcurrentOperationQueue(name: "M93-weak")
        do {
            let delegate = RecordingQueueDelegate()
            queue.delegate = delegate
            #expect(queue.delegate != nil)
        }
        #expect(queue.delegate == nil)
    }

    @Test("did finish comes before the queue releases the operation")
    func didFinishBeforeRelease() async throws {
        let queue = ConcurrentOperationQueue(name: "M93-release")
        let stillHeld = Recorder<Bool>()
        let done = Latch()
        queue.eventHandlers = QueueEventHandlers(didFinish: { [weak queue] operation in
            stillHeld.record(queue?.operations.contains { $0 === operation } ?? false)
            done.countDown()
        })
        try queue.addOperation(ClosureProcedure<Void>(name: "released") {})
        #expect(await done.opens())
        #expect(stillHeld.values == [true])
    }

    @Test("a condition's produced dependency is added (and told) inside the procedure's add")
    func producedDependencyEvents() async throws {
        let queue = suspendedProcedureQueue("M93-produced")
        let delegate = RecordingQueueDelegate(expectedFinishes: 2)
        queue.delegate = delegate
        let procedure = ClosureProcedure<Void>(name: "consumer") {}
        try procedure.addCondition(ProducingCondition("condition", Recorder()) {
            ClosureOperation(name: "produced") {}
        })
        try queue.addOperation(procedure)
        #expect(delegate.events.map { $0.split(separator: " ").prefix(2).joined(separator: " ") } == [
            // The procedure is linked first, then what its conditions produce (so that on a
            // narrow queue its conditions are evaluated before a produced operation takes the
            // last slot).
            "willAdd consumer", "didAdd consumer", "willAdd produced", "didAdd produced",
        ])
        queue.isSuspended = false
        #expect(await delegate.didFinishAll.opens())
    }

    @Test("an operation a procedure produces goes through the queue's delegate")
    func producedOperationEvents() async throws {
        let queue = ConcurrentOperationQueue(name: "M93-produce")
        let delegate = RecordingQueueDelegate(expectedFinishes: 2)
        queue.delegate = delegate
        let procedure = ClosureProcedure<Void>(name: "producer", asynchronous: { procedure in
            try? procedure.produce(ClosureOperation(name: "child") {})
            procedure.finish()
        })
        try queue.addOperation(procedure)
        #expect(await delegate.didFinishAll.opens())
        // (Their order is checked by didAddBeforeFinish.)
        let events = delegate.events(of: "child").map { String($0.split(separator: " ")[0]) }
        #expect(events.sorted() == ["didAdd", "didFinish", "willAdd"])
    }
}
