import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section A of SCENARIOS.md on the public `OperationStateMachine`. Illegal events (A4, A6) are
/// in `MisuseTests`.
@Suite("A. OperationStateMachine", .offThePool)
struct OperationStateMachineTests {
    /// The object that owns a machine in these tests.
    final class Host {}

    @Test("A1 initial state: ready, not executing, not finished, not cancelled")
    func initialState() {
        let host = Host()
        let tagged = TaggedDispatchQueue("A1")
        let machine = OperationStateMachine(operation: host, dispatchQueue: tagged.queue)
        #expect(machine.isReady)
        #expect(!machine.isExecuting)
        #expect(!machine.isFinished)
        #expect(!machine.isCancelled)
        #expect(machine.operation === host)
        #expect(machine.dispatchQueue === tagged.queue)
    }

    @Test("A2 start: executing before start returns; the execution block runs later on the dispatch queue")
    func startIsAsynchronousOnTheDispatchQueue() throws {
        let tagged = TaggedDispatchQueue("A2")
        let host = Host()
        let machine = OperationStateMachine(operation: host, dispatchQueue: tagged.queue)
        let ranOnQueue = Recorder<Bool>()
        let ran = Latch()
        try machine.setExecutionBlock {
            ranOnQueue.record(tagged.isCurrent)
            ran.countDown()
        }
        // Holding the dispatch queue proves the block is not run inside start().
        tagged.queue.suspend()
        try machine.start()
        #expect(machine.isExecuting)
        #expect(!machine.isReady)
        #expect(!machine.isFinished)
        #expect(ranOnQueue.values.isEmpty)
        tagged.queue.resume()
        #expect(ran.wait(timeout: operationTestTimeout))
        #expect(ranOnQueue.values == [true])
        #expect(machine.isExecuting)
        try machine.finish()
        #expect(machine.isFinished)
        withExtendedLifetime(host) {}
    }

    @Test("A5 finish from another thread: finalization runs while still executing, then finished")
    func finishFromAnotherThread() throws {
        let host = Host()
        let machine = OperationStateMachine(operation: host, dispatchQueue: TaggedDispatchQueue("A5").queue)
        let seenDuringFinalization = Recorder<[Bool]>()
        try machine.setExecutionBlock {}
        try machine.setFinalizationBlock {
            seenDuringFinalization.record([machine.isExecuting, machine.isFinished])
        }
        try machine.start()
        let finished = Latch()
        let finishThrew = Recorder<Bool>()
        DispatchQueue.global().async {
            finishThrew.record(caughtOperationError { try machine.finish() } != nil)
            finished.countDown()
        }
        #expect(finished.wait(timeout: operationTestTimeout))
        #expect(finishThrew.values == [false])
        #expect(seenDuringFinalization.values == [[true, false]])
        #expect(machine.isFinished)
        #expect(!machine.isExecuting)
        #expect(!machine.isReady)
        #expect(!machine.isCancelled)
        withExtendedLifetime(host) {}
    }

    @Test("A7 cancel flags only, on a ready machine: block once on the dispatch queue, no state change")
    func cancelReadyMachine() throws {
        let host = Host()
        let tagged = TaggedDispatchQueue("A7-ready")
        let machine = OperationStateMachine(operation: host, dispatchQueue: tagged.queue)
        let cancellations = Recorder<Bool>()
        try machine.setExecutionBlock {}
        try machine.setCancellationBlock { cancellations.record(tagged.isCurrent) }
        #expect(machine.cancel())
        #expect(machine.isCancelled)
        #expect(machine.isReady)
        #expect(!machine.isExecuting)
        #expect(!machine.isFinished)
        #expect(!machine.cancel(), "a second cancel does nothing")
        tagged.queue.sync {}  // the queue is serial: every block dispatched so far has run
        #expect(cancellations.values == [true])
        #expect(machine.isReady, "cancel alone never finishes the machine")
        withExtendedLifetime(host) {}
    }

    @Test("A7 cancel flags only, on an executing machine: finished only when finish is called")
    func cancelExecutingMachine() throws {
        let host = Host()
        let tagged = TaggedDispatchQueue("A7-executing")
        let machine = OperationStateMachine(operation: host, dispatchQueue: tagged.queue)
        let cancellations = AtomicCounter()
        let finalizations = AtomicCounter()
        try machine.setExecutionBlock {}
        try machine.setCancellationBlock { cancellations.increment() }
        try machine.setFinalizationBlock { finalizations.increment() }
        try machine.start()
        #expect(machine.cancel())
        #expect(machine.isCancelled)
        #expect(machine.isExecuting)
        #expect(!machine.isFinished)
        tagged.queue.sync {}
        #expect(cancellations.value == 1)
        #expect(machine.isExecuting, "the cancellation block ran, the machine still executes")
        #expect(!machine.cancel())
        try machine.finish()
        #expect(machine.isFinished)
        #expect(machine.isCancelled)
        #expect(!machine.cancel(), "cancel after finish does nothing")
        tagged.queue.sync {}
        #expect(cancellations.value == 1)
        #expect(finalizations.value == 1)
        withExtendedLifetime(host) {}
    }

