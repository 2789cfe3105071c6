import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

/// An object captured by an observer, a condition or a closure, to see that it is released.
final class CapturedToken: Sendable {
    init() {}
}

/// Holds a procedure so that its own closure can capture it: procedure → closure → box → procedure.
final class ProcedureBox: @unchecked Sendable {  // `procedure` is set once, before the procedure is shared
    var procedure: ClosureProcedure<Int>?

    init() {}
}

extension StressTests {
    /// After storms of procedures, groups and injected pairs (raced by cancels, with conditions and
    /// observers), nothing they used survives once the queues have drained.
    @Suite("Procedure leaks")
    struct ProcedureLeaks {
        /// Weak references, by what they point to.
        final class References: @unchecked Sendable {  // filled by the test's thread before sharing
            var byKind: [String: [WeakRef]] = [:]

            func add(_ kind: String, _ object: AnyObject) { byKind[kind, default: []].append(WeakRef(object)) }

            /// The kinds with objects still alive, and how many.
            var alive: [String: Int] {
                byKind.compactMapValues { references in
                    let alive = references.filter { !$0.isReleased }.count
                    return alive == 0 ? nil : alive
                }
            }
        }

        @Test("procedures, observers' captures, groups and injected pairs are released after a storm")
        func nothingSurvivesAStorm() throws {
            let harness = LeakHarness()
            let references = References()
            let ran = WorkTally()
            let queueReference: WeakRef = try {
                let queue = harness.makeQueue("procedure-leaks")
                try Self.storm(on: queue, finishers: harness.finishers, references: references, ran: ran)
                try #require(harness.drain(queue))
                return WeakRef(queue)
            }()
            // Group children run on the groups' own queues, whose workers are global threads that
            // may hold a child for a moment after it finished: allow them a little time.
            let deadline = ContinuousClock.now + .seconds(10)
            _ = spin(until: deadline) { references.alive.isEmpty && queueReference.isReleased }
            // The storm did run: about half the work runs (the rest is cancelled or fails a condition).
            let executed = ran.executionCount
            let objects = references.byKind.values.reduce(0) { $0 + $1.count }
            #expect(executed > objects / 10, "only \(executed) of \(objects) procedures ran")
            #expect(references.alive.isEmpty, "still alive after the storm: \(references.alive)")
            #expect(queueReference.isReleased, "the drained queue was not released")
        }

