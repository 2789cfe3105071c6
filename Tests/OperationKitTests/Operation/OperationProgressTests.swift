import Dispatch
@testable import OperationKit
import OperationKitTestSupport
import Testing

/// `ConcurrentOperation.reportProgress(completed:total:)`, `progress` and `progressWeight`, kept in
/// a process-wide side table. Serialized: the table checks look up operations by identity, which
/// another test's operation could take over once one is released.
@Suite("Operation: reported progress", .offThePool, .serialized)
struct OperationProgressTests {
    @Test("an operation that never reports is one unit: 0/1, then 1/1 once finished; no table entry")
    func unreported() async throws {
        let operation = ClosureOperation(name: "plain") {}
        #expect(operation.progress == OperationProgress(completed: 0, total: 1))
        #expect(operation.progressWeight == 1)
        #expect(!ReportedProgressTable.hasEntry(for: ObjectIdentifier(operation)))
        try operation.start()
        #expect(operation.progress == OperationProgress(completed: 1, total: 1, fractionCompleted: 1, isFinished: true))
        #expect(!ReportedProgressTable.hasEntry(for: ObjectIdentifier(operation)))
    }

    @Test("what it reports, then complete once finished")
    func reported() throws {
        let operation = ManuallyFinishedOperation(name: "reporting")
        operation.reportProgress(completed: 3, total: 10)
        #expect(operation.progress == OperationProgress(completed: 3, total: 10))
        #expect(operation.progress.fractionCompleted == 0.3)
        try operation.start()
        operation.reportProgress(completed: 4, total: 10)
        #expect(operation.progress.completed == 4)
        operation.finish()
        #expect(operation.progress == OperationProgress(
            completed: 10, total: 10, fractionCompleted: 1, isFinished: true))
    }

    @Test("reports from many threads: every read sees one whole report, the last write wins")
    func manyThreads() {
        let operation = ManuallyFinishedOperation(name: "many")
        let threads = 8
        let reportsPerThread = 2_000
        let torn = AtomicCounter()
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 1...reportsPerThread {
                // Every report is half done: a torn pair would show another fraction.
                let completed = Int64(thread * reportsPerThread + index)
                operation.reportProgress(completed: completed, total: completed * 2)
                let seen = operation.progress
                if seen.completed * 2 != seen.total || seen.fractionCompleted != 0.5 { torn.increment() }
            }
        }
        #expect(torn.value == 0)
        #expect(operation.progress.fractionCompleted == 0.5)
    }

    @Test("the table entry leaves with the operation")
    func entryLeaves() {
        var id: ObjectIdentifier?
        do {
            let operation = ClosureOperation(name: "leaving") {}
            operation.progressWeight = 5
            #expect(operation.progressWeight == 5)
            id = ObjectIdentifier(operation)
            #expect(ReportedProgressTable.hasEntry(for: id!))
        }
        #expect(!ReportedProgressTable.hasEntry(for: id!))
    }
}
