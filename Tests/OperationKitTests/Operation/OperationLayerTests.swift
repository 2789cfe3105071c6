import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// `OperationLayer`: one dependency that stands for every operation of a set (issue 17). Every wait
/// is bounded; members that must be held back are `HeldOperation`s (executing, holding no thread)
/// that the test finishes, never a sleep or a blocked worker thread.
@Suite("OperationLayer: depending on every operation of a set", .offThePool)
struct OperationLayerTests {
    /// Finishes held members once each has started (bounded waits).
    private func release(_ members: [HeldOperation]) async {
        for member in members {
            #expect(await opened(member.started))
            member.finish()
        }
    }

    @Test("dependents wait until every member has finished")
    func dependentsWaitForAllMembers() async throws {
        let queue = ConcurrentOperationQueue(name: "layer")
        let members = (0..<4).map { HeldOperation(name: "m\($0)") }
        let sawAllFinished = Locked<[Bool]>([])
        let dependents = (0..<3).map { index in
            ClosureOperation(name: "d\(index)") {
                let all = members.allSatisfy(\.isFinished)
                sawAllFinished.withLock { $0.append(all) }
            }
        }
        let layer = OperationLayer(members, name: "L")
        #expect(layer.memberCount == 4)
        #expect(layer.isExecuting && !layer.isFinished && !layer.isReady)
        #expect(layer.dependencies.count == 4)
        for dependent in dependents { try dependent.addDependency(layer) }
        try queue.addOperations(members + dependents, waitUntilFinished: false)
        #expect(dependents.allSatisfy { !$0.isFinished })
        await release(members)
        for dependent in dependents { try await dependent.finished(within: operationTestTimeout) }
        #expect(sawAllFinished.withLock { $0 } == [true, true, true])
        #expect(layer.isFinished)
        #expect(layer.dependencies.isEmpty, "a finished layer releases its members")
        #expect(layer.unfinishedMembers.isEmpty)
    }

    @Test("members added to a queue after the layer was made are waited for")
    func membersEnqueuedLater() async throws {
        let queue = ConcurrentOperationQueue(name: "later")
        let ran = Locked<[String]>([])
        let members = (0..<3).map { index in ClosureOperation(name: "m\(index)") { ran.withLock { $0.append("m") } } }
        let layer = OperationLayer(members)
        let dependent = ClosureOperation(name: "d") { ran.withLock { $0.append("d") } }
        try dependent.addDependency(layer)
        try queue.addOperation(dependent)
        #expect(layer.unfinishedMembers.count == 3)
        try queue.addOperations(members, waitUntilFinished: false)
        try await dependent.finished(within: operationTestTimeout)
        #expect(ran.withLock { $0 } == ["m", "m", "m", "d"])
    }

    @Test("a cancelled member and a failed procedure count as finished")
    func cancelledAndFailedMembers() async throws {
        struct Failure: Error {}
        let queue = ConcurrentOperationQueue(name: "outcomes")
        queue.isSuspended = true
        let cancelled = ClosureOperation(name: "cancelled") {}
        let failing = ClosureProcedure<Void>(name: "failing") { throw Failure() }
        let plain = ClosureOperation(name: "plain") {}
        let layer = OperationLayer([cancelled, failing, plain])
        let dependent = ClosureOperation(name: "d") {}
        try dependent.addDependency(layer)
        try queue.addOperations([cancelled, failing, plain, dependent], waitUntilFinished: false)
        cancelled.cancel()
        queue.isSuspended = false
        try await dependent.finished(within: operationTestTimeout)
        #expect(cancelled.isCancelled && cancelled.isFinished)
        #expect(failing.isFinished && !failing.errors.isEmpty)
        #expect(layer.isFinished && !layer.isCancelled)
        #expect(!dependent.isCancelled)
    }

