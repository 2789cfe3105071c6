import Dispatch
import OperationKit
import OperationKitTestSupport
import Testing

/// Illegal events on the public `OperationStateMachine` (A4, A6): each is refused with a typed
/// error naming the owner, the state is unchanged and no block runs again.
extension MisuseTests {
    /// The owner of the machines below; errors name it by its type.
    final class MachineOwner {}

    /// A machine on a private serial queue, with counters for its blocks.
    struct CountedMachine {
        let owner = MachineOwner()
        let tagged = TaggedDispatchQueue("misuse")
        let machine: OperationStateMachine
        let executions = AtomicCounter()
        let finalizations = AtomicCounter()

        init(withExecutionBlock: Bool = true) throws {
            machine = OperationStateMachine(operation: owner, dispatchQueue: tagged.queue)
            let executions = executions
            let finalizations = finalizations
            if withExecutionBlock { try machine.setExecutionBlock { executions.increment() } }
            try machine.setFinalizationBlock { finalizations.increment() }
        }

        /// Waits until every block dispatched so far has run.
        func flush() { tagged.queue.sync {} }

        var state: [Bool] { [machine.isReady, machine.isExecuting, machine.isFinished, machine.isCancelled] }
    }

    static let ready = [true, false, false, false]
    static let executing = [false, true, false, false]
    static let finished = [false, false, true, false]

    @Test("A6 finish before start: notStarted, still ready, no finalization")
    func machineFinishBeforeStart() throws {
        let counted = try CountedMachine()
        let error = try #require(caughtOperationError { try counted.machine.finish() })
        #expect(error.code == .notStarted)
        #expect(error.operationNames == ["MachineOwner"])
        #expect(counted.state == Self.ready)
        #expect(counted.finalizations.value == 0)
        try counted.machine.start()  // the machine still works
        counted.flush()
        #expect(counted.executions.value == 1)
    }

    @Test("A6 start twice: alreadyStarted, still executing, the execution block runs once")
    func machineStartTwice() throws {
        let counted = try CountedMachine()
        try counted.machine.start()
        let error = try #require(caughtOperationError { try counted.machine.start() })
        #expect(error.code == .alreadyStarted)
        #expect(error.operationNames == ["MachineOwner"])
        #expect(counted.state == Self.executing)
        counted.flush()
        #expect(counted.executions.value == 1)
        try counted.machine.finish()
        #expect(counted.state == Self.finished)
    }

    @Test("A6/M95 finish twice: alreadyFinished, the finalization block does not run again")
    func machineFinishTwice() throws {
        let counted = try CountedMachine()
        try counted.machine.start()
        try counted.machine.finish()
        let error = try #require(caughtOperationError { try counted.machine.finish() })
        #expect(error.code == .alreadyFinished)
        #expect(error.operationNames == ["MachineOwner"])
        #expect(counted.state == Self.finished)
        #expect(counted.finalizations.value == 1)
    }

    @Test("A6 start after finish: alreadyFinished, nothing runs again")
    func machineStartAfterFinish() throws {
        let counted = try CountedMachine()
        try counted.machine.start()
        try counted.machine.finish()
        let error = try #require(caughtOperationError { try counted.machine.start() })
        #expect(error.code == .alreadyFinished)
        #expect(error.operationNames == ["MachineOwner"])
        #expect(counted.state == Self.finished)
        counted.flush()
        #expect(counted.executions.value == 1)
        #expect(counted.finalizations.value == 1)
    }

    @Test("A4 start with no execution block: noExecutionBlock, still ready; fine once one is set")
    func machineStartWithoutExecutionBlock() throws {
        let counted = try CountedMachine(withExecutionBlock: false)
        let error = try #require(caughtOperationError { try counted.machine.start() })
        #expect(error.code == .noExecutionBlock)
        #expect(error.operationNames == ["MachineOwner"])
        #expect(counted.state == Self.ready)
        let executions = counted.executions
        try counted.machine.setExecutionBlock { executions.increment() }
        try counted.machine.start()
        counted.flush()
        #expect(counted.executions.value == 1)
    }

    @Test("A6 configuring blocks after start: alreadyStarted, the configured blocks stay")
    func machineConfigureAfterStart() throws {
        let counted = try CountedMachine()
        try counted.machine.start()
        let late = AtomicCounter()
        let errors = [
            caughtOperationError { try counted.machine.setExecutionBlock { late.increment() } },
            caughtOperationError { try counted.machine.setCancellationBlock { late.increment() } },
            caughtOperationError { try counted.machine.setFinalizationBlock { late.increment() } },
        ]
        #expect(errors.map { $0?.code } == [.alreadyStarted, .alreadyStarted, .alreadyStarted])
        #expect(errors.allSatisfy { $0?.operationNames == ["MachineOwner"] })
        counted.machine.cancel()
        try counted.machine.finish()
        counted.flush()
        #expect(late.value == 0)
        #expect(counted.executions.value == 1)
        #expect(counted.finalizations.value == 1)
        let afterFinish = caughtOperationError { try counted.machine.setFinalizationBlock { late.increment() } }
        #expect(afterFinish?.code == .alreadyStarted)
    }
}
