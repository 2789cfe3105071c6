import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Section N and the queue side of A10 / C21: suspension, priorities, barriers, the current
/// queue, counting, waiting and cancel-all. The concurrency limit is in `QueueConcurrencyTests`.
@Suite("N. ConcurrentOperationQueue", .offThePool)
struct QueueTests {
    @Test("N defaults: 64 at once, not suspended, empty")
    func defaults() {
        let queue = ConcurrentOperationQueue(name: "defaults")
        #expect(queue.maxConcurrentOperationCount == ConcurrentOperationQueue.defaultMaxConcurrentOperationCount)
        #expect(ConcurrentOperationQueue.defaultMaxConcurrentOperationCount == 64)
        #expect(!queue.isSuspended)
        #expect(queue.operationCount == 0)
        #expect(queue.operations.isEmpty)
        #expect(queue.name == "defaults")
        #expect(queue.underlyingQueue == nil)
    }

    @Test("N102 suspension: an added operation does not start until the queue resumes")
    func suspension() throws {
        let queue = ConcurrentOperationQueue(name: "N102")
        queue.isSuspended = true
        #expect(queue.isSuspended)
        let runs = AtomicCounter()
        let operation = ClosureOperation(name: "held") { runs.increment() }
        try queue.addOperation(operation)
        #expect(operation.isReady)
        #expect(!operation.isExecuting)
        #expect(!operation.isFinished)
        #expect(!queue.waitUntilAllOperationsAreFinishedBlocking(timeout: .milliseconds(10)))
        #expect(runs.value == 0)
        queue.isSuspended = false
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(runs.value == 1)
    }

    @Test("N102 suspending does not affect an executing operation")
    func suspendWhileExecuting() throws {
        let queue = ConcurrentOperationQueue(name: "N102-executing")
        let started = Latch()
        let gate = Gate()
        let executing = ClosureOperation(name: "executing") {
            started.countDown()
            _ = gate.wait(timeout: operationTestTimeout)
        }
        try queue.addOperation(executing)
        #expect(started.wait(timeout: operationTestTimeout))
        queue.isSuspended = true
        let held = ClosureOperation(name: "held") {}
        try queue.addOperation(held)
        gate.open()
        #expect(executing.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(!held.isExecuting && !held.isFinished)
        #expect(queue.operations.contains { $0 === held })
        queue.isSuspended = false
        #expect(held.waitUntilFinishedBlocking(timeout: operationTestTimeout))
    }