        /// Runs the storm on `queue` and returns once every operation was added and every cancel
        /// issued; only weak references escape.
        static func storm(
            on queue: ConcurrentOperationQueue, finishers: DispatchQueue, references: References, ran: WorkTally
        ) throws {
            var random = SplitMix64(seed: 0x5EED_0004)
            let count = Stress.count(1_000, minimum: 50)
            var operations: [ConcurrentOperation] = []
            var cancellable: [ProcedureOperation] = []

            // Procedures: observers and conditions capture tokens; some closures capture their
            // own procedure; conditions satisfied, decided later, failing or exclusive.
            for index in 0..<count {
                let token = CapturedToken()
                references.add("observer token", token)
                let box = ProcedureBox()
                let selfCapturing = index % 3 == 0
                let work: @Sendable (ClosureProcedure<Int>) -> Void = { procedure in
                    ran.executions.add(1, ordering: .relaxed)
                    let own = selfCapturing ? box.procedure : procedure
                    finishers.async { own?.finish(withValue: index) }
                }
                let observer = ClosureObserver(
                    willExecute: { _ in withExtendedLifetime(token) {} },
                    didFinish: { _, _ in withExtendedLifetime(token) {} })
                let conditionToken = CapturedToken()
                references.add("condition token", conditionToken)
                let condition: (any OperationCondition)? = switch index % 5 {
                case 0: ClosureCondition { _ in withExtendedLifetime(conditionToken) { .satisfied } }
                case 1: DeferredCondition(failure: nil, on: finishers)
                case 2: ClosureCondition { _ in
                    withExtendedLifetime(conditionToken) { .failed(StressFailure(origin: .condition, id: index)) }
                }
                case 3: MutuallyExclusive(category: "ProcedureLeakStress.\(index % 2)")
                default: nil
                }
                // The odd ones are given their observer and condition at init, the even ones
                // after: both must let go of them.
                let procedure: ClosureProcedure<Int>
                if index % 2 == 1 {
                    procedure = ClosureProcedure<Int>(
                        name: "leak\(index)", conditions: condition.map { [$0] } ?? [], observers: [observer], asynchronous: work)
                } else {
                    procedure = ClosureProcedure<Int>(name: "leak\(index)", asynchronous: work)
                    try procedure.addObserver(observer)
                    if let condition { try procedure.addCondition(condition) }
                }
                if selfCapturing { box.procedure = procedure }
                if index > 0 && random.chance(20) { try procedure.addDependency(operations[random.below(operations.count)]) }
                references.add("procedure", procedure)
                operations.append(procedure)
                if random.chance(25) { cancellable.append(procedure) }
            }

            // Groups whose children produce operations and finish later; some cancelled.
            for index in 0..<Stress.count(150, minimum: 10) {
                let children = (0..<(1 + random.below(4))).map { childIndex in
                    let produced = ClosureOperation(name: "leakGroup\(index).produced\(childIndex)") {}
                    references.add("produced", produced)
                    return ClosureProcedure<Void>(name: "leakGroup\(index).child\(childIndex)", asynchronous: { procedure in
                        ran.executions.add(1, ordering: .relaxed)
                        try? procedure.produce(produced)
                        finishers.async { procedure.finish() }
                    })
                }
                let group = try GroupOperation(name: "leakGroup\(index)", operations: children)
                let token = CapturedToken()
                references.add("group observer token", token)
                try group.addObserver(ClosureObserver(didFinish: { _, _ in withExtendedLifetime(token) {} }))
                references.add("group", group)
                for child in children { references.add("child", child) }
                operations.append(group)
                if random.chance(25) { cancellable.append(group) }
                if random.chance(10) { cancellable.append(children[0]) }
            }

            // Injected pairs: the producer succeeds, fails or is cancelled.
            for index in 0..<Stress.count(400, minimum: 20) {
                let producer: ClosureProcedure<Int> = switch index % 3 {
                case 0: ClosureProcedure(name: "leakProducer\(index)") { index }
                case 1: ClosureProcedure(name: "leakProducer\(index)") { throw StressFailure(origin: .work, id: index) }
                default: ClosureProcedure(name: "leakProducer\(index)", asynchronous: { procedure in
                    finishers.async { procedure.finish(withValue: index) }
                })
                }
                let consumer = TransformProcedure<Int, String>(name: "leakConsumer\(index)") { value in
                    ran.executions.add(1, ordering: .relaxed)
                    return "\(value)"
                }
                try consumer.injectInput(from: producer)
                references.add("producer", producer)
                references.add("consumer", consumer)
                // Consumers first half of the time: the queue adds the producer when it comes.
                operations.append(contentsOf: index % 2 == 0 ? [consumer, producer] : [producer, consumer])
                if index % 5 == 4 { cancellable.append(producer) }
            }

            // One thread adds, another cancels at the same time.
            let adds = operations
            let cancels = cancellable
            let threadsFinished = onThreads(2, label: "procedure-leaks") { role in
                if role == 0 {
                    var index = 0
                    while index < adds.count {
                        let end = min(adds.count, index + 1 + index % 32)
                        try? queue.addOperations(Array(adds[index..<end]), waitUntilFinished: false)
                        index = end
                    }
                } else {
                    for (position, procedure) in cancels.enumerated() {
                        if position % 4 == 0 { yieldThread() }
                        procedure.cancel(with: StressFailure(origin: .cancel, id: position))
                    }
                }
            }
            #expect(threadsFinished)
        }
    }
}
