@testable import OperationKit
import OperationKitTestSupport
import Testing

/// Thread-free tests of the value types behind a procedure's state beside its lifecycle
/// (ProcedureStateValues.swift): each transition from each case.
@Suite("Procedure state value types", .offThePool)
struct ProcedureStateValuesTests {
    struct Failure: Error {}

    // MARK: EventDelivery

    private func pending(_ event: ProcedureEvent) -> PendingEvent {
        PendingEvent(event: event, observers: .none, delivered: nil, then: .nothing)
    }

    private func kindOfNext(_ delivery: inout EventDelivery) -> String {
        switch delivery.next() {
        case .deliver(let event): "deliver \(event.event.kind.rawValue)"
        case .ended(let release): "ended release:\(release)"
        }
    }

    @Test func idleDeliveryIsBegunByTheFirstThreadOnly() {
        var delivery = EventDelivery.idle
        #expect(!delivery.isDelivering)
        #expect(!delivery.isDeliveringOnCurrentThread)
        let r1 = delivery.begin(on: .current)
        #expect(r1)
        #expect(delivery.isDelivering)
        #expect(delivery.isDeliveringOnCurrentThread)
        // A second raise while delivering does not begin another delivery.
        let r2 = delivery.begin(on: .current)
        #expect(!r2)
    }

    @Test func queuedEventsComeOutInOrderThenTheDeliveryEnds() {
        var delivery = EventDelivery.idle
        _ = delivery.begin(on: .current)
        delivery.enqueue(pending(.willExecute))
        delivery.enqueue(pending(.didExecute))
        #expect(kindOfNext(&delivery) == "deliver \(ProcedureEventKinds.willExecute.rawValue)")
        #expect(kindOfNext(&delivery) == "deliver \(ProcedureEventKinds.didExecute.rawValue)")
        #expect(kindOfNext(&delivery) == "ended release:false")
        #expect(!delivery.isDelivering)
        // Idle again: the next raise begins a new delivery.
        let r3 = delivery.begin(on: .current)
        #expect(r3)
    }

    @Test func releaseAfterDeliveryOnlyWhileDelivering() {
        var idle = EventDelivery.idle
        let r4 = idle.releaseAfterDelivery()
        #expect(!r4)
        #expect(!idle.isDelivering)

        var delivery = EventDelivery.idle
        _ = delivery.begin(on: .current)
        delivery.enqueue(pending(.didFinish([])))
        let r5 = delivery.releaseAfterDelivery()
        #expect(r5)
        // The flag survives the events still queued and is reported when the delivery ends.
        #expect(kindOfNext(&delivery) == "deliver \(ProcedureEventKinds.didFinish.rawValue)")
        #expect(kindOfNext(&delivery) == "ended release:true")
        // A new delivery starts without it.
        _ = delivery.begin(on: .current)
        #expect(kindOfNext(&delivery) == "ended release:false")
    }

    // MARK: ConditionProgress

    private func describe(_ progress: ConditionProgress) -> String {
        switch progress {
        case .none: "none"
        case .oneStarting: "one starting:true decided:false"
        case .oneSatisfiedWhileStarting, .oneIgnoredWhileStarting, .oneFailedWhileStarting: "one starting:true decided:true"
        case .oneStarted: "one starting:false decided:false"
        case .several: "several"
        case .decided: "decided"
        case .oneLent: "one lent"
        case .oneLentAfterFinish: "one lent after finish"
        }
    }

