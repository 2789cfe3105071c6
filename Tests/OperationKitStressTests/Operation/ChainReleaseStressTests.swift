import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    /// Dropping a long chain of operations that never ran must not deinitialise it recursively
    /// (each holds its dependency): that would overflow the stack and crash the process.
    @Suite("Releasing long unfinished chains")
    struct ChainRelease {
        @Test("a never-started chain of 200,000 operations is released on a dispatch thread")
        func longChainIsReleasedIteratively() {
            let count = Stress.count(200_000, minimum: 100_000)
            let released = Latch(count: 1)
            let last = Latch(count: 1)
            DispatchQueue.global().async {
                // Dispatch threads have small stacks (512 KiB on Linux): a recursive release of a
                // chain this long would overflow it many times over.
                var previous: ConcurrentOperation? = nil
                for index in 0..<count {
                    let operation: ConcurrentOperation
                    if index == 0 {
                        operation = DeallocationProbe(deallocated: last)
                    } else {
                        operation = ClosureOperation {}
                    }
                    if let previous { try? operation.addDependency(previous) }
                    previous = operation
                }
                previous = nil
                released.countDown()
            }
            #expect(released.wait(timeout: Stress.timeout))
            #expect(last.wait(timeout: Stress.timeout), "the first operation of the chain was deallocated")
        }

        /// An operation that counts down a latch when it is deallocated.
        final class DeallocationProbe: ConcurrentOperation, @unchecked Sendable {
            // No mutable state of its own: `deallocated` is set once in init.
            private let deallocated: Latch

            init(deallocated: Latch) {
                self.deallocated = deallocated
                super.init(name: "first")
            }

            deinit { deallocated.countDown() }
        }
    }
}
