// The process-wide default instrument: what a new queue starts with, and what operations in no
// queue tell. These tests set it, so they run one at a time, and never beside a test that checks
// what an instrument is told (`.exclusiveInstrumentation`): a queue made meanwhile starts with the
// default, and an operation cancelled before it is added tells the default, so such a test would
// miss events. Queues and operations of other tests may tell it: the default installed here keeps
// only the events of this file's operations (named "dit."), so that it never keeps another test's
// operation alive (a test waiting for one to be released would wait in vain).

import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Observability: the default instrument", .offThePool, .serialized, .exclusiveInstrumentation)
struct DefaultInstrumentTests {
    @Test("the instrument property reads back what was set; a new queue starts with the default")
    func property() {
        let installed = OwnEventsRecorder()
        OperationInstrumentation.default = installed
        defer { OperationInstrumentation.default = nil }
        #expect(ConcurrentOperationQueue(name: "with-default").instrument === installed)
        OperationInstrumentation.default = nil
        let queue = ConcurrentOperationQueue(name: "property")
        #expect((queue.instrument == nil) == (OperationInstrumentation.default == nil))
        let instrument = RecordingInstrument()
        queue.instrument = instrument
        #expect(queue.instrument === instrument)
        queue.instrument = nil
        #expect(queue.instrument == nil)
    }

    @Test("a layer tells no instrument; an operation started by hand tells the default one its whole lifecycle")
    func layerTellsNothing() throws {
        let instrument = OwnEventsRecorder()
        OperationInstrumentation.default = instrument
        defer { OperationInstrumentation.default = nil }
        let byHand = ClosureOperation(name: "dit.by-hand") {}
        let pending = ClosureOperation(name: "dit.pending") {}
        let layer = OperationLayer([byHand, pending], name: "dit.layer")
        try byHand.start()
        try pending.start()
        #expect(layer.isFinished)
        #expect(instrument.kinds(of: layer).isEmpty, "told \(instrument.kinds(of: layer))")
        #expect(instrument.kinds(of: byHand).first == "started" && instrument.kinds(of: byHand).last == "finished(succeeded)")
        let empty = OperationLayer([ClosureOperation](), name: "dit.empty")
        #expect(empty.isFinished && instrument.kinds(of: empty).isEmpty)
    }

    @Test("a group made while a default is set, added to a queue with another instrument: that one is told its children, the default nothing")
    func groupMadeUnderTheDefault() throws {
        let installed = OwnEventsRecorder()
        OperationInstrumentation.default = installed
        defer { OperationInstrumentation.default = nil }
        let child = ClosureOperation(name: "dit.held-child") {}
        let group = try GroupOperation(name: "dit.group", operations: [child])
        OperationInstrumentation.default = nil
        let instrument = RecordingInstrument()
        let queue = ConcurrentOperationQueue(name: "instrumented")
        queue.instrument = instrument
        try queue.addOperation(group)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: .seconds(30)))
        #expect(group.isFinished)
        // The group's queue takes the instrument of the queue the group was added to, and tells
        // it the child it held as added first. The default, set when the group was made, was
        // told nothing: it would have been told `added` and then nothing more.
        #expect(instrument.kinds(of: child) == ["added", "ready", "started", "finished(succeeded)"])
        #expect(instrument.kinds(of: group).first == "added")
        #expect(installed.kinds(of: child).isEmpty, "the default was told \(installed.kinds(of: child))")
    }

    @Test("a group started by hand tells the default instrument, and so do its children")
    func groupStartedByHand() throws {
        let installed = OwnEventsRecorder()
        OperationInstrumentation.default = installed
        defer { OperationInstrumentation.default = nil }
        let child = ClosureOperation(name: "dit.held-child") {}
        let group = try GroupOperation(name: "dit.group", operations: [child])
        try group.start()
        #expect(group.waitUntilFinishedBlocking(timeout: .seconds(30)))
        #expect(installed.kinds(of: group).first == "started")
        #expect(installed.kinds(of: group).last == "finished(succeeded)")
        #expect(installed.kinds(of: child) == ["added", "ready", "started", "finished(succeeded)"])
    }

    @Test("a group made while a default is set, added to a queue without an instrument: nobody is told its children")
    func groupInAnUninstrumentedQueue() throws {
        // (Its own events only, as every default these tests install: a plain recorder kept the
        // events — and so the operations — of other tests' operations cancelled in no queue
        // meanwhile, and a test waiting for one of them to be freed failed.)
        let installed = OwnEventsRecorder()
        OperationInstrumentation.default = nil
        let queue = ConcurrentOperationQueue(name: "not instrumented")
        OperationInstrumentation.default = installed
        defer { OperationInstrumentation.default = nil }
        let child = ClosureOperation(name: "dit.held-child") {}
        let group = try GroupOperation(name: "dit.group", operations: [child])
        try queue.addOperation(group)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: .seconds(30)))
        #expect(group.isFinished && child.isFinished)
        // The group is not told (its queue has no instrument), nor are its children.
        #expect(installed.kinds(of: group).isEmpty)
        #expect(installed.kinds(of: child).isEmpty, "the default was told \(installed.kinds(of: child))")
    }
}

/// A default instrument for these tests: records the events of the operations named "dit." only,
/// and drops the others without keeping them.
final class OwnEventsRecorder: OperationInstrument, Sendable {
    let recorded = RecordingInstrument()

    func record(_ event: OperationEvent) {
        if event.operation.displayName.hasPrefix("dit.") { recorded.record(event) }
    }

    /// The kinds of `operation`'s events, as ``RecordingInstrument/kinds(of:)``.
    func kinds(of operation: ConcurrentOperation) -> [String] { recorded.kinds(of: operation) }
}