    /// A condition lent by the procedure's field (no retain): the worker's next critical section
    /// ends the lend as if it had held a copy; a finish before that moves the condition out, for
    /// the worker to take and let go of. An answer through a completion is not expected, and
    /// ignored.
    @Test func aLentConditionEndsAsStartedOrIsHandedToTheWorker() {
        var progress = ConditionProgress.none
        progress.beginLent()
        #expect(describe(progress) == "one lent")
        #expect(progress.answeredOne(.satisfied) == .ignored)
        #expect(progress.startedOne() == nil)
        #expect(progress.takeLentAfterFinish() == nil)
        progress.endLend()
        #expect(describe(progress) == "one starting:true decided:false")
        // Ended already: a second end changes nothing.
        progress.endLend()
        #expect(describe(progress) == "one starting:true decided:false")

        let condition = ClosureCondition(name: "lent") { _ in .satisfied }
        var finished = ConditionProgress.none
        finished.beginLent()
        finished = .oneLentAfterFinish(condition)
        // The worker's start step leaves it for the worker to take once the lock is let go of.
        finished.endLend()
        #expect(describe(finished) == "one lent after finish")
        #expect(finished.takeLentAfterFinish()?.name == "lent")
        #expect(describe(finished) == "none")
        #expect(finished.takeLentAfterFinish() == nil)
    }

    /// Each answer recorded while the worker starts the condition is the one it gets back (the
    /// answers are cases of their own, not a payload).
    @Test func everyAnswerWhileStartingComesBackAsGiven() {
        struct Marked: Error { let mark: Int }
        for answer in [ConditionResult.satisfied, .ignored, .failed(Marked(mark: 7))] {
            var progress = ConditionProgress.none
            progress.beginOne()
            #expect(progress.answeredOne(answer) == .recorded)
            switch (answer, progress.startedOne()) {
            case (.satisfied, .satisfied?), (.ignored, .ignored?): break
            case (.failed, .failed(let error)?): #expect((error as? Marked)?.mark == 7)
            default: Issue.record("answer \(answer) came back changed")
            }
            #expect(describe(progress) == "decided")
        }
    }

    @Test func oneConditionAnsweredWhileTheWorkerStartsIt() {
        var progress = ConditionProgress.none
        progress.beginOne()
        #expect(describe(progress) == "one starting:true decided:false")
        let r6 = progress.answeredOne(.satisfied)
        #expect(r6 == .recorded)
        #expect(describe(progress) == "one starting:true decided:true")
        // A second answer is ignored.
        let r7 = progress.answeredOne(.ignored)
        #expect(r7 == .ignored)
        // The worker finds the answer and acts on it.
        guard case .satisfied = progress.startedOne() else {
            Issue.record("the recorded answer was not handed to the worker")
            return
        }
        #expect(describe(progress) == "decided")
        let r8 = progress.answeredOne(.satisfied)
        #expect(r8 == .ignored)
    }

    @Test func oneConditionAnsweredAfterTheWorkerStartedIt() {
        var progress = ConditionProgress.none
        progress.beginOne()
        let r9 = progress.startedOne()
        #expect(r9 == nil)
        #expect(describe(progress) == "one starting:false decided:false")
        let r10 = progress.answeredOne(.failed(Failure()))
        #expect(r10 == .decide)
        #expect(describe(progress) == "decided")
        let r11 = progress.answeredOne(.satisfied)
        #expect(r11 == .ignored)
    }

    @Test func answersWithoutASingleEvaluationAreIgnored() {
        var none = ConditionProgress.none
        let r12 = none.answeredOne(.satisfied)
        #expect(r12 == .ignored)
        #expect(describe(none) == "none")
        // Let go of (the procedure finished) while the worker was starting the condition.
        let r13 = none.startedOne()
        #expect(r13 == nil)

        let evaluation = ConditionEvaluation(conditions: [NoCondition(), NoCondition()], gates: [], leadingCount: 0)
        var several = ConditionProgress.several(evaluation)
        #expect(several.several === evaluation)
        let r14 = several.answeredOne(.satisfied)
        #expect(r14 == .ignored)
        #expect(describe(several) == "several")
        #expect(ConditionProgress.decided.several == nil)
        #expect(ConditionProgress.none.several == nil)
    }

    // MARK: ProduceProgress

    @Test func finishWithoutProduceDoesNotWait() {
        var progress = ProduceProgress.none
        let r15 = progress.finishRequested()
        #expect(!r15)
        #expect(progress == .none)
    }

