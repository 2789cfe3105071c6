import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

// AnyProcedure, ComposedProcedure and IgnoreErrorsProcedure: forwarding of values, errors and
// cancellation to and from the wrapped operation, conditions and observers, misuse.

/// A result procedure that finishes with `value` when the test says so (or at once on cancel).
private final class WrappedResultProcedure: ResultProcedure<String>, @unchecked Sendable {
    // No mutable state of its own: latches and counters synchronise themselves.
    let executing = Latch()
    let executions = AtomicCounter()

    override func execute() {
        executions.increment()
        executing.countDown()
    }

    override func procedureDidCancel(with error: (any Error)?) {
        if isExecuting { procedureTestLaterQueue.async { self.finish() } }
    }
}

@Suite("AnyProcedure", .offThePool)
struct AnyProcedureTests {
    @Test("procedures of different classes in one array of AnyProcedure: each finishes with its wrapped one's value")
    func valuesForwarded() async throws {
        let queue = ConcurrentOperationQueue(name: "any-values")
        let transform = TransformProcedure<Int, String>(name: "transform", input: 2) { "Bar\($0)" }
        let procedures: [AnyProcedure<String>] = [
            AnyProcedure(ClosureProcedure<String>(name: "closure") { "Foo" }),
            AnyProcedure(transform),
            AnyProcedure(AsyncProcedure<String>(name: "async") { "Baz" }),
        ]
        try queue.addOperations(procedures, waitUntilFinished: false)
        for procedure in procedures { #expect(await procedure.finishes()) }
        #expect(procedures.map { $0.output ?? "nil" } == ["Foo", "Bar2", "Baz"])
        #expect(procedures.allSatisfy { $0.procedure.isFinished && $0.errors.isEmpty })
        #expect(try await procedures[0].value == "Foo")
        #expect(procedures[1].procedure === transform)
        #expect(procedures[0].displayName == "AnyProcedure(closure)")
    }

    @Test("AnyProcedures as the children of a group: each wrapped one runs, the group finishes after them")
    func inAGroup() async throws {
        let queue = ConcurrentOperationQueue(name: "any-group")
        let procedures = ["Foo", "Bar", "Baz"].map { word in
            AnyProcedure(ClosureProcedure<String>(name: word) { word })
        }
        let group = try GroupOperation(name: "group", operations: procedures)
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(procedures.map { $0.output ?? "nil" } == ["Foo", "Bar", "Baz"])
        #expect(procedures.allSatisfy { $0.isFinished && $0.procedure.isFinished })
        #expect(group.errors.isEmpty)
    }

    @Test("the wrapped procedure's errors are the wrapper's; it finishes after the wrapped one")
    func errorsForwarded() async throws {
        let queue = ConcurrentOperationQueue(name: "any-errors")
        let order = Recorder<String>()
        let failing = ClosureProcedure<Int>(name: "failing") { throw ProcedureTestError(3) }
        try failing.addObserver(ClosureObserver(didFinish: { _, _ in order.record("wrapped") }))
        let any = AnyProcedure(failing)
        let log = ProcedureEventLog()
        try any.addObserver(ClosureObserver(willFinish: { _, _ in order.record("wrapper") }))
        try any.addObserver(log.observer)
        try queue.addOperation(any)
        #expect(await log.finishes())
        #expect(errorIDs(any.errors) == [3] && any.output == nil && !any.isCancelled)
        #expect(order.values == ["wrapped", "wrapper"])
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("cancelled while the wrapped one runs: the wrapped one is cancelled; the wrapper finishes once, after it")
    func cancelWhileRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "any-cancel-running")
        let wrapped = WrappedResultProcedure(name: "wrapped")
        let any = AnyProcedure(wrapped)
        let log = ProcedureEventLog()
        try any.addObserver(log.observer)
        try queue.addOperation(any)
        #expect(await wrapped.executing.opens())
        any.cancel(with: ProcedureTestError(1))
        #expect(await log.finishes())
        #expect(wrapped.isCancelled && wrapped.isFinished)
        #expect(any.isCancelled && errorIDs(any.errors) == [1] && any.output == nil)
        #expect(log.events.filter { $0 == "didFinish" || $0 == "didCancel" } == ["didCancel", "didFinish"])
    }

    @Test("cancelled before it executes: the wrapped one never executes, and finishes before the wrapper")
    func cancelBeforeRunning() async throws {
        let queue = suspendedProcedureQueue("any-cancel-before")
        let order = Recorder<String>()
        let wrapped = WrappedResultProcedure(name: "wrapped")
        try wrapped.addObserver(ClosureObserver(didFinish: { _, _ in order.record("wrapped") }))
        let any = AnyProcedure(wrapped)
        try any.addObserver(ClosureObserver(willFinish: { _, _ in order.record("wrapper") }))
        try queue.addOperation(any)
        any.cancel()
        queue.isSuspended = false
        #expect(await any.finishes())
        #expect(await wrapped.finishes())
        #expect(wrapped.isCancelled && wrapped.executions.value == 0)
        #expect(any.isCancelled && any.errors.isEmpty)
        #expect(order.values == ["wrapped", "wrapper"])
    }

