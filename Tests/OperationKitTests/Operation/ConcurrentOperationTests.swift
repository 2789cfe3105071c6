import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// `ConcurrentOperation` and `ClosureOperation`: lifecycle, start without a queue, the completion
/// block, cancellation (section C, operation layer) and waiting.
@Suite("ConcurrentOperation lifecycle, cancellation and waiting", .offThePool)
struct ConcurrentOperationTests {
    @Test("A1 a new operation is ready, not executing, not finished, not cancelled")
    func initialState() {
        let operation = ConcurrentOperation(name: "new")
        #expect(operation.isReady)
        #expect(!operation.isExecuting)
        #expect(!operation.isFinished)
        #expect(!operation.isCancelled)
        #expect(operation.isAsynchronous)
        #expect(operation.name == "new")
        #expect(operation.displayName == "new")
        #expect(operation.queuePriority == .normal)
        #expect(operation.dependencies.isEmpty)
    }

    @Test("A2 start without a queue runs execute() on the calling thread before start returns")
    func startWithoutQueueRunsInline() throws {
        let tagged = TaggedDispatchQueue("inline-start")
        let ranOnCaller = Recorder<Bool>()
        let operation = ClosureOperation(name: "inline") { ranOnCaller.record(tagged.isCurrent) }
        let error = tagged.queue.sync { caughtOperationError { try operation.start() } }
        #expect(error == nil)
        #expect(ranOnCaller.values == [true])
        #expect(operation.isFinished)
        #expect(!operation.isExecuting)
        #expect(ConcurrentOperationQueue.current == nil)
    }

    @Test("A5 a subclass that finishes later: executing until finish() is called from another thread")
    func manualFinishFromAnotherThread() throws {
        let operation = ManuallyFinishedOperation(name: "manual")
        let completions = AtomicCounter()
        let completed = Latch()
        operation.completionBlock = {
            completions.increment()
            completed.countDown()
        }
        try operation.start()
        #expect(operation.executions.value == 1)
        #expect(operation.isExecuting)
        #expect(!operation.isFinished)
        #expect(!operation.isReady)
        #expect(completions.value == 0)
        let finishedByOtherThread = Recorder<Bool>()
        let finishReturned = Latch()
        DispatchQueue.global().async {
            finishedByOtherThread.record(operation.finish())
            finishReturned.countDown()
        }
        #expect(completed.wait(timeout: operationTestTimeout))
        #expect(finishReturned.wait(timeout: operationTestTimeout))
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(finishedByOtherThread.values == [true])
        #expect(operation.isFinished)
        #expect(!operation.isExecuting)
        #expect(completions.value == 1)
    }

    @Test("M95 completion block runs exactly once, after isFinished, and the second finish is ignored")
    func completionBlockExactlyOnce() throws {
        let operation = ManuallyFinishedOperation(name: "once")
        let finishedInCompletion = Recorder<Bool>()
        operation.completionBlock = { [unowned operation] in finishedInCompletion.record(operation.isFinished) }
        try operation.start()
        #expect(operation.finish())
        #expect(!operation.finish())
        #expect(operation.executions.value == 1)
        #expect(finishedInCompletion.values == [true])
        #expect(operation.completionBlock == nil, "released once it has run")
    }

