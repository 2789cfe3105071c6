import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 13 ("Nothing waits forever"), items 2, 3, 4 and 7: groups that used to wait forever.
@Suite("Issue 13 groups never wait forever", .offThePool)
struct GroupWaitingTests {
    @Test("issue 13 item 2: a group refuses a child it cannot take, all or nothing")
    func item2GroupRefusesChildren() async throws {
        let free = ClosureProcedure<Void>(name: "free") {}
        let a = ClosureProcedure<Void>(name: "a") {}
        let b = ClosureProcedure<Void>(name: "b") {}
        try a.addDependency(b)
        try b.addDependency(a)
        let refused = caughtOperationError { _ = try GroupOperation(name: "cycle", operations: [free, a, b]) }
        #expect(refused?.code == .dependencyCycle)
        // Nothing of the batch was taken: `free` can go to another queue and runs there.
        let queue = ConcurrentOperationQueue(name: "item2")
        try queue.addOperation(free)
        #expect(await free.finishes())

        // addChildren: all or nothing too.
        let group = try GroupOperation(name: "group")
        let elsewhere = ClosureProcedure<Void>(name: "elsewhere") {}
        let holding = ConcurrentOperationQueue(name: "item2-holding")
        holding.isSuspended = true
        try holding.addOperation(elsewhere)
        let fresh = ClosureProcedure<Void>(name: "fresh") {}
        let second = caughtOperationError { try group.addChildren([fresh, elsewhere]) }
        #expect(second?.code == .enqueuedInAnotherQueue)
        #expect(group.children.isEmpty)
        try group.addChild(fresh)
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(fresh.isFinished)
        holding.isSuspended = false
        #expect(await elsewhere.finishes())
    }

    @Test("issue 13 item 3: descendants run under their group's MutuallyExclusive category")
    func item3DescendantsShareTheGroupsCategory() async throws {
        let category = "issue13-item3"
        let queue = ConcurrentOperationQueue(name: "item3")
        let meter = InFlightMeter()
        func child(_ name: String, _ condition: any OperationCondition) throws -> ClosureProcedure<Void> {
            let child = ClosureProcedure<Void>(name: name) {
                meter.enter()
                meter.leave()
            }
            try child.addCondition(condition)
            return child
        }
        let direct = try child("direct", MutuallyExclusive(category: category))
        let sibling = try child("sibling", MutuallyExclusive(category: category))
        let grandchild = try child("grandchild", AllConditions([NoFailedDependencies(), MutuallyExclusive(category: category)]))
        let inner = try GroupOperation(name: "inner", operations: [grandchild])
        try inner.addCondition(MutuallyExclusive(category: category))
        let group = try GroupOperation(name: "outer", operations: [direct, sibling, inner])
        try group.addCondition(AllConditions([MutuallyExclusive(category: category)]))
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(group.errors.isEmpty && !group.isCancelled)
        #expect(meter.peak == 1)
        // The category was given back: another procedure of it runs, on another queue.
        let other = ConcurrentOperationQueue(name: "item3-other")
        let later = try child("later", MutuallyExclusive(category: category))
        try other.addOperation(later)
        #expect(await later.finishes())
    }

    @Test("issue 13 item 4: a group waiting for its children holds no slot (exclusive holder waiting for the slot)")
    func item4ExclusiveHolderAndGroupSlot() async throws {
        let category = "issue13-item4"
        let elsewhere = ConcurrentOperationQueue(name: "item4-elsewhere")
        let queue = try ConcurrentOperationQueue(name: "item4-serial", maxConcurrentOperationCount: 1)
        let p0 = ProcedureAwaitingFinish(name: "p0")
        try p0.addCondition(MutuallyExclusive(category: category))
        try elsewhere.addOperation(p0)
        #expect(await p0.executing.opens())
        let p1 = ClosureProcedure<Void>(name: "p1") {}
        try p1.addCondition(MutuallyExclusive(category: category))
        let child = ClosureProcedure<Void>(name: "child") {}
        try child.addCondition(MutuallyExclusive(category: category))
        let childAsked = Latch()
        try child.addCondition(ClosureCondition { _ in
            childAsked.countDown()
            return .satisfied
        })
        let group = try GroupOperation(name: "g", operations: [child])
        // Serial and FIFO: p1 asks for the category (and waits) before the group executes.
        try queue.addOperations([p1, group], waitUntilFinished: false)
        #expect(await childAsked.opens())
        p0.finish()
        #expect(await p1.finishes())
        #expect(await group.finishes())
        #expect(child.isFinished && !child.isCancelled)
    }