    @Test("a wrapped procedure cancelled by a failed condition leaves the wrapper cancelled, with its error")
    func wrappedCancelledByCondition() async throws {
        let queue = ConcurrentOperationQueue(name: "any-condition")
        let wrapped = ClosureProcedure<Int>(name: "wrapped") { 1 }
        try wrapped.addCondition(ClosureCondition { _ in .failed(ProcedureTestError(6)) })
        let any = AnyProcedure(wrapped)
        try queue.addOperation(any)
        #expect(await any.finishes())
        #expect(any.isCancelled && errorIDs(any.errors) == [6] && any.output == nil)
    }

    @Test("injection: a consumer takes the wrapper's value; the wrapped one takes a value from outside")
    func injection() async throws {
        let queue = ConcurrentOperationQueue(name: "any-injection")
        let producer = ClosureProcedure<Int>(name: "producer") { 20 }
        let wrapped = TransformProcedure<Int, Int>(name: "plus one") { $0 + 1 }
        let any = AnyProcedure(wrapped)
        try wrapped.injectInput(from: producer)           // after wrapping, before the wrapper runs
        let consumer = TransformProcedure<Int, Int>(name: "double") { $0 * 2 }
        try consumer.injectInput(from: any)
        let seen = Recorder<Int>()
        let other = ClosureProcedure<Void>(name: "other") {}
        try other.injectResult(from: any) { _, value in seen.record(value) }
        try queue.addOperations([consumer, any, producer, other], waitUntilFinished: false)
        #expect(try await consumer.value == 42)
        #expect(await other.finishes())
        #expect(any.output == 21 && seen.values == [21])
    }

    @Test("wrapping a procedure already in a queue: the wrapper finishes with the queue's error")
    func wrappedAlreadyEnqueued() async throws {
        let queue = ConcurrentOperationQueue(name: "any-misuse")
        let elsewhere = suspendedProcedureQueue("any-misuse-elsewhere")
        let wrapped = ClosureProcedure<Int>(name: "wrapped") { 1 }
        try elsewhere.addOperation(wrapped)
        let any = AnyProcedure(wrapped)
        try queue.addOperation(any)
        #expect(await any.finishes())
        #expect(errorCodes(any.errors) == [.enqueuedInAnotherQueue])
        wrapped.cancel()
        elsewhere.isSuspended = false
        #expect(await wrapped.finishes())
    }
}

@Suite("ComposedProcedure", .offThePool)
struct ComposedProcedureTests {
    @Test("a plain ClosureOperation runs; the composed procedure finishes after it, and its observers are told")
    func composedOperationRuns() async throws {
        let queue = ConcurrentOperationQueue(name: "composed-runs")
        let ran = AtomicCounter()
        let operation = ClosureOperation(name: "plain") { ran.increment() }
        let composed = try ComposedProcedure(operation)
        let log = ProcedureEventLog()
        try composed.addObserver(log.observer)
        try queue.addOperation(composed)
        #expect(await log.finishes())
        #expect(ran.value == 1 && operation.isFinished && composed.errors.isEmpty)
        #expect(composed.operation === operation)
        #expect(composed.displayName == "Composed(plain)")
        #expect(log.events == ["didAttach", "willExecute", "didExecute", "willFinish", "didFinish"])
    }

    @Test("a failed condition: the inner operation never runs, is cancelled, and finishes; the procedure fails")
    func failedCondition() async throws {
        let queue = ConcurrentOperationQueue(name: "composed-condition")
        let ran = AtomicCounter()
        let operation = ClosureOperation(name: "plain") { ran.increment() }
        let composed = try ComposedProcedure(name: "gated", operation)
        try composed.addCondition(ClosureCondition { _ in .failed(ProcedureTestError(2)) })
        let log = ProcedureEventLog()
        try composed.addObserver(log.observer)
        try queue.addOperation(composed)
        #expect(await log.finishes())
        #expect(await operation.finishes())
        #expect(ran.value == 0 && operation.isCancelled)
        #expect(composed.isCancelled && errorIDs(composed.errors) == [2])
        #expect(!log.events.contains("willExecute"))
    }

    @Test("cancel forwards to the inner operation; a wrapped procedure's errors become the composed one's")
    func cancelAndErrors() async throws {
        let queue = ConcurrentOperationQueue(name: "composed-cancel")
        let inner = ProcedureAwaitingFinish(name: "inner", finishesWhenTold: true)
        let composed = try ComposedProcedure(inner)
        try queue.addOperation(composed)
        #expect(await inner.executing.opens())
        composed.cancel()
        #expect(await composed.finishes())
        #expect(inner.isCancelled && inner.isFinished && composed.isCancelled)

        let failing = try ComposedProcedure(ClosureProcedure<Void>(name: "failing") { throw ProcedureTestError(4) })
        try queue.addOperation(failing)
        #expect(await failing.finishes())
        #expect(errorIDs(failing.errors) == [4] && failing.isFailed)
    }