    @Test("N priority: a serial queue starts veryHigh … veryLow, FIFO within equal priority")
    func priorityOrder() throws {
        let queue = try ConcurrentOperationQueue(name: "priority", maxConcurrentOperationCount: 1)
        queue.isSuspended = true
        let log = Recorder<String>()
        let plan: [(String, ConcurrentOperation.QueuePriority)] = [
            ("n1", .normal), ("l1", .low), ("vh1", .veryHigh), ("vl1", .veryLow), ("h1", .high),
            ("n2", .normal), ("vh2", .veryHigh), ("l2", .low), ("h2", .high), ("vl2", .veryLow),
            ("n3", .normal), ("vh3", .veryHigh),
        ]
        for (name, priority) in plan {
            let operation = ClosureOperation(name: name) { log.record(name) }
            operation.queuePriority = priority
            try queue.addOperation(operation)
        }
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["vh1", "vh2", "vh3", "h1", "h2", "n1", "n2", "n3", "l1", "l2", "vl1", "vl2"])
    }

    @Test("N priority order of the enum")
    func priorityComparable() {
        let ordered: [ConcurrentOperation.QueuePriority] = [.veryLow, .low, .normal, .high, .veryHigh]
        #expect(ConcurrentOperation.QueuePriority.allCases.sorted() == ordered)
    }

    @Test("N barrier: runs after every earlier operation and before every later one")
    func barrierOrdering() throws {
        let queue = ConcurrentOperationQueue(name: "barrier")
        let log = Recorder<String>()
        let gate = Gate()
        let before = (0..<3).map { index in
            ClosureOperation(name: "before\(index)") {
                _ = gate.wait(timeout: operationTestTimeout)
                log.record("before")
            }
        }
        try queue.addOperations(before, waitUntilFinished: false)
        let barrierSaw = Recorder<Bool>()
        let barrier = queue.addBarrierBlock {
            barrierSaw.record(before.allSatisfy { $0.isFinished })
            log.record("barrier")
        }
        let afterSaw = Recorder<Bool>()
        let after = (0..<3).map { index in
            ClosureOperation(name: "after\(index)") { [unowned barrier] in
                afterSaw.record(barrier.isFinished)
                log.record("after")
            }
        }
        try queue.addOperations(after, waitUntilFinished: false)
        let alsoAfter = queue.addOperation { log.record("after") }
        #expect(!barrier.isReady)
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(log.values == ["before", "before", "before", "barrier", "after", "after", "after", "after"])
        #expect(barrierSaw.values == [true])
        #expect(afterSaw.values == [true, true, true])
        #expect(alsoAfter.isFinished)
    }

    @Test("N current: the operation's queue inside execute(), nil outside any queue")
    func currentQueue() throws {
        let queue = ConcurrentOperationQueue(name: "current")
        let other = ConcurrentOperationQueue(name: "other")
        let seen = Recorder<String>()
        #expect(ConcurrentOperationQueue.current == nil)
        let inQueue = ClosureOperation(name: "in queue") {
            seen.record(ConcurrentOperationQueue.current === queue ? "queue" : "wrong")
        }
        let inOther = ClosureOperation(name: "in other") {
            seen.record(ConcurrentOperationQueue.current === other ? "other" : "wrong")
        }
        try queue.addOperation(inQueue)
        #expect(inQueue.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        try other.addOperation(inOther)
        #expect(inOther.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        let byHand = ClosureOperation(name: "by hand") {
            seen.record(ConcurrentOperationQueue.current == nil ? "none" : "wrong")
        }
        try byHand.start()
        #expect(seen.values == ["queue", "other", "none"])
        #expect(ConcurrentOperationQueue.current == nil)
    }

    @Test("N current: still the operation's queue when the operation runs at its own quality of service")
    func currentQueueWithOwnQualityOfService() throws {
        let queue = ConcurrentOperationQueue(name: "current-qos", qualityOfService: .default)
        let seen = Recorder<Bool>()
        let operation = ClosureOperation(name: "utility") { seen.record(ConcurrentOperationQueue.current === queue) }
        operation.qualityOfService = .utility
        try queue.addOperation(operation)
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(seen.values == [true])
    }

    @Test("N underlyingQueue: the work runs on the given dispatch queue, whatever its own QoS")
    func underlyingQueue() throws {
        let tagged = TaggedDispatchQueue("underlying")
        let queue = ConcurrentOperationQueue(name: "on underlying", underlyingQueue: tagged.queue)
        #expect(queue.underlyingQueue === tagged.queue)
        let seen = Recorder<Bool>()
        let operations = (0..<6).map { index in
            let operation = ClosureOperation(name: "u\(index)") {
                seen.record(tagged.isCurrent && ConcurrentOperationQueue.current === queue)
            }
            if index.isMultiple(of: 2) { operation.qualityOfService = .utility }
            return operation
        }
        try queue.addOperations(operations, waitUntilFinished: true)
        #expect(seen.values == Array(repeating: true, count: 6))
    }

    @Test("N operationCount and operations: unfinished operations in the order added")
    func counting() throws {
        let queue = ConcurrentOperationQueue(name: "counting")
        queue.isSuspended = true
        let operations = (0..<3).map { index in ClosureOperation(name: "c\(index)") {} }
        for operation in operations { try queue.addOperation(operation) }
        #expect(queue.operationCount == 3)
        #expect(queue.operations.map(\.displayName) == ["c0", "c1", "c2"])
        #expect(zip(queue.operations, operations).allSatisfy { $0 === $1 })
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(queue.operationCount == 0)
        #expect(queue.operations.isEmpty)
    }

    @Test("N operationCount and operations still hold an operation during its completion block, not after")
    func finishedOperationLeavesAfterCompletion() throws {
        let queue = ConcurrentOperationQueue(name: "count-finished")
        let seen = Recorder<[Int]>()
        let operation = ClosureOperation(name: "counted") {}
        // Documented order: finished → completion block → the queue releases the operation.
        operation.completionBlock = { [unowned operation] in
            seen.record([operation.isFinished ? 1 : 0, queue.operationCount, queue.operations.count])
        }
        try queue.addOperation(operation)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(seen.values == [[1, 1, 1]], "[isFinished, operationCount, operations.count]")
        #expect(queue.operationCount == 0)
        #expect(queue.operations.isEmpty)
    }

    @Test("N104 waitUntilAllOperationsAreFinished blocks until the last operation finishes")
    func waitAllSync() throws {
        let queue = ConcurrentOperationQueue(name: "wait-all")
        let gate = Gate()
        let operations = (0..<2).map { index in
            ClosureOperation(name: "w\(index)") { _ = gate.wait(timeout: operationTestTimeout) }
        }
        try queue.addOperations(operations, waitUntilFinished: false)
        #expect(!queue.waitUntilAllOperationsAreFinishedBlocking(timeout: .milliseconds(10)), "timed out")
        DispatchQueue.global().async { gate.open() }
        queue.waitUntilAllOperationsAreFinishedBlocking()
        #expect(operations.allSatisfy { $0.isFinished })
        #expect(queue.operationCount == 0)
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: .zero), "an empty queue returns at once")
    }

    @Test("N104 waitUntilAllOperationsAreFinished async resumes when the queue empties")
    func waitAllAsync() async throws {
        let queue = ConcurrentOperationQueue(name: "wait-all-async")
        let gate = Gate()
        let operation = ClosureOperation(name: "gated") { _ = gate.wait(timeout: operationTestTimeout) }
        try queue.addOperation(operation)
        DispatchQueue.global().async { gate.open() }
        #expect(await completes { await queue.waitUntilAllOperationsAreFinished() })
        #expect(operation.isFinished)
        #expect(await completes { await queue.waitUntilAllOperationsAreFinished() }, "empty: at once")
    }

    @Test("N104 waiting for its own queue from inside an operation returns at once")
    func waitAllFromInside() throws {
        let queue = ConcurrentOperationQueue(name: "wait-inside")
        let results = Recorder<Bool>()
        let operation = ClosureOperation(name: "inside") {
            queue.waitUntilAllOperationsAreFinishedBlocking()
            results.record(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        }
        try queue.addOperation(operation)
        #expect(operation.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        #expect(results.values == [false])
    }

    @Test("A10/C21 cancelAllOperations on a suspended queue, then resume: it drains, nothing runs")
    func cancelAllThenResume() throws {
        let queue = ConcurrentOperationQueue(name: "A10")
        queue.isSuspended = true
        let runs = AtomicCounter()
        let completions = AtomicCounter()
        let operations = (0..<10).map { index in
            let operation = ClosureOperation(name: "x\(index)") { runs.increment() }
            operation.completionBlock = { completions.increment() }
            return operation
        }
        try operations[5].addDependency(operations[9])  // a pending one drains too
        try queue.addOperations(operations, waitUntilFinished: false)
        queue.cancelAllOperations()
        #expect(operations.allSatisfy { $0.isCancelled })
        #expect(operations.allSatisfy { !$0.isFinished }, "C22 not finished before the queue reaches them")
        #expect(queue.operationCount == 10)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(operations.allSatisfy { $0.isFinished })
        #expect(runs.value == 0)
        #expect(completions.value == 10)
        #expect(queue.operationCount == 0)
    }

    @Test("N addOperation(block) and addOperations(waitUntilFinished: true)")
    func convenienceAdds() throws {
        let queue = ConcurrentOperationQueue(name: "convenience")
        let ran = Latch()
        let block = queue.addOperation { ran.countDown() }
        #expect(ran.wait(timeout: operationTestTimeout))
        #expect(block.waitUntilFinishedBlocking(timeout: operationTestTimeout))
        let runs = AtomicCounter()
        let operations = (0..<8).map { index in ClosureOperation(name: "b\(index)") { runs.increment() } }
        try queue.addOperations(operations, waitUntilFinished: true)
        #expect(runs.value == 8)
        #expect(operations.allSatisfy { $0.isFinished })
    }

    @Test("N the queue releases an operation once it has finished")
    func finishedOperationsAreReleased() throws {
        let queue = ConcurrentOperationQueue(name: "release")
        let gone = Latch(count: 3)
        do {
            let a = DeallocationProbeOperation(name: "A", deallocated: gone)
            let b = DeallocationProbeOperation(name: "B", deallocated: gone)
            let c = DeallocationProbeOperation(name: "C", deallocated: gone)
            try b.addDependency(a)
            try c.addDependency(b)
            try queue.addOperations([a, b, c], waitUntilFinished: true)
        }
        #expect(gone.wait(timeout: operationTestTimeout))
        #expect(queue.operationCount == 0)
    }

    @Test("N the queue keeps its operations, and itself, alive until they have finished")
    func queueKeepsOperationsAlive() throws {
        let gate = Gate()
        let ran = Recorder<String>()
        let gone = Latch(count: 3)
        do {
            let queue = ConcurrentOperationQueue(name: "dropped")
            let a = DeallocationProbeOperation(name: "A", deallocated: gone) {
                _ = gate.wait(timeout: operationTestTimeout)
                ran.record("A")
            }
            let b = DeallocationProbeOperation(name: "B", deallocated: gone) { ran.record("B") }
            let c = DeallocationProbeOperation(name: "C", deallocated: gone) { ran.record("C") }
            try b.addDependency(a)
            try c.addDependency(b)
            try queue.addOperations([c, b, a], waitUntilFinished: false)
        }
        // Neither the queue nor its operations are referenced by the test any more.
        gate.open()
        #expect(gone.wait(timeout: operationTestTimeout))
        #expect(ran.values == ["A", "B", "C"])
    }
}
