// pmake's small shared counter (finished tasks, interrupts), safe from any thread.

import Synchronization

final class ManagedAtomicCounter: Sendable {
    private let count = Atomic<Int>(0)
    /// Adds one and returns the new value.
    func increment() -> Int { count.add(1, ordering: .relaxed).newValue }
    var value: Int { count.load(ordering: .relaxed) }
}