    @Test("wrapping an operation already in a queue throws, naming it")
    func misuse() throws {
        let elsewhere = suspendedProcedureQueue("composed-misuse")
        let operation = ClosureOperation(name: "taken") {}
        try elsewhere.addOperation(operation)
        let error = #expect(throws: OperationError.self) { try ComposedProcedure(operation) }
        #expect(error?.code == .enqueuedInAnotherQueue && error?.operationNames.contains("taken") == true)
        operation.cancel()
        elsewhere.isSuspended = false
    }
}

@Suite("IgnoreErrorsProcedure", .offThePool)
struct IgnoreErrorsProcedureTests {
    @Test("a failing procedure: the wrapper finishes without errors, keeps them in ignoredErrors, and its NoFailedDependencies dependent runs")
    func failingChild() async throws {
        let queue = ConcurrentOperationQueue(name: "ignore-errors")
        let failing = ClosureProcedure<Void>(name: "failing") { throw ProcedureTestError(5) }
        let ignoring = IgnoreErrorsProcedure(failing)
        let ran = AtomicCounter()
        let dependent = ClosureProcedure<Void>(name: "dependent") { ran.increment() }
        try dependent.addDependency(ignoring)
        try dependent.addCondition(NoFailedDependencies())
        // Without the wrapper the same dependent is cancelled.
        let bare = ClosureProcedure<Void>(name: "bare") { throw ProcedureTestError(6) }
        let blocked = ClosureProcedure<Void>(name: "blocked") { ran.increment() }
        try blocked.addDependency(bare)
        try blocked.addCondition(NoFailedDependencies())
        try queue.addOperations([ignoring, dependent, bare, blocked], waitUntilFinished: false)
        #expect(await dependent.finishes())
        #expect(await blocked.finishes())
        #expect(ignoring.errors.isEmpty && !ignoring.isFailed && !ignoring.isCancelled)
        #expect(errorIDs(ignoring.ignoredErrors) == [5])
        #expect(errorIDs(failing.errors) == [5])
        #expect(ignoring.output != nil, "an IgnoreErrorsProcedure<Void> finishes with ()")
        #expect(ran.value == 1 && !dependent.isCancelled && blocked.isCancelled)
    }

    @Test("the wrapped one's value is the wrapper's; a failure leaves no value; a group's errors are ignored too")
    func outputs() async throws {
        let queue = ConcurrentOperationQueue(name: "ignore-errors-output")
        let hello = IgnoreErrorsProcedure(ClosureProcedure<String>(name: "hello") { "Hello" })
        let failing = IgnoreErrorsProcedure(ClosureProcedure<String>(name: "failing") { throw ProcedureTestError(1) })
        let group = try GroupOperation(name: "group", operations: [
            ClosureProcedure<Void>(name: "a") { throw ProcedureTestError(2) },
            ClosureProcedure<Void>(name: "b") { throw ProcedureTestError(3) },
        ])
        try group.setMaxConcurrentOperationCount(1)
        let ignoringGroup = IgnoreErrorsProcedure(ignoringErrorsOf: group)
        let all: [ProcedureOperation] = [hello, failing, ignoringGroup]
        try queue.addOperations(all, waitUntilFinished: false)
        for procedure in all { #expect(await procedure.finishes()) }
        #expect(hello.output == "Hello" && hello.ignoredErrors.isEmpty)
        #expect(failing.output == nil && failing.errors.isEmpty && errorIDs(failing.ignoredErrors) == [1])
        #expect(ignoringGroup.errors.isEmpty && errorIDs(ignoringGroup.ignoredErrors) == [2, 3])
        #expect(hello.displayName == "IgnoreErrors(hello)")
    }

    @Test("cancelled while running or before: forwards to the wrapped one, which finishes first; exactly once")
    func cancellation() async throws {
        let queue = ConcurrentOperationQueue(name: "ignore-errors-cancel")
        let wrapped = WrappedResultProcedure(name: "wrapped")
        let ignoring = IgnoreErrorsProcedure(wrapped)
        let log = ProcedureEventLog()
        try ignoring.addObserver(log.observer)
        try queue.addOperation(ignoring)
        #expect(await wrapped.executing.opens())
        ignoring.cancel(with: ProcedureTestError(8))
        #expect(await log.finishes())
        #expect(wrapped.isCancelled && wrapped.isFinished)
        #expect(ignoring.isCancelled && errorIDs(ignoring.errors) == [8], "its own cancel error is not ignored")
        #expect(log.events.filter { $0 == "didFinish" }.count == 1)

        let suspended = suspendedProcedureQueue("ignore-errors-cancel-before")
        let never = WrappedResultProcedure(name: "never")
        let ignoringNever = IgnoreErrorsProcedure(never)
        try suspended.addOperation(ignoringNever)
        ignoringNever.cancel()
        suspended.isSuspended = false
        #expect(await ignoringNever.finishes())
        #expect(never.isCancelled && never.isFinished && never.executions.value == 0)
        #expect(ignoringNever.isCancelled && ignoringNever.errors.isEmpty)
    }
}
