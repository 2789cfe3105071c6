import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// A class that becomes a concurrent operation by owning an ``OperationStateMachine``.
final class MachineOwner: @unchecked Sendable {
    // `machine` is assigned once in init, before `self` is shared with any other thread.
    private(set) var machine: OperationStateMachine!

    init(dispatchQueue: DispatchQueue) {
        machine = OperationStateMachine(operation: self, dispatchQueue: dispatchQueue)
    }
}

/// A queue whose workers, and the blocks that finish operations later, run on dispatch queues of
/// the test's own, so the test can wait until every such block has returned and released what it
/// captured. Only then may a weak reference be expected to be `nil`: a worker thread can still
/// hold an operation for a moment after the queue reported it finished.
struct LeakHarness {
    let workers = DispatchQueue(label: "leak.workers", attributes: .concurrent)
    let finishers = DispatchQueue(label: "leak.finishers", attributes: .concurrent)

    func makeQueue(_ name: String) -> ConcurrentOperationQueue {
        ConcurrentOperationQueue(name: name, underlyingQueue: workers)
    }

    /// Waits for `queue` to drain, then for every worker and finisher block to return.
    func drain(_ queue: ConcurrentOperationQueue) -> Bool {
        queue.waitUntilAllOperationsAreFinishedBlocking(timeout: Stress.timeout) && quiesce(workers, finishers)
    }
}

/// Captured by an operation's closure; when the closure is released, checks from another thread
/// that the operation can be used, i.e. that no lock of the operation is held while it is released.
final class ReleaseProbe: @unchecked Sendable {
    // `operation` is set once before the operation is shared; `lockWasFree` synchronises itself.
    weak var operation: ConcurrentOperation?
    let lockWasFree = Recorder<Bool>()
    let released = Latch()

    init() {}

    deinit {
        if let operation {
            // If this thread held the operation's lock, the reader blocks until this deinit
            // returns, so the wait expires: a failure, but not a deadlock.
            let read = Latch()
            DispatchQueue.global().async {
                _ = operation.isCancelled
                read.countDown()
            }
            lockWasFree.record(read.wait(timeout: Stress.timeout))
        }
        released.countDown()
    }
}

extension StressTests {
    @Suite("Leaks")
    struct Leaks {
        let harness = LeakHarness()

