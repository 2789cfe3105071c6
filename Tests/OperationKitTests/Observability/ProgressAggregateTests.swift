@testable import OperationKit
import OperationKitTestSupport
import Testing

/// `ProgressAggregate` and `OperationProgress`: the arithmetic of aggregated progress. Pure.
@Suite("Observability: progress aggregation (pure)", .offThePool)
struct ProgressAggregateTests {
    let a = ObjectIdentifier(A.self)
    let b = ObjectIdentifier(B.self)
    let c = ObjectIdentifier(C.self)
    enum A {}
    enum B {}
    enum C {}

    @Test("by count: finished operations are whole units, running ones add their fraction")
    func byCount() {
        var aggregate = ProgressAggregate()
        #expect(aggregate.progress == .empty)
        let result1 = aggregate.add(a, weight: 1, fraction: 0)
        #expect(result1)
        let result2 = aggregate.add(b, weight: 1, fraction: 0)
        #expect(result2)
        let result3 = aggregate.add(c, weight: 1, fraction: 0)
        #expect(result3)
        let result4 = aggregate.add(a, weight: 1, fraction: 0)
        #expect(!result4, "counted once")
        #expect(aggregate.progress == OperationProgress(completed: 0, total: 3))
        let result5 = aggregate.update(b, fraction: 0.5)
        #expect(result5)
        let result6 = aggregate.finish(a)
        #expect(result6)
        let result7 = aggregate.finish(a)
        #expect(!result7, "finished once")
        let progress = aggregate.progress
        #expect(progress.completed == 1 && progress.total == 3)
        #expect(progress.fractionCompleted == 1.5 / 3)
        #expect(!progress.isFinished)
        let result8 = aggregate.finish(b)
        #expect(result8)
        let result9 = aggregate.finish(c)
        #expect(result9)
        #expect(aggregate.progress == OperationProgress(completed: 3, total: 3, fractionCompleted: 1, isFinished: true))
    }

    @Test("weighted: an operation counts for its weight, its fraction times its weight while it runs")
    func weighted() {
        var aggregate = ProgressAggregate()
        _ = aggregate.add(a, weight: 3, fraction: 0)
        _ = aggregate.add(b, weight: 1, fraction: 0)
        _ = aggregate.update(a, fraction: 0.5)
        #expect(aggregate.progress.fractionCompleted == 1.5 / 4)
        _ = aggregate.finish(b)
        #expect(aggregate.progress.completed == 1)
        #expect(aggregate.progress.fractionCompleted == 2.5 / 4)
        _ = aggregate.finish(a)
        #expect(aggregate.progress == OperationProgress(completed: 4, total: 4, fractionCompleted: 1, isFinished: true))
    }

    @Test("a set total: finished operations fill it up; finished once reached and nothing runs")
    func totalUnitCount() {
        var aggregate = ProgressAggregate()
        aggregate.totalUnitCount = 4
        _ = aggregate.add(a, weight: 1, fraction: 0)
        _ = aggregate.finish(a)
        #expect(aggregate.progress == OperationProgress(completed: 1, total: 4))
        #expect(!aggregate.progress.isFinished, "more operations are to come")
        _ = aggregate.add(b, weight: 3, fraction: 0.5)
        #expect(aggregate.progress.fractionCompleted == 2.5 / 4)
        _ = aggregate.finish(b)
        #expect(aggregate.progress.isFinished)
        #expect(aggregate.progress.fractionCompleted == 1)
    }

    @Test("updates and finishes of operations it does not count change nothing")
    func strangers() {
        var aggregate = ProgressAggregate()
        let result10 = aggregate.update(a, fraction: 0.5)
        #expect(!result10)
        let result11 = aggregate.finish(a)
        #expect(!result11)
        #expect(aggregate.progress == .empty)
        aggregate.addFinished(weight: 2)
        #expect(aggregate.progress == OperationProgress(completed: 2, total: 2, fractionCompleted: 1, isFinished: true))
    }

    @Test("fractions are clamped; rounding does not pile up once nothing runs")
    func clamping() {
        #expect(OperationProgress(completed: 5, total: 2).fractionCompleted == 1)
        #expect(OperationProgress(completed: -1, total: 2).fractionCompleted == 0)
        #expect(OperationProgress(completed: 3, total: 0).fractionCompleted == 0)
        var aggregate = ProgressAggregate()
        _ = aggregate.add(a, weight: 1, fraction: 0)
        _ = aggregate.add(b, weight: 1, fraction: 0)
        for step in 1...1000 { _ = aggregate.update(a, fraction: Double(step) * 0.000_7) }
        _ = aggregate.update(a, fraction: 0)
        #expect(aggregate.progress.fractionCompleted == 0)
        #expect(OperationProgress(completed: 3, total: 10).description == "3/10 (30%)")
    }

    @Test("many reports leave no rounding behind: the fraction is that of the last reports (QueueProgressTests saw 0.7500000000000002)")
    func noDriftAfterManyReports() {
        var aggregate = ProgressAggregate()
        _ = aggregate.add(a, weight: 1, fraction: 0)
        _ = aggregate.add(b, weight: 3, fraction: 0)
        _ = aggregate.update(b, fraction: 0.5)
        for index in 1...2_000 { _ = aggregate.update(a, fraction: Double(index % 997) / 997) }
        _ = aggregate.update(a, fraction: 0.75)
        // (1 × 0.75 + 3 × 0.5) / 4, exactly.
        #expect(aggregate.progress.fractionCompleted == 0.5625)
    }
}

@Suite("Observability: progress weights out of range", .offThePool)
struct ProgressWeightRangeTests {
    @Test("a negative or huge progress weight is clamped, not a crash")
    func clamped() {
        let operation = ClosureOperation {}
        operation.progressWeight = -5
        #expect(operation.progressWeight == 0)
        operation.progressWeight = .max
        #expect(operation.progressWeight == OperationProgress.maximumWeight)
        let task = ClosureTask(name: "weighted") { _ in }
        task.progressWeight = -1
        #expect(task.progressWeight == 0)
        task.progressWeight = .max
        #expect(task.progressWeight == OperationProgress.maximumWeight)
    }

    @Test("the largest weight, running at a fraction, adds up without overflow")
    func largestWeight() {
        var aggregate = ProgressAggregate()
        _ = aggregate.add(ObjectIdentifier(ProgressWeightRangeTests.self), weight: OperationProgress.maximumWeight, fraction: 0.5)
        #expect(aggregate.progress.fractionCompleted == 0.5)
    }
}