    @Test func produceWithoutFinish() {
        var progress = ProduceProgress.none
        progress.begin()
        #expect(progress == .adding(count: 1, waits: []))
        let r16 = progress.end()
        #expect(!r16.finish && !r16.start)
        #expect(progress == .none)
    }

    @Test func startWaitsForTheLastAddBeforeExecute() {
        var progress = ProduceProgress.none
        let before = progress.startRequested()
        #expect(!before)
        progress.begin()
        let waits = progress.startRequested()
        #expect(waits)
        #expect(progress == .adding(count: 1, waits: .start))
        let ended = progress.end()
        #expect(ended.start && !ended.finish)
        #expect(progress == .none)
    }

    @Test func willEventsMarkTheDelivery() {
        var delivery = EventDelivery.idle
        let began = delivery.begin(on: .current, will: true)
        #expect(began)
        #expect(delivery.isDeliveringWillOnCurrentThread)
        delivery.enqueue(PendingEvent(event: .didExecute, observers: .none, delivered: nil, then: .nothing))
        guard case .deliver = delivery.next() else { Issue.record("expected an event"); return }
        #expect(!delivery.isDeliveringWillOnCurrentThread)
        #expect(delivery.isDeliveringOnCurrentThread)
        guard case .ended(release: false) = delivery.next() else { Issue.record("expected the end"); return }
        #expect(!delivery.isDelivering)
    }

    @Test func finishWaitsForTheLastProduce() {
        var progress = ProduceProgress.none
        progress.begin()
        progress.begin()
        #expect(progress == .adding(count: 2, waits: []))
        let r17 = progress.finishRequested()
        #expect(r17)
        #expect(progress == .adding(count: 2, waits: .finish))
        // The first produce to end leaves the finish to the other one.
        let r18 = progress.end()
        #expect(!r18.finish && !r18.start)
        #expect(progress == .adding(count: 1, waits: .finish))
        let r19 = progress.end()
        #expect(r19.finish && !r19.start)
        #expect(progress == .none)
    }

    // MARK: ExclusivityProgress

    @Test func exclusivityRequestedThenGrantedThenReleased() {
        var progress = ExclusivityProgress.none
        #expect(!progress.wasRequested)
        let r20 = progress.release()
        #expect(!r20)
        progress.request()
        #expect(progress == .requested)
        #expect(progress.wasRequested)
        // Finished while waiting (withdrawn): nothing to give back.
        var withdrawn = progress
        let r21 = withdrawn.release()
        #expect(!r21)
        #expect(withdrawn == .requested)
        progress.grant()
        #expect(progress == .held)
        #expect(progress.wasRequested)
        let r22 = progress.release()
        #expect(r22)
        #expect(progress == .released)
        // Given back once only.
        let r23 = progress.release()
        #expect(!r23)
        progress.grant()
        #expect(progress == .released)
    }

    @Test func grantWithoutRequestChangesNothing() {
        var progress = ExclusivityProgress.none
        progress.grant()
        #expect(progress == .none)
    }

    // MARK: Layout

    /// The point of the value types is also a small pending procedure: each stays within a few
    /// bytes (see Benchmarks, "Memory per pending operation").
    @Test func valueTypesStaySmall() {
        #expect(MemoryLayout<EventDelivery>.size <= 16)
        #expect(MemoryLayout<ConditionProgress>.size == 8)
        #expect(MemoryLayout<ProduceProgress>.size == 4)
        #expect(MemoryLayout<ExclusivityProgress>.size == 1)
        #expect(MemoryLayout<ProcedureFlags>.size == 1)
        #expect(MemoryLayout<FirstCondition>.size == 8)
        #expect(MemoryLayout<FirstObserver>.size == 8)
        #expect(MemoryLayout<ProcedureOperation.DirectFinishSlot>.size == 1)
        #expect(MemoryLayout<ProcedureOperation.StartSlot>.size == 1)
    }
}