        /// Adds `operations` to a suspended queue, checks that the queue keeps them alive, runs
        /// them, and checks that nothing survives: not the operations, and not the queue once
        /// dropped. `operations` is consumed: the caller must keep no strong reference.
        func expectReleasedAfterRunning(
            _ name: String, _ makeOperations: () throws -> [ConcurrentOperation],
            beforeResuming: ([ConcurrentOperation]) -> Void = { _ in },
            sourceLocation: SourceLocation = #_sourceLocation
        ) throws {
            var references: [WeakRef] = []
            var queueReference: WeakRef?
            do {
                let queue = harness.makeQueue(name)
                queue.isSuspended = true
                do {
                    let operations = try makeOperations()
                    references = operations.map { WeakRef($0) }
                    try queue.addOperations(operations, waitUntilFinished: false)
                    beforeResuming(operations)
                }
                #expect(references.allSatisfy { !$0.isReleased }, "the queue must retain waiting operations",
                        sourceLocation: sourceLocation)
                queue.isSuspended = false
                try #require(harness.drain(queue), sourceLocation: sourceLocation)
                let alive = offenders(references.count) { !references[$0].isReleased }
                #expect(alive.count == 0, "\(name): operations alive after draining: \(alive)",
                        sourceLocation: sourceLocation)
                queueReference = WeakRef(queue)
            }
            #expect(queueReference?.isReleased == true, "\(name): the drained queue was not released",
                    sourceLocation: sourceLocation)
        }

        @Test("independent operations are released once they finish")
        func independentOperations() throws {
            try expectReleasedAfterRunning("independent") {
                (0..<500).map { index in ClosureOperation(name: "independent\(index)") {} }
            }
        }

        @Test("a chain is released once it finishes")
        func chain() throws {
            try expectReleasedAfterRunning("chain") {
                let operations = (0..<500).map { index in ClosureOperation(name: "chain\(index)") {} }
                for index in 1..<operations.count { try operations[index].addDependency(operations[index - 1]) }
                return operations
            }
        }

        @Test("a fan-in is released once it finishes")
        func fanIn() throws {
            try expectReleasedAfterRunning("fan-in") {
                let sources = (0..<500).map { index in ClosureOperation(name: "source\(index)") {} }
                let sink = ClosureOperation(name: "sink") {}
                for source in sources { try sink.addDependency(source) }
                return [sink] + sources
            }
        }

        @Test("cancelled operations are released: before adding, while waiting, with dependencies pending")
        func cancelledOperations() throws {
            try expectReleasedAfterRunning("cancelled", {
                let operations = (0..<300).map { index in ClosureOperation(name: "cancelled\(index)") {} }
                for index in stride(from: 1, to: operations.count, by: 2) {
                    try operations[index].addDependency(operations[index - 1])
                }
                for index in stride(from: 0, to: operations.count, by: 6) { operations[index].cancel() }
                return operations
            }, beforeResuming: { operations in
                // Cancelled while enqueued: some still have a pending dependency.
                for index in stride(from: 3, to: operations.count, by: 6) { operations[index].cancel() }
            })
        }

        @Test("asynchronous closures that capture their own operation are released after running")
        func selfCapturingAsynchronousClosures() throws {
            let finishers = harness.finishers
            try expectReleasedAfterRunning("self-capturing") {
                (0..<300).map { index in
                    // operation → closure → box → operation: a cycle until the closure is released.
                    let box = OperationBox()
                    let operation = ClosureOperation(name: "selfCapturing\(index)", asynchronous: { _ in
                        guard let operation = box.operation else { return }
                        finishers.async { operation.finish() }
                    })
                    box.operation = operation
                    return operation
                }
            }
        }

        /// Expected to pass by DESIGN.md ("no retain cycle survives a finished operation") and by
        /// ClosureOperation's documentation (the closure "is released once it has run, so a closure
        /// that captures the operation forms no lasting retain cycle"): an operation cancelled
        /// before it starts finishes without running its closure, and must release it too.
        @Test("closures that capture their own operation are released when it is cancelled before starting")
        func selfCapturingClosuresOfCancelledOperations() throws {
            try expectReleasedAfterRunning("self-capturing-cancelled") {
                (0..<100).map { index in
                    let box = OperationBox()
                    let operation = ClosureOperation(name: "selfCapturingCancelled\(index)", asynchronous: { _ in
                        box.operation?.finish()
                    })
                    box.operation = operation
                    operation.cancel()
                    return operation
                }
            }
        }

        /// DESIGN.md: blocks are never called while a lock is held. Releasing a closure runs the
        /// deinitializers of what it captured, which are user code too: if they ran under the
        /// operation's lock, one that touches the operation would deadlock.
        @Test("the closure of an operation cancelled before starting is released without a lock held")
        func closureReleasedWithoutLock() throws {
            let queue = harness.makeQueue("release-probe")
            queue.isSuspended = true
            let (lockWasFree, released): (Recorder<Bool>, Latch) = try {
                let probe = ReleaseProbe()
                let operation = ClosureOperation(name: "probed") { withExtendedLifetime(probe) {} }
                probe.operation = operation
                operation.cancel()
                try queue.addOperation(operation)
                return (probe.lockWasFree, probe.released)
            }()
            queue.isSuspended = false
            // The probe's own check may take the whole timeout before it reports.
            try #require(released.wait(timeout: Stress.timeout * 2))
            #expect(lockWasFree.values == [true], "the closure was released while the operation's lock was held")
            #expect(harness.drain(queue))
        }

        @Test("a queue dropped while it holds operations lives until they finish, then is released")
        func droppedQueueIsReleasedAfterDraining() throws {
            let started = Latch()
            let held = ClosureOperation(name: "held", asynchronous: { _ in started.countDown() })
            var queueReference: WeakRef?
            do {
                let queue = harness.makeQueue("dropped")
                let others = (0..<100).map { _ in ClosureOperation {} }
                try queue.addOperations(others + [held], waitUntilFinished: false)
                queueReference = WeakRef(queue)
            }
            try #require(started.wait(timeout: Stress.timeout))
            #expect(queueReference?.isReleased == false, "the queue went while it still held an operation")
            harness.finishers.async { held.finish() }
            #expect(held.waitUntilFinishedBlocking(timeout: Stress.timeout))
            #expect(quiesce(harness.workers, harness.finishers))
            #expect(queueReference?.isReleased == true)
        }

        @Test("completion blocks that capture their own operation are released")
        func selfCapturingCompletionBlocks() throws {
            try expectReleasedAfterRunning("self-capturing-completion") {
                (0..<300).map { index in
                    let operation = ClosureOperation(name: "completion\(index)") {}
                    // operation → completion block → operation, until the block has run.
                    operation.completionBlock = { _ = operation.isFinished }
                    if index % 3 == 0 { operation.cancel() }
                    return operation
                }
            }
        }

        @Test("a finished operation has released its dependencies, so a chain frees as it runs")
        func finishedOperationsReleaseDependencies() throws {
            let count = 2_000
            let queue = try ConcurrentOperationQueue(
                name: "incremental", maxConcurrentOperationCount: 1, underlyingQueue: harness.workers)
            queue.isSuspended = true
            let earlierAlive = Recorder<Int>()
            var references: [WeakRef] = []
            var last: ConcurrentOperation?
            do {
                let operations = (0..<count).map { index in ClosureOperation(name: "incremental\(index)") {} }
                references = operations.map { WeakRef($0) }
                for index in 1..<count { try operations[index].addDependency(operations[index - 1]) }
                // When operation i runs, operation i-2 has finished, and so has i-1, which held it
                // as a dependency: nothing holds i-2 any more but the queue, which parks fewer than
                // 64 finished operations (ConcurrentOperationQueue.finishedLimit) for its next add
                // to release. So i-66 must be gone: the chain frees as it runs, 64 behind at most.
                let window = 2 + 64
                for index in window..<count {
                    let earlier = references[index - window]
                    operations[index].completionBlock = { if !earlier.isReleased { earlierAlive.record(index) } }
                }
                try queue.addOperations(operations, waitUntilFinished: false)
                last = operations[count - 1]
            }
            queue.isSuspended = false
            try #require(harness.drain(queue))
            let stillAlive = earlierAlive.values
            #expect(stillAlive.isEmpty, "operation i-66 alive when i finished, for i in \(stillAlive.prefix(10))")
            #expect(last?.dependencies.isEmpty == true)
            let alive = offenders(count - 1) { !references[$0].isReleased }
            #expect(alive.count == 0, "finished chain members alive: \(alive)")
            withExtendedLifetime(last) {}
        }

        @Test("an OperationStateMachine does not retain its owner")
        func stateMachineDoesNotRetainOwner() throws {
            let dispatchQueue = DispatchQueue(label: "leak.machine", attributes: .concurrent)
            var machine: OperationStateMachine?
            var ownerReference: WeakRef?
            do {
                let owner = MachineOwner(dispatchQueue: dispatchQueue)
                ownerReference = WeakRef(owner)
                machine = owner.machine
                #expect(machine?.operation === owner)
            }
            #expect(ownerReference?.isReleased == true)
            #expect(machine?.operation == nil)

            // Blocks that capture the owner strongly are released once the machine finishes.
            do {
                let finished = Latch()
                let owner = MachineOwner(dispatchQueue: dispatchQueue)
                ownerReference = WeakRef(owner)
                try owner.machine.setExecutionBlock { try? owner.machine.finish() }
                try owner.machine.setCancellationBlock { _ = owner.machine.isCancelled }
                try owner.machine.setFinalizationBlock { finished.countDown() }
                try owner.machine.start()
                _ = owner.machine.cancel()
                #expect(finished.wait(timeout: Stress.timeout))
            }
            #expect(quiesce(dispatchQueue))
            #expect(ownerReference?.isReleased == true)
        }

        @Test("operations that never start are released: plain, with dependencies, rejected by a queue")
        func neverStartedOperations() throws {
            var references: [WeakRef] = []
            do {
                let plain = ClosureOperation(name: "plain") {}
                let dependency = ClosureOperation(name: "dependency") {}
                let dependent = ClosureOperation(name: "dependent") {}
                try dependent.addDependency(dependency)
                dependent.completionBlock = {}
                references = [WeakRef(plain), WeakRef(dependency), WeakRef(dependent)]
            }
            #expect(references.allSatisfy { $0.isReleased })

            // `rejected` closes a cycle and is refused; once the waiter stops waiting for it, it
            // is referenced by nothing and goes, while the rest runs.
            var rejectedReference: WeakRef?
            let queue = harness.makeQueue("rejected")
            queue.isSuspended = true
            do {
                let rejected = ClosureOperation(name: "rejected") {}
                let waiter = ClosureOperation(name: "waiter") {}
                try waiter.addDependency(rejected)
                try queue.addOperation(waiter)
                try rejected.addDependency(waiter)
                let error = expectOperationError { try queue.addOperation(rejected) }
                #expect(error?.code == .dependencyCycle)
                waiter.removeDependency(rejected)
                rejectedReference = WeakRef(rejected)
            }
            #expect(rejectedReference?.isReleased == true)
            queue.isSuspended = false
            #expect(harness.drain(queue))
        }
    }
}
