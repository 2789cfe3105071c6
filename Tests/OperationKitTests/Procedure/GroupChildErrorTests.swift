// Tests of GroupOperation's child-error hooks: transformChildErrors and child(_:didFinishWithErrors:)
// — transform, ignore, exactly once per child, failing, cancelled, produced and nested children.

import OperationKit
import OperationKitTestSupport
import Testing

/// A group that records each child its hook sees (by name, with its error ids) and keeps only
/// the errors `keep` accepts.
final class ErrorFilteringGroup: GroupOperation, @unchecked Sendable {
    // No mutable state of its own: the recorder synchronises itself, `keep` is immutable.
    let seen = Recorder<String>()
    private let keep: @Sendable (any Error) -> Bool

    init(name: String, children: [ConcurrentOperation], keep: @escaping @Sendable (any Error) -> Bool = { _ in true }) throws {
        self.keep = keep
        try super.init(name: name, operations: children)
    }

    override func child(_ child: ConcurrentOperation, didFinishWithErrors errors: [any Error]) -> [any Error] {
        #expect(child.isFinished)
        #expect(!isFinished)
        seen.record("\(child.displayName)\(errorIDs(errors))")
        return errors.filter(keep)
    }
}

@Suite("Group child errors", .offThePool)
struct GroupChildErrorTests {
    func failing(_ name: String, _ id: Int) -> ClosureProcedure<Void> {
        ClosureProcedure(name: name) { throw ProcedureTestError(id) }
    }

    @Test("the transform closure replaces a child's errors before they are collected")
    func transform() async throws {
        let queue = ConcurrentOperationQueue(name: "transform")
        let group = try GroupOperation(name: "g", operations: [failing("a", 1), failing("b", 2)])
        group.transformChildErrors = { child, errors in
            errors.map { ProcedureTestError(100 + (($0 as? ProcedureTestError)?.id ?? 0)) }
        }
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(errorIDs(group.errors).sorted() == [101, 102])
    }

    @Test("returning [] ignores a child's errors: the group does not fail for them")
    func ignore() async throws {
        let queue = ConcurrentOperationQueue(name: "ignore")
        let group = try ErrorFilteringGroup(name: "g", children: [failing("a", 1), failing("b", 2)]) {
            ($0 as? ProcedureTestError)?.id != 1
        }
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(errorIDs(group.errors) == [2])
        let none = try GroupOperation(name: "none", operations: [failing("c", 3)])
        none.transformChildErrors = { _, _ in [] }
        try queue.addOperation(none)
        #expect(await none.finishes())
        #expect(none.errors.isEmpty)
        #expect(none.childErrorsSoFar.isEmpty)
    }

    @Test("the closure runs first, the subclass hook sees what it returned")
    func closureThenHook() async throws {
        let queue = ConcurrentOperationQueue(name: "order")
        let group = try ErrorFilteringGroup(name: "g", children: [failing("a", 1)])
        group.transformChildErrors = { _, errors in errors + [ProcedureTestError(50)] }
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(group.seen.values == ["a[1, 50]"])
        #expect(errorIDs(group.errors) == [1, 50])
    }

    @Test("exactly once per child: succeeded, failed, cancelled, plain, produced and nested children")
    func oncePerChild() async throws {
        let queue = ConcurrentOperationQueue(name: "once")
        let inner = try ErrorFilteringGroup(name: "inner", children: [failing("inner-a", 10), failing("inner-b", 11)]) {
            ($0 as? ProcedureTestError)?.id != 10
        }
        let cancelled = failing("cancelled", 20)
        cancelled.cancel(with: ProcedureTestError(21))
        let producer = ProcedureCountingHooks(name: "producer") { procedure in
            try? procedure.produce(ClosureProcedure<Void>(name: "produced") { throw ProcedureTestError(30) })
            procedure.finish()
        }
        let group = try ErrorFilteringGroup(name: "outer", children: [
            ClosureProcedure<Void>(name: "ok") {}, failing("fails", 1), cancelled,
            ClosureOperation(name: "plain") {}, producer, inner,
        ])
        try queue.addOperation(group)
        #expect(await group.finishes())
        let seen = group.seen.values
        #expect(seen.count == 7)
        #expect(Set(seen) == ["ok[]", "fails[1]", "cancelled[21]", "plain[]", "producer[]", "produced[30]", "inner[11]"])
        #expect(inner.seen.values.count == 2)
        #expect(Set(inner.seen.values) == ["inner-a[10]", "inner-b[11]"])
        #expect(errorIDs(group.errors).sorted() == [1, 11, 21, 30])
    }

    @Test("the group does not finish before the hook returns; the hook runs on the thread that finished the child")
    func finishWaitsForHook() async throws {
        let queue = ConcurrentOperationQueue(name: "waits")
        let entered = Latch()
        let release = Gate()
        let group = try GroupOperation(name: "g", operations: [failing("a", 1)])
        group.transformChildErrors = { _, errors in
            entered.countDown()
            _ = release.wait(timeout: procedureTimeout)
            return errors
        }
        try queue.addOperation(group)
        #expect(await entered.opens())
        #expect(!group.isFinished)
        #expect(group.childErrorsSoFar.isEmpty)
        release.open()
        #expect(await group.finishes())
        #expect(errorIDs(group.errors) == [1])
    }

    @Test("a hook may add a child: the group waits for it, and it goes through the hook too")
    func hookAddsChild() async throws {
        let queue = ConcurrentOperationQueue(name: "hook-adds")
        let seen = Recorder<String>()
        let added = AtomicCounter()
        let group = try GroupOperation(name: "g", operations: [failing("first", 1)])
        group.transformChildErrors = { [unowned group] child, errors in
            seen.record(child.displayName)
            if added.increment() == 1 { try? group.addChild(ClosureProcedure<Void>(name: "second") { throw ProcedureTestError(2) }) }
            return errors
        }
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(seen.values == ["first", "second"])
        #expect(errorIDs(group.errors) == [1, 2])
    }

    @Test("a group cancelled before it executes still passes its cancelled children through the hook")
    func cancelledGroup() async throws {
        let queue = ConcurrentOperationQueue(name: "cancelled-group")
        let group = try ErrorFilteringGroup(name: "g", children: [failing("a", 1), ClosureOperation(name: "b") {}])
        group.cancel(with: ProcedureTestError(9))
        try queue.addOperation(group)
        #expect(await group.finishes())
        #expect(Set(group.seen.values) == ["a[]", "b[]"])
        #expect(errorIDs(group.errors) == [9])
    }

    @Test("cancelled while its children run: each cancelled child goes through the hook once")
    func cancelledWhileRunning() async throws {
        let queue = ConcurrentOperationQueue(name: "cancel-while")
        let child = ProcedureAwaitingFinish(name: "slow", finishesWhenTold: true)
        let group = try ErrorFilteringGroup(name: "g", children: [child])
        try queue.addOperation(group)
        #expect(await child.executing.opens())
        group.cancel()
        #expect(await group.finishes())
        #expect(group.seen.values == ["slow[]"])
        #expect(group.isCancelled)
    }
}
