import OperationKit
import OperationKitTestSupport
import Testing

// A procedure's outcome (its errors, diagnostics and output) and its condition extras (the
// conditions and observers beyond the first) live in side objects that the procedure holds as
// unmanaged references and lets go of itself, in `deinit` (issue 17, ninth round): what they hold
// stays while the procedure lives, and is freed with it — whether it ran or not.
@Suite("Procedure: its outcome and condition extras are kept while it lives, and freed with it", .offThePool)
struct ProcedureSideObjectsTests {
    final class Tracked: Sendable {}
    final class TrackedError: Error, Sendable {}

    @Test("a finished procedure keeps its output and errors until it is freed")
    func outcomeFreedWithProcedure() async throws {
        let queue = ConcurrentOperationQueue(name: "side-objects")
        weak var output: Tracked?
        weak var error: TrackedError?
        weak var valuedProcedure: ProcedureOperation?
        weak var failedProcedure: ProcedureOperation?
        do {
            let valued = ClosureProcedure<Tracked>(name: "valued") { Tracked() }
            let failed = ClosureProcedure<Void>(name: "failed") { throw TrackedError() }
            try queue.addOperations([valued, failed], waitUntilFinished: false)
            #expect(await valued.finishes())
            #expect(await failed.finishes())
            output = valued.output
            error = failed.errors.first as? TrackedError
            #expect(output != nil)
            #expect(error != nil)
            // Read again: the outcome is still held (reading it lent it, did not take it).
            #expect(valued.output === output)
            #expect(failed.errors.count == 1)
            valuedProcedure = valued
            failedProcedure = failed
        }
        // (The queue may hold finished operations until it is empty: see `finished`.)
        await queue.waitUntilAllOperationsAreFinished()
        // The queue has let go of them, but the worker that ran one may still hold it for a moment
        // (it retains the operation it runs until its run returns, which may be after the finish
        // that emptied the queue resumed this wait): polled.
        #expect(await eventually { valuedProcedure == nil && failedProcedure == nil })
        #expect(output == nil)
        #expect(error == nil)
    }

    @Test("a procedure never added, with an error and conditions beyond the first, frees them with itself")
    func extrasFreedWithProcedure() throws {
        weak var captured: Tracked?
        weak var error: TrackedError?
        do {
            let tracked = Tracked()
            captured = tracked
            let procedure = ClosureProcedure<Void>(name: "never-run") {}
            try procedure.addCondition(ClosureCondition(name: "first") { _ in .satisfied })
            try procedure.addCondition(ClosureCondition(name: "second") { _ in
                withExtendedLifetime(tracked) { .satisfied }
            })
            try procedure.addObserver(ClosureObserver(didFinish: { _, _ in withExtendedLifetime(tracked) {} }))
            try procedure.addObserver(ClosureObserver(didFinish: { _, _ in withExtendedLifetime(tracked) {} }))
            let cancelError = TrackedError()
            error = cancelError
            procedure.cancel(with: cancelError)
            #expect(procedure.conditionCount == 2 && procedure.observerCount == 2)
            #expect(procedure.errors.count == 1)
            #expect(captured != nil)
        }
        #expect(captured == nil)
        #expect(error == nil)
    }
}
