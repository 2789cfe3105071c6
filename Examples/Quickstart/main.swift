// Quickstart: a small dependency graph on a ConcurrentOperationQueue.
//
//                ┌──▶ uppercase ──┐
//     fetch ─────┤                ├──▶ combine ──┐
//                ├──▶ wordCount ──┘              ├──▶ publish
//                └──▶ thumbnail (cancelled) ─────┘
//
// `fetch` is a ConcurrentOperation subclass that finishes later, from a timer callback. The two
// transforms run at the same time once it has finished. `thumbnail` is cancelled while it waits
// for `fetch`: it finishes at once without running, and `publish` still runs, as it would with
// Foundation's OperationQueue. Then the program shows that misuse is a typed error.
//
// Run it with `swift run Quickstart`. Lines from the two transforms may come in either order.

import Dispatch
import OperationKit
import Synchronization

/// A one-value box for passing a result from an operation to the operations that depend on it.
///
/// Written once by an operation before it calls `finish()`, and read only by operations that
/// depend on it (or after waiting for it). The queue starts a dependent only after its dependency
/// has finished, and everything the dependency did before `finish()` is visible to the dependent;
/// that ordering is what makes the unlocked access safe.
final class Slot<Value: Sendable>: @unchecked Sendable {
    var value: Value?
}

/// Prints one event per line, with the operation's name in a column.
func log(_ name: String, _ event: String) {
    print("\(name.padding(to: 10)) \(event)")
}

extension String {
    func padding(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}

/// Downloads (well, pretends to) a text: the work ends in a callback, long after `execute()`
/// returned, which is why it calls `finish()` from there.
final class Fetch: ConcurrentOperation, @unchecked Sendable {
    let text = Slot<String>()

    override func execute() {
        log(displayName, "started (a 100 ms download)")
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(100)) {
            if self.isCancelled {
                log(self.displayName, "cancelled during the download")
            } else {
                self.text.value = "the quick brown fox jumps over the lazy dog"
                log(self.displayName, "download complete, calling finish()")
            }
            self.finish()
        }
    }
}

/// Counts how many steps run at the same time.
final class Gauge: Sendable {
    private let running = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)

    var peak: Int { highest.load(ordering: .relaxed) }

    func measure<Result>(_ body: () -> Result) -> Result {
        highest.max(running.add(1, ordering: .relaxed).newValue, ordering: .relaxed)
        defer { running.subtract(1, ordering: .relaxed) }
        return body()
    }
}

/// A synchronous step: a ClosureOperation that logs its start and end.
func step(_ name: String, gauge: Gauge, _ work: @escaping @Sendable () -> String) -> ClosureOperation {
    ClosureOperation(name: name) {
        log(name, "started")
        let result = gauge.measure(work)
        log(name, "done: \(result)")
    }
}

/// Logs the completion block of `operation`, which runs once it has finished, cancelled or not.
func logCompletion(of operation: ConcurrentOperation) {
    operation.completionBlock = { [unowned operation] in
        let how = operation.isCancelled ? "cancelled, never executed" : "executed"
        log(operation.displayName, "completion block (finished: \(operation.isFinished), \(how))")
    }
}

func runGraph() throws {
    let queue = ConcurrentOperationQueue(name: "quickstart")
    let gauge = Gauge()

    let fetch = Fetch(name: "fetch")
    let upper = Slot<String>()
    let words = Slot<Int>()
    let combined = Slot<String>()

    let uppercase = step("uppercase", gauge: gauge) {
        simulateWork(milliseconds: 50)
        upper.value = fetch.text.value?.uppercased()
        return upper.value ?? "nothing"
    }
    let wordCount = step("wordCount", gauge: gauge) {
        simulateWork(milliseconds: 50)
        words.value = fetch.text.value?.split(separator: " ").count
        return "\(words.value ?? 0) words"
    }
    let thumbnail = step("thumbnail", gauge: gauge) {
        "this line never prints: the operation is cancelled before it starts"
    }
    let combine = step("combine", gauge: gauge) {
        combined.value = "\(upper.value ?? "") (\(words.value ?? 0) words)"
        return "combined"
    }
    let publish = step("publish", gauge: gauge) {
        "published \"\(combined.value ?? "nothing")\""
    }

    try uppercase.addDependency(fetch)
    try wordCount.addDependency(fetch)
    try thumbnail.addDependency(fetch)
    try combine.addDependency(uppercase)
    try combine.addDependency(wordCount)
    try publish.addDependency(combine)
    try publish.addDependency(thumbnail)

    let all: [ConcurrentOperation] = [fetch, uppercase, wordCount, thumbnail, combine, publish]
    for operation in all { logCompletion(of: operation) }

    // Order does not matter: every operation waits for its dependencies.
    print("== Adding 6 operations to \(queue.displayName)")
    try queue.addOperations(all.reversed(), waitUntilFinished: false)

    // Cancel `thumbnail` while it waits for `fetch`: it finishes right away, without waiting for
    // `fetch`, and its dependent `publish` is not cancelled.
    log("main", "cancelling thumbnail")
    thumbnail.cancel()

    queue.waitUntilAllOperationsAreFinishedBlocking()

    print("== Summary")
    print("result:              \(combined.value ?? "none")")
    print("executed:            \(all.filter { !$0.isCancelled }.map(\.displayName).joined(separator: ", "))")
    print("cancelled:           \(all.filter(\.isCancelled).map(\.displayName).joined(separator: ", "))")
    print("all finished:        \(all.allSatisfy(\.isFinished))")
    print("most steps at once:  \(gauge.peak)")
    print("operations in queue: \(queue.operationCount)")
    print("publish.dependencies after finishing: \(publish.dependencies.count) (released)")
}

/// Runs `body`, which should throw, and prints the error.
func expectError(_ label: String, _ body: () throws -> Void) {
    do {
        try body()
        print("\(label.padding(to: 26)) no error")
    } catch let error as OperationError {
        print("\(label.padding(to: 26)) \(error.code) \(error.operationNames): \(error.message)")
    } catch {
        print("\(label.padding(to: 26)) \(error)")
    }
}

func showMisuse() throws {
    print("== Misuse is a typed error, not a crash or a hang")
    let queue = ConcurrentOperationQueue(name: "misuse")

    let once = ClosureOperation(name: "once") {}
    try queue.addOperation(once)
    once.waitUntilFinishedBlocking()
    expectError("add a finished operation:") { try queue.addOperation(once) }

    let a = ClosureOperation(name: "a") { log("a", "ran") }
    let b = ClosureOperation(name: "b") { log("b", "ran") }
    try a.addDependency(b)
    try b.addDependency(a)
    // `a` is accepted (it waits for `b`); `b` would close the cycle and is refused.
    expectError("add a and b, a <-> b:") { try queue.addOperations([a, b], waitUntilFinished: false) }
    expectError("make a depend on itself:") { try a.addDependency(a) }
    expectError("set max concurrency to 0:") { try queue.setMaxConcurrentOperationCount(0) }

    // The queue carries on: drop the edge to `b`, which is in no queue, and `a` runs.
    a.removeDependency(b)
    queue.waitUntilAllOperationsAreFinishedBlocking()
    print("after removing the edge to b: a finished = \(a.isFinished), operations in queue = \(queue.operationCount)")
}

/// Blocks the calling thread for a while, standing in for real work.
func simulateWork(milliseconds: Int) {
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { done.signal() }
    done.wait()
}

try runGraph()
try showMisuse()
