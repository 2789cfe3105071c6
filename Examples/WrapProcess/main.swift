import OperationKit
import Dispatch

func build(_ n: Int, deps: Bool) -> [ConcurrentOperation] {
    var ops: [ConcurrentOperation] = []
    ops.reserveCapacity(n)
    for i in 0..<n {
        let op = ClosureOperation { }
        if deps && i > 0 { try! op.addDependency(ops[i - 1]) }
        ops.append(op)
    }
    return ops
}
for _ in 0..<3 {
    var t = DispatchTime.now()
    var o = build(10_000, deps: false)
    print("nodeps", Double(DispatchTime.now().uptimeNanoseconds - t.uptimeNanoseconds) / 1e6)
    t = .now()
    o = build(10_000, deps: true)
    print("deps", Double(DispatchTime.now().uptimeNanoseconds - t.uptimeNanoseconds) / 1e6)
    t = .now()
    o = []
    print("free", Double(DispatchTime.now().uptimeNanoseconds - t.uptimeNanoseconds) / 1e6, o.count)
}
