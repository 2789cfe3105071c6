@testable import OperationKit
import OperationKitTestSupport
import Testing

/// The indices of a task's prerequisites or dependents: one inline, more in an array.
@Suite("Workflow indices: one inline, more in an array", .offThePool)
struct WorkflowIndicesTests {
    @Test("empty, one, then many: count, order, last and the array agree")
    func growing() {
        var indices = WorkflowIndices()
        #expect(indices.isEmpty && indices.last == nil && indices.array.isEmpty)
        indices.append(4)
        #expect(Array(indices) == [4] && indices.last == 4 && indices.count == 1)
        indices.append(2)
        indices.append(9)
        #expect(Array(indices) == [4, 2, 9] && indices.array == [4, 2, 9] && indices.last == 9)
        var seen: [Int] = []
        indices.forEachIndex { seen.append($0) }
        #expect(seen == [4, 2, 9])
    }

    @Test("reserving room keeps what is there, before and after the first index")
    func reserving() {
        var none = WorkflowIndices()
        none.reserveCapacity(3)
        #expect(none.isEmpty && none.last == nil)
        none.append(1)
        none.append(2)
        #expect(Array(none) == [1, 2])
        var one = WorkflowIndices()
        one.append(7)
        one.reserveCapacity(1)
        #expect(Array(one) == [7])
        one.reserveCapacity(4)
        one.append(8)
        #expect(Array(one) == [7, 8] && one.last == 8)
    }

    @Test("appendUnlessLast skips the last index again and says whether the list was empty")
    func appendUnlessLast() {
        var indices = WorkflowIndices()
        #expect(indices.appendUnlessLast(3) == (true, true))
        #expect(indices.appendUnlessLast(3) == (false, false))
        #expect(indices.appendUnlessLast(5) == (true, false))
        #expect(indices.appendUnlessLast(5) == (false, false))
        #expect(indices.appendUnlessLast(3) == (true, false))
        #expect(Array(indices) == [3, 5, 3])
        var reserved = WorkflowIndices()
        reserved.reserveCapacity(2)
        #expect(reserved.appendUnlessLast(1) == (true, true))
        #expect(Array(reserved) == [1])
    }
}