    @Test("M95 finish() from many threads at once: one wins, the completion block runs once")
    func concurrentFinishCalls() throws {
        let operation = ManuallyFinishedOperation(name: "racing finishes")
        let completions = AtomicCounter()
        operation.completionBlock = { completions.increment() }
        try operation.start()
        let wins = AtomicCounter()
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            if operation.finish() { wins.increment() }
        }
        #expect(wins.value == 1)
        #expect(completions.value == 1)
        #expect(operation.isFinished)
    }

    @Test("completion block runs on the thread that finished the operation")
    func completionOnFinishingThread() throws {
        let tagged = TaggedDispatchQueue("finisher")
        let operation = ManuallyFinishedOperation(name: "finished elsewhere")
        let onFinisher = Recorder<Bool>()
        operation.completionBlock = { onFinisher.record(tagged.isCurrent) }
        try operation.start()
        let finished = tagged.queue.sync { operation.finish() }
        #expect(finished)
        #expect(onFinisher.values == [true])
    }

    @Test("completion block holds no lock: it may add operations to the queue and cancel others")
    func completionBlockMayUseTheQueue() throws {
        let queue = try ConcurrentOperationQueue(name: "reentrant", maxConcurrentOperationCount: 1)
        queue.isSuspended = true
        let log = Recorder<String>()
        let first = ClosureOperation(name: "first") { log.record("first") }
        let victim = ClosureOperation(name: "victim") { log.record("victim") }
        let added = ClosureOperation(name: "added") { log.record("added") }
        first.completionBlock = {
            victim.cancel()
            log.record(caughtOperationError { try queue.addOperation(added) } == nil ? "added ok" : "refused")
        }
        try queue.addOperations([first, victim], waitUntilFinished: false)
        queue.isSuspended = false
        #expect(added.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(Array(log.values.prefix(2)) == ["first", "added ok"])
        #expect(log.values.last == "added")
        #expect(!log.values.contains("victim"))
        #expect(victim.isFinished && victim.isCancelled)
    }

    @Test("C20 cancel before start (no queue): never executes, finishes, completion block once")
    func cancelBeforeStartWithoutQueue() throws {
        let operation = ManuallyFinishedOperation(name: "cancelled early")
        let completions = AtomicCounter()
        operation.completionBlock = { completions.increment() }
        operation.cancel()
        #expect(operation.isCancelled)
        #expect(operation.isReady, "a cancelled operation is ready at once")
        #expect(!operation.isFinished, "C22 not finished until it is started")
        try operation.start()
        #expect(operation.executions.value == 0)
        #expect(operation.isFinished)
        #expect(operation.isCancelled)
        #expect(completions.value == 1)
    }

    @Test("C20 cancel before queuing: its work never runs, it ends finished, completion block runs")
    func cancelBeforeQueuing() throws {
        let queue = ConcurrentOperationQueue(name: "C20")
        let operation = ManuallyFinishedOperation(name: "cancelled before queuing")
        let completed = Latch()
        operation.completionBlock = { completed.countDown() }
        operation.cancel()
        #expect(operation.isCancelled)
        try queue.addOperation(operation)
        #expect(completed.wait(timeout: operationTestTimeout))
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(operation.executions.value == 0)
        #expect(operation.isFinished)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("C21/C22 cancelled in a suspended queue: not finished until the queue resumes, never runs")
    func cancelInSuspendedQueue() throws {
        let queue = ConcurrentOperationQueue(name: "C21")
        queue.isSuspended = true
        let operation = ManuallyFinishedOperation(name: "suspended")
        let completions = AtomicCounter()
        operation.completionBlock = { completions.increment() }
        try queue.addOperation(operation)
        operation.cancel()
        #expect(operation.isCancelled)
        #expect(!operation.isFinished)
        #expect(completions.value == 0)
        queue.isSuspended = false
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(operation.executions.value == 0)
        #expect(completions.value == 1)
    }

    @Test("C23/C29 cancel while executing only sets the flag; the operation finishes itself")
    func cancelWhileExecuting() throws {
        let queue = ConcurrentOperationQueue(name: "C23")
        let operation = ManuallyFinishedOperation(name: "executing")
        let completions = AtomicCounter()
        operation.completionBlock = { completions.increment() }
        try queue.addOperation(operation)
        #expect(operation.executed.wait(timeout: operationTestTimeout))
        operation.cancel()
        #expect(operation.isCancelled)
        #expect(operation.isExecuting)
        #expect(!operation.isFinished)
        #expect(queue.operationCount == 1)
        #expect(!operation.waitUntilFinishedBlocking(timeout: .milliseconds(1)), "it does not finish by itself")
        #expect(operation.finish())
        #expect(operation.isFinished)
        #expect(operation.isCancelled)
        #expect(completions.value == 1)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("C23 cancelled from inside its own work: still executing until it finishes itself")
    func cancelFromInsideWork() throws {
        let queue = ConcurrentOperationQueue(name: "C23-self")
        let seen = Recorder<[Bool]>()
        let operation = ClosureOperation(name: "self-cancelling", asynchronous: { operation in
            operation.cancel()
            seen.record([operation.isCancelled, operation.isExecuting, operation.isFinished])
            operation.finish()
        })
        try queue.addOperation(operation)
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(seen.values == [[true, true, false]])
        #expect(operation.isCancelled)
    }

    @Test("C25 cancel after finish changes nothing, also from another thread")
    func cancelAfterFinish() throws {
        let operation = ClosureOperation(name: "finished") {}
        try operation.start()
        #expect(operation.isFinished)
        operation.cancel()
        #expect(!operation.isCancelled)
        let done = Latch()
        DispatchQueue.global().async {
            operation.cancel()
            done.countDown()
        }
        #expect(done.wait(timeout: operationTestTimeout))
        #expect(!operation.isCancelled)
        #expect(operation.isFinished)
    }

    @Test("C31 cancelled without a queue while a dependency is unfinished: start finishes it at once")
    func cancelledStartIgnoresDependencies() throws {
        let dependency = ManuallyFinishedOperation(name: "never started")
        let dependent = ManuallyFinishedOperation(name: "cancelled dependent")
        try dependent.addDependency(dependency)
        #expect(!dependent.isReady)
        dependent.cancel()
        #expect(dependent.isReady)
        try dependent.start()
        #expect(dependent.isFinished)
        #expect(dependent.executions.value == 0)
        #expect(!dependency.isFinished)
    }

    @Test("ClosureOperation: the synchronous closure runs once, then the operation finishes")
    func synchronousClosure() throws {
        let runs = AtomicCounter()
        let operation = ClosureOperation(name: "sync") { runs.increment() }
        try operation.start()
        #expect(runs.value == 1)
        #expect(operation.isFinished)
    }

    @Test("ClosureOperation: the asynchronous form finishes when the callback calls finish()")
    func asynchronousClosure() throws {
        let gate = Gate()
        let operation = ClosureOperation(name: "async", asynchronous: { operation in
            DispatchQueue.global().async {
                _ = gate.wait(timeout: operationTestTimeout)
                operation.finish()
            }
        })
        try operation.start()
        #expect(operation.isExecuting)
        #expect(!operation.isFinished)
        gate.open()
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(operation.isFinished)
    }

    @Test("ClosureOperation in a queue: the asynchronous form may call finish() from a callback thread")
    func asynchronousClosureInQueue() throws {
        let queue = ConcurrentOperationQueue(name: "callback")
        let completions = AtomicCounter()
        let operation = ClosureOperation(name: "callback", asynchronous: { operation in
            DispatchQueue.global().async { operation.finish() }
        })
        operation.completionBlock = { completions.increment() }
        try queue.addOperation(operation)
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(completions.value == 1)
        let after = queue.addOperation {}
        #expect(after.waitUntilFinishedBlocking(timeout: operationTestTimeout), "the slot was given back")
    }

    @Test("waitUntilFinished blocks until another thread finishes the operation")
    func waitUntilFinishedSync() throws {
        let operation = ManuallyFinishedOperation(name: "awaited")
        try operation.start()
        let waited = Latch()
        let sawFinished = Recorder<Bool>()
        DispatchQueue.global().async {
            operation.waitUntilFinishedBlocking()
            sawFinished.record(operation.isFinished)
            waited.countDown()
        }
        #expect(sawFinished.values.isEmpty)
        operation.finish()
        #expect(waited.wait(timeout: operationTestTimeout))
        #expect(sawFinished.values == [true])
        operation.waitUntilFinishedBlocking()  // returns at once once finished
    }

    @Test("waitUntilFinishedBlocking(timeout:) returns false while unfinished, true once finished")
    func waitUntilFinishedTimeout() throws {
        let operation = ManuallyFinishedOperation(name: "timed")
        #expect(!operation.waitUntilFinishedBlocking(timeout: .milliseconds(10)), "never started")
        try operation.start()
        #expect(!operation.waitUntilFinishedBlocking(timeout: .milliseconds(10)), "still executing")
        #expect(!operation.isFinished)
        operation.finish()
        #expect(operation.waitUntilFinishedBlocking(timeout: .milliseconds(10)))
        #expect(operation.waitUntilFinishedBlocking(timeout: .zero))
    }

    @Test("waitUntilFinished async resumes when the operation finishes, at once if already finished")
    func waitUntilFinishedAsync() async throws {
        let queue = ConcurrentOperationQueue(name: "async wait")
        let gate = Gate()
        let operation = ClosureOperation(name: "gated") { _ = gate.wait(timeout: operationTestTimeout) }
        try queue.addOperation(operation)
        DispatchQueue.global().async { gate.open() }
        #expect(await completes { await operation.waitUntilFinished() })
        #expect(operation.isFinished)
        #expect(await completes { await operation.waitUntilFinished() })
    }

    @Test("A11 an operation that never started is deallocated, with its dependency")
    func neverStartedOperationIsReleased() throws {
        let dependentGone = Latch()
        let dependencyGone = Latch()
        do {
            let dependency = DeallocationProbeOperation(name: "dependency", deallocated: dependencyGone)
            let dependent = DeallocationProbeOperation(name: "dependent", deallocated: dependentGone)
            try dependent.addDependency(dependency)
            #expect(!dependent.isReady)
        }
        #expect(dependentGone.wait(timeout: operationTestTimeout))
        #expect(dependencyGone.wait(timeout: operationTestTimeout))
    }
}
