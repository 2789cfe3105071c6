import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// onValue and onError on a result procedure (issue 16, part 4; Overdrive, scenario 61): exactly
/// one kind runs, once; a throw from onValue goes to onError; registering after the finish throws.
@Suite("Result callbacks: onValue and onError", .offThePool)
struct ResultCallbackTests {
    /// Records what the callbacks of a procedure receive, and opens `done` after the last one.
    final class Callbacks: Sendable {
        let log = Recorder<String>()
        let done: Latch

        init(expecting count: Int = 1) { done = Latch(count: count) }

        func value<T>(_ label: String = "value") -> @Sendable (T) throws -> Void {
            { value in self.log.record("\(label) \(value)"); self.done.countDown() }
        }

        func error(_ label: String = "error") -> @Sendable (any Error) -> Void {
            { error in
                let text = (error as? OperationError).map { "\($0.code)" } ?? "\(errorIDs([error]))"
                self.log.record("\(label) \(text)")
                self.done.countDown()
            }
        }
    }

    @Test("a value: only the value callbacks, each once, in order; the chain returns the procedure")
    func valueOnce() async throws {
        let queue = ConcurrentOperationQueue(name: "on-value")
        let callbacks = Callbacks(expecting: 2)
        let procedure = ClosureProcedure<Int>(name: "value") { 61 }
        let chained = try procedure
            .onValue(callbacks.value("first"))
            .onError(callbacks.error())
            .onValue(callbacks.value("second"))
        #expect(chained === procedure)
        try queue.addOperation(procedure)
        #expect(await callbacks.done.opens())
        #expect(await procedure.finishes())
        #expect(callbacks.log.values == ["first 61", "second 61"])
    }

    @Test("an error: only the error callbacks, with the first error")
    func errorOnce() async throws {
        let queue = ConcurrentOperationQueue(name: "on-error")
        let callbacks = Callbacks(expecting: 2)
        let procedure = ClosureProcedure<Int>(name: "error", asynchronous: { procedure in
            procedure.finish(withErrors: [ProcedureTestError(1), ProcedureTestError(2)])
        })
        try procedure.onValue(callbacks.value()).onError(callbacks.error("a")).onError(callbacks.error("b"))
        try queue.addOperation(procedure)
        #expect(await callbacks.done.opens())
        #expect(await procedure.finishes())
        #expect(callbacks.log.values == ["a [1]", "b [1]"])
    }

    @Test("a throw from onValue goes to onError (registered before or after); later value callbacks are skipped")
    func throwingValueCallback() async throws {
        let queue = ConcurrentOperationQueue(name: "on-value-throws")
        let callbacks = Callbacks(expecting: 3)
        let procedure = ClosureProcedure<Int>(name: "value") { 1 }
        try procedure
            .onError(callbacks.error("before"))
            .onValue { value in
                callbacks.log.record("throwing \(value)")
                callbacks.done.countDown()
                throw ProcedureTestError(61)
            }
            .onValue(callbacks.value("skipped"))
            .onError(callbacks.error("after"))
        try queue.addOperation(procedure)
        #expect(await callbacks.done.opens())
        #expect(await procedure.finishes())
        #expect(callbacks.log.values == ["throwing 1", "before [61]", "after [61]"])
        #expect(procedure.errors.isEmpty, "the procedure itself succeeded")
    }

    @Test("cancelled before it runs: onError with cancelled, or with the cancel's error")
    func cancelledBefore() async throws {
        let queue = ConcurrentOperationQueue(name: "on-cancel-before")
        let plain = Callbacks()
        let withError = Callbacks()
        let ran = AtomicCounter()
        let a = ClosureProcedure<Int>(name: "a") { ran.increment(); return 1 }
        let b = ClosureProcedure<Int>(name: "b") { ran.increment(); return 2 }
        try a.onValue(plain.value()).onError(plain.error())
        try b.onValue(withError.value()).onError(withError.error())
        a.cancel()
        b.cancel(with: ProcedureTestError(5))
        try queue.addOperations([a, b], waitUntilFinished: false)
        #expect(await plain.done.opens())
        #expect(await withError.done.opens())
        #expect(ran.value == 0)
        #expect(plain.log.values == ["error cancelled"])
        #expect(withError.log.values == ["error [5]"])
    }

