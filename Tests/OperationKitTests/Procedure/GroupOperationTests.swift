import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// J77, C34: GroupOperation — children on a queue of the group's own, which finishes after them
/// and what they produce, collects their errors, honours its concurrency limit and cancellation.
@Suite("J77/C34 GroupOperation", .offThePool)
struct GroupOperationTests {
    @Test("J77 the group finishes only after its children and the operations they produced")
    func finishesAfterChildrenAndProduced() async throws {
        let queue = ConcurrentOperationQueue(name: "J77")
        let order = Recorder<String>()
        let produced = ProcedureAwaitingFinish(name: "produced")
        let plain = ClosureProcedure<Void>(name: "plain") { order.record("plain") }
        let producer = ClosureProcedure<Void>(name: "producer", asynchronous: { procedure in
            do { try procedure.produce(produced) } catch { order.record("produce failed: \(error)") }
            procedure.finish()
        })
        let group = try GroupOperation(name: "J77", operations: [plain, producer])
        group.completionBlock = { order.record("group") }
        try queue.addOperation(group)
        #expect(await producer.finishes())
        #expect(await plain.finishes())
        #expect(await produced.executing.opens())
        #expect(!group.isFinished)
        #expect(await eventually { group.children.map(\.displayName) == ["produced"] })
        order.record("produced finishes")
        produced.finish()
        #expect(await group.finishes())
        #expect(order.values == ["plain", "produced finishes", "group"])
        #expect(group.errors.isEmpty)
        #expect(group.children.isEmpty)
    }

    @Test("J77 the group's errors are its children's errors")
    func collectsChildErrors() async throws {
        let queue = ConcurrentOperationQueue(name: "J77-errors")
        let group = try GroupOperation(name: "errors", operations: [
            ClosureProcedure<Void>(name: "ok") {},
            ClosureProcedure<Void>(name: "one") { throw ProcedureTestError(1) },
            ClosureProcedure<Void>(name: "two", asynchronous: {
                $0.finish(withErrors: [ProcedureTestError(2), ProcedureTestError(3)])
            }),
            ClosureOperation(name: "plain operation") {},
        ])
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(Set(errorIDs(group.errors)) == [1, 2, 3])
        #expect(group.errors.count == 3)
        #expect(Set(errorIDs(group.childErrorsSoFar)) == [1, 2, 3])
        #expect(group.isFailed && !group.isCancelled)
    }

    @Test("J77 with maxConcurrentOperationCount 1, never two children at once")
    func serialChildren() async throws {
        let queue = ConcurrentOperationQueue(name: "J77-serial")
        let meter = InFlightMeter()
        let children = (0..<6).map { index in
            ClosureProcedure<Void>(name: "child\(index)", asynchronous: { procedure in
                meter.enter()
                procedureTestLaterQueue.asyncAfter(deadline: .now() + .milliseconds(2)) {
                    meter.leave()
                    procedure.finish()
                }
            })
        }
        let group = try GroupOperation(name: "serial", operations: children)
        try group.setMaxConcurrentOperationCount(1)
        #expect(group.maxConcurrentOperationCount == 1)
        let refused = caughtOperationError { try group.setMaxConcurrentOperationCount(0) }
        #expect(refused?.code == .invalidMaxConcurrentOperationCount)
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(meter.peak == 1)
        #expect(children.allSatisfy { $0.isFinished })
    }

    @Test("children wait until the group executes")
    func childrenWaitForTheGroup() async throws {
        let queue = suspendedProcedureQueue("children-wait")
        let ran = AtomicCounter()
        let group = try GroupOperation(name: "waiting", operations: [ClosureOperation { ran.increment() }])
        try group.addChild(ClosureOperation { ran.increment() })
        try queue.addOperation(group)
        #expect(group.children.count == 2)
        #expect(ran.value == 0)
        queue.isSuspended = false
        #expect(await group.finishes())
        #expect(ran.value == 2)
    }

