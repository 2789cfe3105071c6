// Synthetic lifecycles for the adapters' tests: an operation's events at chosen monotonic times,
// told to an instrument as the library would tell them.

import OperationKit

/// A fixed start and offsets from it, so durations in the tests are exact.
struct Timeline {
    let start = ContinuousClock.now

    /// The instant `milliseconds` after the start.
    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }
}

/// An error with a readable description.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The events of an operation added at 0 ms, ready at 1, started at 2 and finished at 5 with
/// `outcome`; `run` is called between started and finished, inside `instrument.run`.
func tellLifecycle(
    of operation: ConcurrentOperation, on queue: ConcurrentOperationQueue?, to instrument: any OperationInstrument,
    outcome: OperationOutcome = .succeeded, timeline: Timeline = Timeline(), run: () -> Void = {}
) {
    instrument.record(OperationEvent(.added, operation: operation, queue: queue, time: timeline.at(0)))
    instrument.record(OperationEvent(.ready, operation: operation, queue: queue, time: timeline.at(1)))
    instrument.record(OperationEvent(.started, operation: operation, queue: queue, time: timeline.at(2)))
    instrument.run(operation, run)
    instrument.record(OperationEvent(.finished(outcome), operation: operation, queue: queue, time: timeline.at(5)))
}
