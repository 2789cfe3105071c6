import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 13 item 9: a finish called on a cancelled procedure before its queue started it keeps
/// its errors (the first such finish; later ones are ignored).
@Suite("Issue 13 item 9: lost errors", .offThePool)
struct LostErrorsTests {
    @Test("issue 13 item 9: finish(with:) on a cancelled procedure before its queue started it keeps the error")
    func finishOnCancelledBeforeStartKeepsItsErrors() async throws {
        let queue = suspendedProcedureQueue("item 9")
        let first = ClosureProcedure<Void>(name: "item 9 first") {}
        let second = ClosureProcedure<Void>(name: "item 9 second") {}
        let log = ProcedureEventLog()
        try first.addObserver(log.observer)
        try queue.addOperations([first, second], waitUntilFinished: false)

        first.cancel(with: ProcedureTestError(1))
        #expect(first.finish(with: ProcedureTestError(2)), "the first finish of a cancelled procedure counts")
        #expect(!first.finish(withErrors: [ProcedureTestError(3)]), "a later finish is ignored")
        #expect(!first.isFinished, "it still finishes when its queue reaches it")

        second.cancel()
        #expect(second.finish(withErrors: [ProcedureTestError(4), ProcedureTestError(5)]))

        queue.isSuspended = false
        #expect(await log.finished.opens())
        #expect(await second.finishes())
        #expect(errorIDs(first.errors) == [1, 2])
        #expect(log.errorsAtFinish.map(errorIDs) == [[1, 2], [1, 2]], "will and did finish get the kept error")
        #expect(errorIDs(second.errors) == [4, 5])
        #expect(second.isFailed)
        #expect(first.diagnostics.count == 1, "the ignored finish is noted")
    }

    @Test("issue 13 item 9: a procedure that is not cancelled still refuses a finish before it executes")
    func finishBeforeStartWithoutCancelIsRefused() async throws {
        let queue = suspendedProcedureQueue("item 9 not cancelled")
        let procedure = ClosureProcedure<Void>(name: "item 9 not cancelled") {}
        try queue.addOperation(procedure)
        #expect(!procedure.finish(with: ProcedureTestError(1)))
        queue.isSuspended = false
        #expect(await procedure.finishes())
        #expect(procedure.errors.isEmpty)
    }
}