    @Test("a child added while the group executes is waited for; addChild after the group finished throws")
    func addChildLateAndAfterFinish() async throws {
        let queue = ConcurrentOperationQueue(name: "add-child")
        let late = ProcedureAwaitingFinish(name: "late")
        let group = try GroupOperation(name: "add-child")
        let first = ClosureProcedure<Void>(name: "first", asynchronous: { procedure in
            do { try group.addChild(late) } catch { procedure.finish(with: error); return }
            procedure.finish()
        })
        try group.addChild(first)
        try queue.addOperation(group)
        #expect(await late.executing.opens())
        #expect(await first.finishes())
        #expect(!group.isFinished)
        late.finish()
        #expect(await group.finishes())
        #expect(group.errors.isEmpty)
        let refused = caughtOperationError { try group.addChild(ClosureOperation {}) }
        #expect(refused?.code == .alreadyFinished)
        #expect(caughtOperationError { try group.addChildren([ClosureOperation {}]) }?.code == .alreadyFinished)
    }

    @Test("C34 a group cancelled before it executes: children never run, their completion blocks fire, it finishes")
    func cancelledBeforeExecuting() async throws {
        let queue = suspendedProcedureQueue("C34")
        let ran = AtomicCounter()
        let completions = Latch(count: 3)
        let children: [ConcurrentOperation] = [
            ClosureOperation(name: "a") { ran.increment() },
            ClosureProcedure<Void>(name: "b") { ran.increment() },
            ClosureProcedure<Void>(name: "c") { ran.increment() },
        ]
        for child in children { child.completionBlock = { completions.countDown() } }
        let group = try GroupOperation(name: "C34", operations: children)
        let log = ProcedureEventLog()
        try group.addObserver(log.observer)
        try queue.addOperation(group)
        group.cancel()
        #expect(await completions.opens(), "the children's completion blocks fire")
        queue.isSuspended = false
        #expect(await log.finishes())
        #expect(ran.value == 0)
        #expect(children.allSatisfy { $0.isCancelled && $0.isFinished })
        #expect(group.isCancelled && group.errors.isEmpty)
        #expect(log.events == ["didAttach", "didCancel", "willFinish", "didFinish"])
    }

    @Test("cancelling an executing group cancels its children; it finishes once they have")
    func cancelledWhileExecuting() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-executing")
        let running = ProcedureAwaitingFinish(name: "running", finishesWhenTold: true)
        let waiting = ProcedureCountingHooks(name: "waiting")
        let group = try GroupOperation(name: "cancel-executing", operations: [running, waiting])
        try group.setMaxConcurrentOperationCount(1)
        try queue.addOperation(group)
        #expect(await running.executing.opens())
        group.cancel(with: ProcedureTestError(9))
        #expect(await group.finishes())
        #expect(running.isCancelled && running.cancelHookCalls.value == 1)
        #expect(waiting.isCancelled && waiting.willExecuteCalls.value == 0)
        #expect(group.isCancelled)
        #expect(errorIDs(group.errors) == [9])
    }

    @Test("a suspended group holds back its children after it starts executing")
    func suspendedGroup() async throws {
        let queue = ConcurrentOperationQueue(name: "suspended-group")
        let ran = AtomicCounter()
        let group = try GroupOperation(name: "suspended", operations: [ClosureOperation { ran.increment() }])
        group.isSuspended = true
        #expect(group.isSuspended)
        let executed = Latch()
        try group.addObserver(ClosureObserver(didExecute: { _ in executed.countDown() }))
        try queue.addOperation(group)
        #expect(await executed.opens())
        #expect(group.isSuspended && !group.isFinished)
        #expect(ran.value == 0)
        group.isSuspended = false
        #expect(await group.finishes())
        #expect(ran.value == 1)
    }

    @Test("an empty group finishes at once when it executes")
    func emptyGroup() async throws {
        let queue = ConcurrentOperationQueue(name: "empty-group")
        let group = try GroupOperation(name: "empty")
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(group.errors.isEmpty && !group.isCancelled)
    }
}
