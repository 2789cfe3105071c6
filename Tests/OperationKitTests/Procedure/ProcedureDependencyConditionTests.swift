import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// D38, D39, K87: the opt-in conditions on dependencies — NoFailedDependencies (with and without
/// ignoringCancellations) and NoCancelledDependencies.
///
/// PK attaches dependency requirements to another condition, which is then not evaluated; ours
/// are conditions of their own, evaluated with the others, so the procedure is cancelled with
/// their error whatever the other conditions say.
@Suite("D38/D39/K87 ProcedureOperation dependency conditions", .offThePool)
struct ProcedureDependencyConditionTests {
    /// The dependencies a test can give a procedure.
    enum Dependency: String, Sendable, CustomTestStringConvertible {
        case succeeded, failed, cancelled, cancelledWithError, cancelledPlainOperation, groupWithFailedChild

        var testDescription: String { rawValue }

        func make() throws -> ConcurrentOperation {
            switch self {
            case .succeeded:
                return ClosureProcedure<Void>(name: rawValue) {}
            case .failed:
                return ClosureProcedure<Void>(name: rawValue) { throw ProcedureTestError(1) }
            case .cancelled:
                let procedure = ClosureProcedure<Void>(name: rawValue) {}
                procedure.cancel()
                return procedure
            case .cancelledWithError:
                let procedure = ClosureProcedure<Void>(name: rawValue) {}
                procedure.cancel(with: ProcedureTestError(2))
                return procedure
            case .cancelledPlainOperation:
                let operation = ClosureOperation(name: rawValue) {}
                operation.cancel()
                return operation
            case .groupWithFailedChild:
                return try GroupOperation(name: rawValue, operations: [
                    ClosureProcedure<Void>(name: "ok-child") {},
                    ClosureProcedure<Void>(name: "failed-child") { throw ProcedureTestError(3) },
                ])
            }
        }
    }

    /// Runs a procedure with `condition` after `dependencies` and describes the outcome: "runs",
    /// "ignored" (cancelled without an error) or "failed <code>" (cancelled with that error).
    func outcome(_ condition: any OperationCondition, after dependencies: [Dependency]) async throws -> String {
        let queue = ConcurrentOperationQueue(name: "dependency-conditions")
        let procedure = ProcedureCountingHooks(name: "dependent")
        try procedure.addCondition(condition)
        let operations = try dependencies.map { try $0.make() }
        for operation in operations { try procedure.addDependency(operation) }
        try queue.addOperations(operations + [procedure], waitUntilFinished: false)
        #expect(await procedure.finished.opens())
        #expect(await queue.empties(), "the queue drains")
        if procedure.willExecuteCalls.value == 1 {
            #expect(!procedure.isCancelled && procedure.errors.isEmpty)
            return "runs"
        }
        #expect(procedure.isCancelled)
        guard let error = procedure.errors.first else { return "ignored" }
        #expect(procedure.errors.count == 1)
        let operationError = try #require(error as? OperationError)
        #expect(operationError.operationNames.first == "dependent")
        return "failed \(operationError.code)"
    }

    @Test("D39 NoFailedDependencies", arguments: [
        ([], "runs"),
        ([.succeeded], "runs"),
        ([.succeeded, .succeeded], "runs"),
        ([.cancelled], "failed dependenciesCancelled"),
        ([.cancelledPlainOperation], "failed dependenciesCancelled"),
        ([.failed], "failed dependenciesFailed"),
        ([.groupWithFailedChild], "failed dependenciesFailed"),
        ([.cancelledWithError], "failed dependenciesFailed"),
        ([.cancelled, .failed], "failed dependenciesFailed"),
    ] as [([Dependency], String)])
    func noFailedDependencies(_ dependencies: [Dependency], _ expected: String) async throws {
        #expect(try await outcome(NoFailedDependencies(), after: dependencies) == expected)
    }

    @Test("D39 NoFailedDependencies(ignoringCancellations:)", arguments: [
        ([], "runs"),
        ([.succeeded], "runs"),
        ([.cancelled], "ignored"),
        ([.cancelledPlainOperation, .succeeded], "ignored"),
        ([.failed], "failed dependenciesFailed"),
        ([.cancelled, .failed], "failed dependenciesFailed"),
        ([.cancelledWithError], "failed dependenciesFailed"),
    ] as [([Dependency], String)])
    func noFailedDependenciesIgnoringCancellations(_ dependencies: [Dependency], _ expected: String) async throws {
        #expect(try await outcome(NoFailedDependencies(ignoringCancellations: true), after: dependencies) == expected)
    }

    @Test("D38 NoCancelledDependencies", arguments: [
        ([], "runs"),
        ([.succeeded], "runs"),
        ([.failed], "runs"),
        ([.cancelled], "failed dependenciesCancelled"),
        ([.cancelledPlainOperation], "failed dependenciesCancelled"),
        ([.succeeded, .cancelledWithError], "failed dependenciesCancelled"),
    ] as [([Dependency], String)])
    func noCancelledDependencies(_ dependencies: [Dependency], _ expected: String) async throws {
        #expect(try await outcome(NoCancelledDependencies(), after: dependencies) == expected)
    }

    @Test("K87 dependenciesFailed names the failed dependencies and carries their errors")
    func failureCarriesErrors() async throws {
        let queue = ConcurrentOperationQueue(name: "K87")
        let first = ClosureProcedure<Void>(name: "first") { throw ProcedureTestError(1) }
        let second = ClosureProcedure<Void>(name: "second") { throw ProcedureTestError(2) }
        let fine = ClosureProcedure<Void>(name: "fine") {}
        let procedure = ProcedureCountingHooks(name: "K87")
        try procedure.addCondition(NoFailedDependencies())
        try procedure.addDependencies([first, second, fine])
        try queue.addOperations([first, second, fine, procedure], waitUntilFinished: false)
        #expect(await procedure.finished.opens())
        let error = try #require(procedure.errors.first as? OperationError)
        #expect(error.code == .dependenciesFailed)
        #expect(error.operationNames == ["K87", "first", "second"])
        #expect(Set(errorIDs(error.underlyingErrors)) == [1, 2])
        #expect(procedure.willExecuteCalls.value == 0)
    }

    @Test("D38 inside a group: a cancelled child cancels its dependent sibling, and the group drains")
    func insideAGroup() async throws {
        let queue = ConcurrentOperationQueue(name: "D38-group")
        let first = ProcedureAwaitingFinish(name: "first")
        let second = ProcedureCountingHooks(name: "second")
        try second.addCondition(NoCancelledDependencies())
        try second.addDependency(first)
        let group = try GroupOperation(name: "D38-group", operations: [first, second])
        try queue.addOperation(group)
        #expect(await first.executing.opens())
        first.cancel()
        first.finish()
        #expect(await second.finished.opens())
        #expect(second.isCancelled && second.willExecuteCalls.value == 0)
        #expect(errorCodes(second.errors) == [.dependenciesCancelled])
        #expect(await group.finishes())
        #expect(errorCodes(group.errors) == [.dependenciesCancelled], "the group collects its children's errors")
        #expect(await queue.empties())
    }
}
