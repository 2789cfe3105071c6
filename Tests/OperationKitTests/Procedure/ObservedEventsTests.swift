import OperationKit
import OperationKitTestSupport
import Testing

@Suite("M. observers choose their events", .offThePool)
struct ObservedEventsTests {
    /// Records every event it is told, but wants only some kinds.
    struct Selective: OperationObserver {
        let recorder: Recorder<String>
        let observedEvents: ProcedureEventKinds

        func didAttach(to procedure: ProcedureOperation) { recorder.record("didAttach") }
        func willExecute(_ procedure: ProcedureOperation) { recorder.record("willExecute") }
        func didExecute(_ procedure: ProcedureOperation) { recorder.record("didExecute") }
        func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { recorder.record("willFinish") }
        func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { recorder.record("didFinish") }
    }

    @Test("an observer is told only the kinds of event it wants")
    func onlyWantedEvents() async throws {
        let queue = ConcurrentOperationQueue(name: "observed-events")
        let finishOnly = Recorder<String>()
        let everything = Recorder<String>()
        let procedure = ClosureProcedure<Void> {}
        try procedure.addObserver(Selective(recorder: finishOnly, observedEvents: [.willExecute, .didFinish]))
        try procedure.addObserver(Selective(recorder: everything, observedEvents: .all))
        let done = Latch()
        try procedure.addObserver(ClosureObserver(didFinish: { _, _ in done.countDown() }))
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(await queue.empties())
        #expect(finishOnly.values == ["willExecute", "didFinish"])
        #expect(everything.values == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("a ClosureObserver wants the events it has closures for")
    func closureObserverKinds() throws {
        #expect(ClosureObserver().observedEvents == [])
        #expect(ClosureObserver(didCancel: { _, _ in }, didFinish: { _, _ in }).observedEvents == [.didCancel, .didFinish])
        #expect(try TimeoutObserver(timeout: .seconds(1)).observedEvents == .willExecute)
        #expect(ProcedureEventKinds.all.contains([.didAttach, .willExecute, .didExecute, .didCancel, .didProduce, .willFinish, .didFinish]))
    }
}