    @Test("A7/C25 cancel after finish does nothing: not cancelled, no cancellation block")
    func cancelAfterFinish() throws {
        let host = Host()
        let tagged = TaggedDispatchQueue("A7-finished")
        let machine = OperationStateMachine(operation: host, dispatchQueue: tagged.queue)
        let cancellations = AtomicCounter()
        try machine.setExecutionBlock {}
        try machine.setCancellationBlock { cancellations.increment() }
        try machine.start()
        try machine.finish()
        #expect(!machine.cancel())
        #expect(!machine.isCancelled)
        #expect(machine.isFinished)
        tagged.queue.sync {}
        #expect(cancellations.value == 0)
        withExtendedLifetime(host) {}
    }

    @Test("A9 cancelled before start: start finishes it without running the execution block")
    func cancelledBeforeStart() throws {
        let host = Host()
        let tagged = TaggedDispatchQueue("A9-before")
        let machine = OperationStateMachine(operation: host, dispatchQueue: tagged.queue)
        let executions = AtomicCounter()
        let finalizedOnQueue = Recorder<Bool>()
        let finalized = Latch()
        try machine.setExecutionBlock { executions.increment() }
        try machine.setFinalizationBlock {
            finalizedOnQueue.record(tagged.isCurrent)
            finalized.countDown()
        }
        machine.cancel()
        try machine.start()
        #expect(finalized.wait(timeout: operationTestTimeout))
        tagged.queue.sync {}
        #expect(executions.value == 0)
        #expect(finalizedOnQueue.values == [true])
        #expect(machine.isFinished)
        #expect(machine.isCancelled)
        withExtendedLifetime(host) {}
    }

    @Test("A9 cancelled during its work: still ends finished, cancelled, finalized once")
    func cancelledDuringWork() throws {
        let host = Host()
        let machine = OperationStateMachine(operation: host, dispatchQueue: TaggedDispatchQueue("A9-during").queue)
        let finalizations = AtomicCounter()
        let done = Latch()
        try machine.setFinalizationBlock { finalizations.increment() }
        try machine.setExecutionBlock {
            machine.cancel()
            // The work sees the flag and stops early; it must still finish the machine.
            if machine.isCancelled { try? machine.finish() }
            done.countDown()
        }
        try machine.start()
        #expect(done.wait(timeout: operationTestTimeout))
        #expect(machine.isFinished)
        #expect(machine.isCancelled)
        #expect(finalizations.value == 1)
        withExtendedLifetime(host) {}
    }

    @Test("A11 no retain cycle: the machine holds its operation weakly")
    func machineHoldsOperationWeakly() {
        let machine: OperationStateMachine
        do {
            let host = Host()
            machine = OperationStateMachine(operation: host, dispatchQueue: .global())
            #expect(machine.operation === host)
        }
        #expect(machine.operation == nil)
    }

    /// An owner whose blocks capture it strongly: a cycle until the machine releases its blocks.
    final class SelfCapturingHost: @unchecked Sendable {
        // `machine` is set once in init and only read afterwards; the latch is Sendable.
        private(set) var machine: OperationStateMachine!
        let deallocated: Latch

        init(deallocated: Latch, executed: Latch) throws {
            self.deallocated = deallocated
            machine = OperationStateMachine(operation: self, dispatchQueue: .global())
            try machine.setExecutionBlock {
                try? self.machine.finish()
                executed.countDown()
            }
            try machine.setFinalizationBlock { _ = self }
            try machine.setCancellationBlock { _ = self }
        }

        deinit { deallocated.countDown() }
    }

    @Test("A11 no retain cycle: blocks that capture the owner are released once the machine finishes")
    func blocksAreReleasedAfterFinishing() throws {
        let deallocated = Latch()
        let executed = Latch()
        do {
            let host = try SelfCapturingHost(deallocated: deallocated, executed: executed)
            try host.machine.start()
        }
        #expect(executed.wait(timeout: operationTestTimeout))
        #expect(deallocated.wait(timeout: operationTestTimeout))
    }

    @Test("A12 withLock runs on the caller's thread and may re-enter start, cancel and the state")
    func withLockIsReentrant() throws {
        let host = Host()
        let tagged = TaggedDispatchQueue("A12")
        let machine = OperationStateMachine(operation: host, dispatchQueue: .global())
        try machine.setExecutionBlock {}
        let observed = tagged.queue.sync {
            machine.withLock { () -> [Bool] in
                let onCaller = tagged.isCurrent
                let cancelled = machine.cancel()
                let started = caughtOperationError { try machine.start() } == nil
                return [onCaller, cancelled, started, machine.isCancelled, machine.isExecuting]
            }
        }
        #expect(observed == [true, true, true, true, true])
        withExtendedLifetime(host) {}
    }

    @Test("A12 withLock holds the lock that guards cancel")
    func withLockExcludesCancel() {
        let host = Host()
        let machine = OperationStateMachine(operation: host, dispatchQueue: .global())
        let order = Recorder<String>()
        let aboutToCancel = Latch()
        let cancelled = Latch()
        machine.withLock {
            DispatchQueue.global().async {
                aboutToCancel.countDown()
                machine.cancel()
                order.record("cancel returned")
                cancelled.countDown()
            }
            #expect(aboutToCancel.wait(timeout: operationTestTimeout))
            order.record("lock released")
        }
        #expect(cancelled.wait(timeout: operationTestTimeout))
        #expect(order.values == ["lock released", "cancel returned"])
        #expect(machine.isCancelled)
        withExtendedLifetime(host) {}
    }
}
