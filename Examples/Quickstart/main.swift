import OperationKit
import Dispatch
import Synchronization

final class Counter: Sendable { let value = Atomic<Int>(0) }
let counter = Counter()
let queue = ConcurrentOperationQueue(name: "smoke")
var start = DispatchTime.now()
var ops: [ConcurrentOperation] = []
for _ in 0..<100_000 { ops.append(ClosureOperation { counter.value.add(1, ordering: .relaxed) }) }
print("build", Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6)
try! queue.addOperations(ops, waitUntilFinished: false)
print("add", Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6)
queue.waitUntilAllOperationsAreFinished()
print("S1", counter.value.load(ordering: .relaxed), Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6, "ms")
counter.value.store(0, ordering: .relaxed)
start = .now()
ops = []
for i in 0..<10_000 {
    let op = ClosureOperation { counter.value.add(1, ordering: .relaxed) }
    if i > 0 { try! op.addDependency(ops[i - 1]) }
    ops.append(op)
}
print("build", Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6)
try! queue.addOperations(ops.reversed(), waitUntilFinished: false)
print("add", Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6)
queue.waitUntilAllOperationsAreFinished()
print("S2", counter.value.load(ordering: .relaxed), Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6, "ms")
let a = ClosureOperation(name: "a") {}
let b = ClosureOperation(name: "b") {}
try! a.addDependency(b)
try! b.addDependency(a)
queue.isSuspended = true
try! queue.addOperation(a)
do { try queue.addOperation(b) } catch { print(error) }
do { try queue.addOperation(a) } catch { print(error) }
queue.cancelAllOperations()
queue.isSuspended = false
queue.waitUntilAllOperationsAreFinished()
print("done", queue.operationCount)
