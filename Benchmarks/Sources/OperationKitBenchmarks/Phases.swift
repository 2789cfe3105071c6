import Dispatch
import Foundation

// `[--quick] --phases RUNS`: S1 batched, split into what the caller's thread does, on each of
// OperationKit's queue contenders and on Dispatch, taking turns run by run after one warm-up each.
//
// A queue contender's run is four phases: making the operations (on the caller's thread alone),
// adding them in one call (the same), waiting while the workers run them, and releasing them when
// the caller's array goes (the caller's thread alone again). Dispatch has two: submitting, while
// its workers already run what was submitted, and waiting for the rest. The timed S1 of the table
// is the sum of the phases (its contenders release their array inside the timed part too), so this
// shows which part of a gap is the caller's and which the workers'.

/// Runs the phases the arguments ask for, or stops the process with the usage.
func runPhases(_ arguments: [String], sizes: Sizes) -> Never {
    guard arguments.count == 1, let runs = Int(arguments[0]), runs > 0 else {
        fail("usage: OperationKitBenchmarks [--quick] --phases RUNS")
    }
    let count = sizes.independent
    var queueSamples: [(name: String, run: () -> [Double], samples: [[Double]])] = [
        ("ok", { queuePhases(OperationKitContender.self, count: count) }, []),
        ("procedure", { queuePhases(ProcedureContender.self, count: count) }, []),
        ("bare", { queuePhases(BareProcedureContender.self, count: count) }, []),
        ("async", { queuePhases(AsyncOperationContender.self, count: count) }, []),
    ]
    var dispatchSamples: [[Double]] = []
    for entry in queueSamples { _ = entry.run() }
    _ = dispatchPhases(count: count)
    for _ in 0..<runs {
        for index in queueSamples.indices { queueSamples[index].samples.append(queueSamples[index].run()) }
        dispatchSamples.append(dispatchPhases(count: count))
    }
    report("S1 \(count) independent, batched: the caller's phases, medians of \(runs) runs in ms")
    for entry in queueSamples {
        let phases = ["make", "add", "wait", "release", "total"]
        report(phaseLine(entry.name, names: phases, samples: entry.samples))
    }
    report(phaseLine("dispatch", names: ["submit", "wait", "total"], samples: dispatchSamples))
    exit(0)
}

/// One line: each phase's median over the runs.
private func phaseLine(_ name: String, names: [String], samples: [[Double]]) -> String {
    let medians = names.indices.map { phase in median(samples.map { $0[phase] }) }
    let fields = zip(names, medians).map { "\($0) \(format($1, decimals: 1))" }
    return "  " + name.padding(toLength: 11, withPad: " ", startingAt: 0) + fields.joined(separator: "  ")
}

/// One batched S1 run on a queue contender, checked as the table's: make, add, wait, release, total.
private func queuePhases<C: QueueContender>(_: C.Type, count: Int) -> [Double] {
    let contender = C()
    let probe = Probe()
    let makeNode = contender.nodeMaker(sharing: { probe.tick() })
    let start = ContinuousClock.now
    var nodes: [C.Node] = []
    nodes.reserveCapacity(count)
    for _ in 0..<count {
        nodes.append(makeNode())
    }
    let made = ContinuousClock.now
    contender.add(nodes)
    let added = ContinuousClock.now
    // The array lives until `removeAll`: released earlier, its last references would go while the
    // workers still run, and the release would be counted as waiting.
    let finished = withExtendedLifetime(nodes) { () -> ContinuousClock.Instant in
        contender.waitForAll()
        return ContinuousClock.now
    }
    nodes.removeAll()
    let released = ContinuousClock.now
    probe.verify(executed: count, in: "S1 phases on \(C.name)")
    contender.verify(finished: count, conditionsEvaluated: count, in: "S1 phases on \(C.name)")
    return [
        milliseconds(start.duration(to: made)), milliseconds(made.duration(to: added)),
        milliseconds(added.duration(to: finished)), milliseconds(finished.duration(to: released)),
        milliseconds(start.duration(to: released)),
    ]
}

/// One S1 run on Dispatch, as its contender runs it: submit, wait, total.
private func dispatchPhases(count: Int) -> [Double] {
    let probe = Probe()
    let group = DispatchGroup()
    let global = DispatchQueue.global()
    let body: @Sendable () -> Void = { probe.tick() }
    let start = ContinuousClock.now
    for _ in 0..<count {
        global.async(group: group, execute: body)
    }
    let submitted = ContinuousClock.now
    group.wait()
    let finished = ContinuousClock.now
    probe.verify(executed: count, in: "S1 phases on Dispatch")
    return [
        milliseconds(start.duration(to: submitted)), milliseconds(submitted.duration(to: finished)),
        milliseconds(start.duration(to: finished)),
    ]
}