    @Test("an empty layer, or one whose members have finished, finishes in its initialiser")
    func emptyAndAlreadyFinished() async throws {
        let empty = OperationLayer([ConcurrentOperation](), name: "empty")
        #expect(empty.isFinished && !empty.isExecuting && empty.memberCount == 0)
        let done = ClosureOperation {}
        try done.start()
        let late = OperationLayer([done])
        #expect(late.isFinished)
        let queue = ConcurrentOperationQueue(name: "empty")
        let dependent = ClosureOperation(name: "d") {}
        try dependent.addDependency(empty)
        try dependent.addDependency(late)
        try queue.addOperation(dependent)
        try await dependent.finished(within: operationTestTimeout)
    }

    @Test("a member that would wait for a dependent of its layer is a cycle, when it is added to a queue")
    func cycleThroughLayerOnAdd() async throws {
        let queue = ConcurrentOperationQueue(name: "cycle")
        queue.isSuspended = true
        let member = ClosureOperation(name: "member") {}
        let layer = OperationLayer([member], name: "L")
        let dependent = ClosureOperation(name: "dependent") {}
        try dependent.addDependency(layer)
        try queue.addOperation(dependent)
        try member.addDependency(dependent)  // recorded; checked when the member is added
        let error = #expect(throws: OperationError.self) { try queue.addOperation(member) }
        #expect(error?.code == .dependencyCycle)
        #expect(error?.operationNames.contains("L") == true)
        // Nothing is left waiting forever: break the cycle and everything finishes.
        member.removeDependency(dependent)
        try queue.addOperation(member)
        queue.isSuspended = false
        try await dependent.finished(within: operationTestTimeout)
        #expect(layer.isFinished && member.isFinished)
    }

    @Test("a member already in a queue that would wait for a dependent of its layer is a cycle")
    func cycleThroughLayerWhileEnqueued() async throws {
        let queue = ConcurrentOperationQueue(name: "cycle-enqueued")
        queue.isSuspended = true
        let member = ClosureOperation(name: "member") {}
        try queue.addOperation(member)
        let inner = OperationLayer([member], name: "inner")
        let outer = OperationLayer([inner], name: "outer")
        let dependent = ClosureOperation(name: "dependent") {}
        try dependent.addDependency(outer)
        try queue.addOperation(dependent)
        let error = #expect(throws: OperationError.self) { try member.addDependency(dependent) }
        #expect(error?.code == .dependencyCycle)
        #expect(member.dependencies.isEmpty, "a refused edge leaves nothing behind")
        queue.isSuspended = false
        try await dependent.finished(within: operationTestTimeout)
        #expect(inner.isFinished && outer.isFinished)
    }

    @Test("members on two queues, dependents on a third")
    func membersOnTwoQueues() async throws {
        let first = ConcurrentOperationQueue(name: "first")
        let second = ConcurrentOperationQueue(name: "second")
        let third = ConcurrentOperationQueue(name: "third")
        let left = (0..<3).map { HeldOperation(name: "left\($0)") }
        let right = (0..<3).map { index in ClosureOperation(name: "right\(index)") {} }
        let layer = OperationLayer(left + right)
        let dependents = (0..<5).map { index in ClosureOperation(name: "d\(index)") {} }
        for dependent in dependents { try dependent.addDependency(layer) }
        try third.addOperations(dependents, waitUntilFinished: false)
        try first.addOperations(left, waitUntilFinished: false)
        try second.addOperations(right, waitUntilFinished: false)
        #expect(await second.finished(within: operationTestTimeout))
        #expect(!layer.isFinished)
        #expect(Set(layer.unfinishedMembers.map(\.displayName)) == Set(left.map(\.displayName)))
        await release(left)
        for dependent in dependents { try await dependent.finished(within: operationTestTimeout) }
        #expect(layer.isFinished)
    }

    @Test("adding a dependency on a layer to an operation already in a queue")
    func dependencyAddedWhileEnqueued() async throws {
        let queue = ConcurrentOperationQueue(name: "enqueued")
        queue.isSuspended = true
        let member = HeldOperation(name: "member")
        let memberQueue = ConcurrentOperationQueue(name: "members")
        try memberQueue.addOperation(member)
        let layer = OperationLayer([member])
        let dependent = ClosureOperation(name: "dependent") {}
        try queue.addOperation(dependent)
        try dependent.addDependency(layer)
        queue.isSuspended = false
        #expect(!dependent.isFinished)
        let snapshot = queue.snapshot()
        #expect(snapshot.operation(named: "dependent")?.state == .pending)
        await release([member])
        try await dependent.finished(within: operationTestTimeout)
    }