    @Test("cancelled while running: a value still finished with goes to onValue; an error to onError")
    func cancelledWhileRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "on-cancel-running")
        let gate = Gate()
        let started = Latch(count: 2)
        func running(_ name: String, _ result: Result<Int, any Error>) -> ClosureProcedure<Int> {
            ClosureProcedure<Int>(name: name, asynchronous: { procedure in
                started.countDown()
                onThreadOfItsOwn {
                    _ = gate.wait(timeout: procedureTimeout)
                    procedure.finish(withResult: result)
                }
            })
        }
        let valued = running("valued", .success(3))
        let failing = running("failing", .failure(ProcedureTestError(4)))
        let valueCallbacks = Callbacks()
        let errorCallbacks = Callbacks()
        try valued.onValue(valueCallbacks.value()).onError(valueCallbacks.error())
        try failing.onValue(errorCallbacks.value()).onError(errorCallbacks.error())
        try queue.addOperations([valued, failing], waitUntilFinished: false)
        #expect(await started.opens())
        valued.cancel()
        failing.cancel()
        // Registering while it executes is fine.
        let late = Callbacks()
        try valued.onValue(late.value("late"))
        gate.open()
        #expect(await valueCallbacks.done.opens())
        #expect(await errorCallbacks.done.opens())
        #expect(await late.done.opens())
        #expect(valueCallbacks.log.values == ["value 3"])
        #expect(errorCallbacks.log.values == ["error [4]"])
        #expect(late.log.values == ["late 3"])
    }

    @Test("finished without a value: onError with noValue")
    func noValue() async throws {
        let queue = ConcurrentOperationQueue(name: "on-no-value")
        let callbacks = Callbacks()
        let procedure = ClosureProcedure<Int>(name: "nothing", asynchronous: { $0.finish() })
        try procedure.onValue(callbacks.value()).onError(callbacks.error())
        try queue.addOperation(procedure)
        #expect(await callbacks.done.opens())
        #expect(callbacks.log.values == ["error noValue"])
    }

    @Test("registering after the finish throws alreadyFinished and runs nothing")
    func registeringTooLate() async throws {
        let queue = ConcurrentOperationQueue(name: "on-too-late")
        let procedure = ClosureProcedure<Int>(name: "done") { 1 }
        try queue.addOperation(procedure)
        #expect(await procedure.finishes())
        let ran = AtomicCounter()
        let valueError = caughtOperationError { try procedure.onValue { _ in ran.increment() } }
        let errorError = caughtOperationError { try procedure.onError { _ in ran.increment() } }
        #expect(valueError?.code == .alreadyFinished && valueError?.operationNames == ["done"])
        #expect(errorError?.code == .alreadyFinished)
        #expect(ran.value == 0)
    }

    @Test("the callbacks run once even with many registered from many threads before the finish")
    func concurrentRegistration() async throws {
        let queue = ConcurrentOperationQueue(name: "on-concurrent")
        let gate = Gate()
        let procedure = ClosureProcedure<Int>(name: "gated") { _ = gate.wait(timeout: procedureTimeout); return 7 }
        let count = 50
        let calls = AtomicCounter()
        let registered = Latch(count: count)
        let done = Latch(count: count)
        try queue.addOperation(procedure)
        for _ in 0..<count {
            procedureTestLaterQueue.async {
                _ = try? procedure.onValue { _ in calls.increment(); done.countDown() }
                registered.countDown()
            }
        }
        #expect(await registered.opens())
        gate.open()
        #expect(await done.opens())
        #expect(await procedure.finishes())
        #expect(calls.value == count)
    }

    @Test("the callbacks are released once they ran, and a procedure never run releases them with itself")
    func callbacksReleased() async throws {
        final class Captured: Sendable {}
        let queue = ConcurrentOperationQueue(name: "on-released")
        weak var ranCapture: Captured?
        weak var neverRunCapture: Captured?
        let procedure = ClosureProcedure<Int>(name: "ran") { 1 }
        let done = Latch()
        do {
            let forRun = Captured()
            let forNeverRun = Captured()
            ranCapture = forRun
            neverRunCapture = forNeverRun
            try procedure.onValue { _ in withExtendedLifetime(forRun) { done.countDown() } }
            let neverRun = ClosureProcedure<Int>(name: "never") { 2 }
            try neverRun.onValue { _ in withExtendedLifetime(forNeverRun) {} }
        }
        #expect(neverRunCapture == nil)
        try queue.addOperation(procedure)
        #expect(await done.opens())
        #expect(await procedure.finishes())
        #expect(await eventually(within: .seconds(5)) { ranCapture == nil })
    }
}