    @Test("issue 13 item 4: a group waiting for its children holds no slot (child depends on work queued behind the group)")
    func item4ChildDependsOnWorkBehindTheGroup() async throws {
        let queue = try ConcurrentOperationQueue(name: "item4-serial-b", maxConcurrentOperationCount: 1)
        let behind = ClosureOperation(name: "behind") {}
        let child = ClosureProcedure<Void>(name: "child") {}
        try child.addDependency(behind)
        let inner = try GroupOperation(name: "inner", operations: [child])
        let group = try GroupOperation(name: "g", operations: [inner])
        try group.setMaxConcurrentOperationCount(1)
        try queue.addOperations([group, behind], waitUntilFinished: false)
        #expect(await group.finishes())
        #expect(behind.isFinished && child.isFinished)
        #expect(await queue.empties())
    }

    @Test("issue 13 items 3 and 4: a retry's attempts share its category, and a waiting retry holds no slot")
    func items3And4Retry() async throws {
        let category = "issue13-retry"
        let elsewhere = ConcurrentOperationQueue(name: "retry-elsewhere")
        let queue = try ConcurrentOperationQueue(name: "retry-serial", maxConcurrentOperationCount: 1)
        let p0 = ProcedureAwaitingFinish(name: "p0")
        try p0.addCondition(MutuallyExclusive(category: category))
        try elsewhere.addOperation(p0)
        #expect(await p0.executing.opens())
        let p1 = ClosureProcedure<Void>(name: "p1") {}
        try p1.addCondition(MutuallyExclusive(category: category))
        let attemptAsked = Latch()
        let retry = RetryOperation<Int>(name: "retry", maxAttempts: 2) { attempt in
            let procedure = ClosureProcedure<Int>(name: "attempt\(attempt)") {
                if attempt == 1 { throw ProcedureTestError(attempt) }
                return attempt
            }
            try? procedure.addCondition(MutuallyExclusive(category: category))
            try? procedure.addCondition(ClosureCondition { _ in
                attemptAsked.countDown()
                return .satisfied
            })
            return procedure
        }
        try retry.addCondition(MutuallyExclusive(category: "\(category)-own"))
        let holder = ClosureProcedure<Void>(name: "holder") {}
        try holder.addCondition(MutuallyExclusive(category: "\(category)-own"))
        // The retry takes the slot after p1 asked for the category; its attempt waits behind p1.
        try queue.addOperations([p1, retry], waitUntilFinished: false)
        #expect(await attemptAsked.opens())
        p0.finish()
        #expect(await p1.finishes())
        #expect(await retry.finishes())
        #expect(retry.output == 2)

        // A retry holding a category its attempts also have.
        let shared = RetryOperation<Int>(name: "shared", maxAttempts: 2) { attempt in
            let procedure = ClosureProcedure<Int>(name: "shared\(attempt)") {
                if attempt == 1 { throw ProcedureTestError(attempt) }
                return attempt
            }
            try? procedure.addCondition(MutuallyExclusive(category: category))
            return procedure
        }
        try shared.addCondition(MutuallyExclusive(category: category))
        try queue.addOperation(shared)
        #expect(await shared.finishes())
        #expect(shared.output == 2)
        try queue.addOperation(holder)
        #expect(await holder.finishes())
    }