    @Test("a snapshot explains a dependent waiting for a layer by its unfinished members")
    func snapshotNamesUnfinishedMembers() async throws {
        let members = ConcurrentOperationQueue(name: "members")
        let queue = ConcurrentOperationQueue(name: "dependents")
        let slow = HeldOperation(name: "slow")
        let quick = ClosureOperation(name: "quick") {}
        let layer = OperationLayer([slow, quick], name: "stage 1")
        let dependent = ClosureOperation(name: "dependent") {}
        try dependent.addDependency(layer)
        try queue.addOperation(dependent)
        try members.addOperations([slow, quick], waitUntilFinished: false)
        try await quick.finished(within: operationTestTimeout)
        let entry = try #require(queue.snapshot().operation(named: "dependent"))
        #expect(entry.dependencies.map(\.name) == ["stage 1"])
        #expect(entry.blockers.contains(.layer(
            OperationReference(id: ObjectIdentifier(layer), name: "stage 1"),
            unfinishedMembers: [OperationReference(id: ObjectIdentifier(slow), name: "slow")])))
        #expect(entry.blockers.map(\.description).contains("layer stage 1 waits for: slow"))
        await release([slow])
        try await dependent.finished(within: operationTestTimeout)
    }

    @Test("the stall watchdog's report names the unfinished members a dependent waits for")
    func watchdogNamesUnfinishedMembers() async throws {
        let members = ConcurrentOperationQueue(name: "members")
        let queue = ConcurrentOperationQueue(name: "dependents")
        let slow = HeldOperation(name: "slow")
        let layer = OperationLayer([slow], name: "stage")
        let dependent = ClosureOperation(name: "dependent") {}
        try dependent.addDependency(layer)
        try queue.addOperation(dependent)
        try members.addOperation(slow)
        let reports = Recorder<StallReport>()
        let reported = Latch(count: 1)
        let configuration = StallWatchdogConfiguration(progressTimeout: .milliseconds(10), reportsWaitForCycles: false)
        queue.startStallWatchdog(configuration) {
            reports.record($0)
            reported.countDown()
        }
        #expect(await reported.opened(within: operationTestTimeout))
        queue.stopStallWatchdog()
        let report = try #require(reports.values.first)
        #expect(report.description.contains("layer stage waits for: slow"))
        await release([slow])
        try await dependent.finished(within: operationTestTimeout)
    }

    @Test("cancelling a layer releases its dependents at once and leaves its members alone")
    func cancellingTheLayer() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel")
        let member = HeldOperation(name: "member")
        let layer = OperationLayer([member])
        let completions = Atomic<Int>(0)
        layer.completionBlock = { completions.add(1, ordering: .relaxed) }
        let dependent = ClosureOperation(name: "dependent") {}
        try dependent.addDependency(layer)
        try queue.addOperations([member, dependent], waitUntilFinished: false)
        layer.cancel()
        try await dependent.finished(within: operationTestTimeout)
        #expect(layer.isCancelled && layer.isFinished)
        #expect(!member.isCancelled && !member.isFinished)
        layer.cancel()  // twice: nothing more
        await release([member])
        try await member.finished(within: operationTestTimeout)
        #expect(completions.load(ordering: .relaxed) == 1)
    }

    @Test("a layer is not added, started, finished or rewired by hand; each refusal is typed")
    func misuseIsRefused() throws {
        let member = ClosureOperation(name: "member") {}
        let other = ClosureOperation(name: "other") {}
        let layer = OperationLayer([member], name: "L")
        let queue = ConcurrentOperationQueue(name: "misuse")
        let added = #expect(throws: OperationError.self) { try queue.addOperation(layer) }
        #expect(added?.code == .alreadyStarted)
        let started = #expect(throws: OperationError.self) { try layer.start() }
        #expect(started?.code == .alreadyStarted)
        let rewired = #expect(throws: OperationError.self) { try layer.addDependency(other) }
        #expect(rewired?.code == .dependentAlreadyExecuting)
        #expect(layer.finish() == false)
        layer.removeDependency(member)
        #expect(layer.dependencies.count == 1, "members are fixed")
        #expect(!layer.isFinished)
        try member.start()
        #expect(layer.isFinished, "the member finished by hand, on this thread, finishes its layer")
        let again = #expect(throws: OperationError.self) { try layer.start() }
        #expect(again?.code == .alreadyFinished)
    }

    @Test("a layer nobody holds still releases its dependents, then goes away")
    func unheldLayer() async throws {
        let queue = ConcurrentOperationQueue(name: "unheld")
        queue.isSuspended = true
        weak var weakLayer: OperationLayer?
        let members = (0..<3).map { index in ClosureOperation(name: "m\(index)") {} }
        let dependent = ClosureOperation(name: "d") {}
        do {
            let layer = OperationLayer(members)
            weakLayer = layer
            try dependent.addDependency(layer)
        }
        try queue.addOperations(members + [dependent], waitUntilFinished: false)
        queue.isSuspended = false
        try await dependent.finished(within: operationTestTimeout)
        #expect(await queue.finished(within: operationTestTimeout))
        #expect(weakLayer == nil)
    }

    @Test("exactly once: many members finishing at once complete the layer once; each dependent runs once")
    func exactlyOnce() async throws {
        for round in 0..<20 {
            let queue = ConcurrentOperationQueue(name: "round \(round)")
            let ran = Atomic<Int>(0)
            let members = (0..<64).map { _ in ClosureOperation { ran.add(1, ordering: .relaxed) } }
            try queue.addOperations(members, waitUntilFinished: false)
            // Made while members finish: some are counted as finished, the others release it.
            let layer = OperationLayer(members)
            let completions = Atomic<Int>(0)
            layer.completionBlock = { completions.add(1, ordering: .relaxed) }
            let dependentRuns = Atomic<Int>(0)
            let dependents = (0..<16).map { _ in
                ClosureOperation {
                    if ran.load(ordering: .relaxed) != 64 { Issue.record("a dependent ran before every member") }
                    dependentRuns.add(1, ordering: .relaxed)
                }
            }
            for dependent in dependents { try dependent.addDependency(layer) }
            try queue.addOperations(dependents, waitUntilFinished: false)
            #expect(await queue.finished(within: operationTestTimeout))
            try await layer.finished(within: operationTestTimeout)
            #expect(dependentRuns.load(ordering: .relaxed) == 16)
            // The completion block may be set after the layer finished; then it never runs.
            #expect(completions.load(ordering: .relaxed) <= 1)
        }
    }

    @Test("layers of layers: S4 in small, written with one layer per stage")
    func layeredStages() async throws {
        let queue = ConcurrentOperationQueue(name: "stages")
        let finishedPerStage = Locked([Int](repeating: 0, count: 10))
        var previous: OperationLayer?
        var all: [OperationLayer] = []
        for stage in 0..<10 {
            let members = (0..<10).map { _ in
                ClosureOperation {
                    finishedPerStage.withLock { counts in
                        if stage > 0 && counts[stage - 1] != 10 {
                            Issue.record("stage \(stage) ran before stage \(stage - 1) had finished")
                        }
                        counts[stage] += 1
                    }
                }
            }
            if let previous {
                for member in members { try member.addDependency(previous) }
            }
            try queue.addOperations(members, waitUntilFinished: false)
            let layer = OperationLayer(members)
            all.append(layer)
            previous = layer
        }
        let everything = OperationLayer(all, name: "everything")
        try await everything.finished(within: operationTestTimeout)
        #expect(finishedPerStage.withLock { $0 } == [Int](repeating: 10, count: 10))
    }
}

extension ConcurrentOperationQueue {
    /// Whether the queue emptied within `timeout`, waited for without blocking the task's thread
    /// for longer than the wait.
    fileprivate func finished(within timeout: Duration) async -> Bool {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: self.waitUntilAllOperationsAreFinishedBlocking(timeout: timeout))
            }
        }
    }
}
