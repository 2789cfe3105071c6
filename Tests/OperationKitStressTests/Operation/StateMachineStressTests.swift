import Dispatch
import OperationKit
import OperationKitTestSupport
import Synchronization
import Testing

extension StressTests {
    /// The public `OperationStateMachine` under races: `start()`, `finish()` and `cancel()` sent
    /// from several threads at once to each of many machines.
    @Suite("OperationStateMachine under races")
    struct StateMachineRaces {
        /// Counts what one machine did.
        final class MachineTally: Sendable {
            let executions = Atomic<Int>(0)
            let cancellations = Atomic<Int>(0)
            let finalizations = Atomic<Int>(0)
            let startWins = Atomic<Int>(0)
            let finishWins = Atomic<Int>(0)
            let cancelWins = Atomic<Int>(0)
            let blocksDone: Latch

            init(blocks: Int) { blocksDone = Latch(count: blocks) }
        }

        /// An owner for a machine; it has no state of its own.
        final class Owner: Sendable {}

        @Test("each machine starts once, finalizes once, runs each block at most once, never crashes")
        func startFinishCancelRace() throws {
            let count = Stress.count(5_000, minimum: 500)
            let blockQueue = DispatchQueue(label: "machine-blocks", attributes: .concurrent)
            let owners = (0..<count).map { _ in Owner() }
            var machines: [OperationStateMachine] = []
            var tallies: [MachineTally] = []
            for index in 0..<count {
                let machine = OperationStateMachine(operation: owners[index], dispatchQueue: blockQueue)
                // Execution and cancellation may each run at most once; finalization once.
                let tally = MachineTally(blocks: 1)
                try machine.setExecutionBlock { tally.executions.add(1, ordering: .relaxed) }
                try machine.setCancellationBlock { tally.cancellations.add(1, ordering: .relaxed) }
                try machine.setFinalizationBlock {
                    tally.finalizations.add(1, ordering: .relaxed)
                    tally.blocksDone.countDown()
                }
                machines.append(machine)
                tallies.append(tally)
            }
            let frozenMachines = machines
            let frozenTallies = tallies
            // Four threads per round send the three events in different orders to every machine.
            #expect(onThreads(4, label: "machine-race") { thread in
                for index in 0..<count {
                    let machine = frozenMachines[index]
                    let tally = frozenTallies[index]
                    let events = [0, 1, 2].shuffled()
                    for event in events {
                        switch (event + thread) % 3 {
                        case 0:
                            if (try? machine.start()) != nil { tally.startWins.add(1, ordering: .relaxed) }
                        case 1:
                            if (try? machine.finish()) != nil { tally.finishWins.add(1, ordering: .relaxed) }
                        default:
                            if machine.cancel() { tally.cancelWins.add(1, ordering: .relaxed) }
                        }
                    }
                }
            })
            // Every machine was started by someone; a few may still be executing: finish them.
            for machine in machines where !machine.isFinished { _ = try? machine.finish() }
            for tally in tallies { #expect(tally.blocksDone.wait(timeout: Stress.timeout)) }
            // Let the dispatched execution and cancellation blocks drain.
            let drained = Latch()
            blockQueue.async(flags: .barrier) { drained.countDown() }
            #expect(drained.wait(timeout: Stress.timeout))

            var problems: [String] = []
            for (index, tally) in tallies.enumerated() {
                let starts = tally.startWins.load(ordering: .relaxed)
                let finishes = tally.finishWins.load(ordering: .relaxed)
                let cancels = tally.cancelWins.load(ordering: .relaxed)
                let executions = tally.executions.load(ordering: .relaxed)
                let cancellations = tally.cancellations.load(ordering: .relaxed)
                let finalizations = tally.finalizations.load(ordering: .relaxed)
                if starts != 1 || finalizations != 1 || executions > 1 || cancellations > 1 || cancels > 1
                    || finishes > 1 || cancellations != cancels {
                    problems.append("machine \(index): starts \(starts) finishes \(finishes) cancels \(cancels) "
                        + "executions \(executions) cancellations \(cancellations) finalizations \(finalizations)")
                }
                if !machines[index].isFinished { problems.append("machine \(index) not finished") }
            }
            #expect(problems.isEmpty, "\(problems.prefix(5))")
            withExtendedLifetime(owners) {}
        }
    }
}