    @Test("issue 13 item 7: a group resumed while its cancel runs does not stay suspended")
    func item7ResumeDuringCancel() async throws {
        let queue = ConcurrentOperationQueue(name: "item7-resume")
        let child = ClosureProcedure<Void>(name: "child") {}
        let group = try GroupOperation(name: "g", operations: [child])
        try child.addObserver(ClosureObserver(didCancel: { [unowned group] _, _ in group.isSuspended = false }))
        group.isSuspended = true
        try queue.addOperation(group)
        #expect(await eventually { group.isExecuting })
        group.cancel()
        // The group's did cancel (which cancels the child, whose observer resumes the group) is
        // told on this thread, or, while another thread is still telling the group's or the
        // child's events, by that thread right after (see `cancel(with:)`): so wait for it.
        #expect(await eventually { !group.isSuspended })
        #expect(await group.finishes())
        #expect(child.isCancelled && child.isFinished)
    }

    /// What a child produces goes to the group's queue, as a child of the group: once the group
    /// is cancelled it is cancelled as it comes, like a child added then.
    @Test("an operation a child produces after its group was cancelled is cancelled, and never runs")
    func producedAfterTheGroupsCancel() async throws {
        let queue = ConcurrentOperationQueue(name: "produced-after-cancel")
        let ran = AtomicCounter()
        let go = Gate()
        let produced = ClosureOperation(name: "produced") { ran.increment() }
        // Work that does not stop at the cancel: it produces once the test lets it go on.
        let producer = ClosureProcedure<Void>(name: "producer", asynchronous: { procedure in
            procedureTestLaterQueue.async {
                _ = go.wait()
                try? procedure.produce(produced)
                procedure.finish()
            }
        })
        let group = try GroupOperation(name: "produced-after-cancel", operations: [producer])
        try queue.addOperation(group)
        #expect(await eventually { producer.isExecuting })
        group.cancel()
        go.open()
        #expect(await group.finishes())
        #expect(produced.isFinished && produced.isCancelled)
        #expect(ran.value == 0)
    }

    /// Regression: a produce that had begun (its procedure was executing, the group not cancelled)
    /// added the operation after the group's cancel had cancelled what its queue held, so the
    /// operation ran. The producer's will-add observer runs in exactly that window.
    @Test("an operation a child produces while its group is being cancelled is cancelled, and never runs")
    func producedWhileTheGroupIsCancelled() async throws {
        let queue = ConcurrentOperationQueue(name: "produced-while-cancelled")
        let ran = AtomicCounter()
        let groups = Recorder<GroupOperation>()
        let produced = ClosureOperation(name: "produced") { ran.increment() }
        let producer = ClosureProcedure<Void>(name: "producer", asynchronous: { procedure in
            try? procedure.produce(produced)
            procedure.finish()
        })
        try producer.addObserver(ClosureObserver(willAdd: { _, _ in groups.values.first?.cancel() }))
        let group = try GroupOperation(name: "produced-while-cancelled", operations: [producer])
        groups.record(group)
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(group.isCancelled)
        #expect(produced.isFinished && produced.isCancelled)
        #expect(ran.value == 0)
    }

    @Test("issue 13 item 7: a child added while its group is cancelled never runs")
    func item7AddChildRacingCancel() async throws {
        let iterations = 5_000
        let (ran, completed) = await withCheckedContinuation { (continuation: CheckedContinuation<(Int, Int), Never>) in
            onThreadOfItsOwn {
                let queue = ConcurrentOperationQueue(name: "item7-race")
                let ran = AtomicCounter()
                var completed = 0
                for index in 0..<iterations {
                    let group: GroupOperation
                    do { group = try GroupOperation(name: "g\(index)") } catch { break }
                    let child = ClosureOperation(name: "child\(index)") { ran.increment() }
                    let gate = Gate()
                    let done = Latch(count: 2)
                    DispatchQueue.global().async {
                        _ = gate.wait()
                        try? group.addChild(child)
                        done.countDown()
                    }
                    DispatchQueue.global().async {
                        _ = gate.wait()
                        group.cancel()
                        done.countDown()
                    }
                    gate.open()
                    guard done.wait(timeout: procedureTimeout) else { break }
                    do { try queue.addOperation(group) } catch { break }
                    guard group.waitUntilFinishedBlocking(timeout: procedureTimeout) else { break }
                    completed += 1
                }
                continuation.resume(returning: (ran.value, completed))
            }
        }
        #expect(completed == iterations)
        #expect(ran == 0)
    }
}
