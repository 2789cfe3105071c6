// The cost of an installed instrument: S1 and S2 on a queue with a no-op OperationInstrument
// against the same queue with none, as ratios.

import OperationKit

/// An instrument that does nothing: what remains is the library's cost of telling it (building
/// each event, the `run(_:_:)` call around `execute()`, the one-time ordering flags).
final class NoOpInstrument: OperationInstrument {}

/// OperationKit's `ClosureOperation` on a queue whose `instrument` is a `NoOpInstrument`.
struct InstrumentedContender: OperationKitQueueContender {
    static let name = "OK+instrument"

    let queue: ConcurrentOperationQueue = {
        let queue = ConcurrentOperationQueue(name: "bench-instrumented")
        queue.instrument = NoOpInstrument()
        return queue
    }()

    func makeNode(_ body: @escaping @Sendable () -> Void) -> ConcurrentOperation {
        ClosureOperation(body)
    }
}

/// S1 and S2 without an instrument and with a no-op one, alternating run by run after a warm-up of
/// each: the medians and their ratio.
func instrumentReport(sizes: Sizes) -> [String] {
    var lines = ["## Instrument cost: S1 and S2 with a no-op instrument installed (target: none costs one atomic load per event)", ""]
    lines.append("| Scenario | no instrument (ms) | no-op instrument (ms) | ratio |")
    lines.append("|---|---:|---:|---:|")
    for scenario in [Scenario.independent, .chain] {
        _ = scenario.run(on: OperationKitContender.self, sizes: sizes)
        _ = scenario.run(on: InstrumentedContender.self, sizes: sizes)
        var plain: [Double] = []
        var instrumented: [Double] = []
        for _ in 0..<sizes.runs {
            plain.append(scenario.run(on: OperationKitContender.self, sizes: sizes))
            instrumented.append(scenario.run(on: InstrumentedContender.self, sizes: sizes))
        }
        let (without, with) = (median(plain), median(instrumented))
        lines.append("| \(scenario.title(sizes)) | \(format(without)) | \(format(with)) | \(format(with / without)) |")
    }
    lines.append("")
    lines.append("Medians of \(sizes.runs) runs each, alternating, after one warm-up of each.")
    return lines
}
