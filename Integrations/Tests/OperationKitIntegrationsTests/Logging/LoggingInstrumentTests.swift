// LoggingInstrument against swift-log's InMemoryLogHandler (a capturing handler): lines, levels,
// metadata keys and durations for synthetic operation, workflow task and state machine events.

import InMemoryLogging
import Logging
import OperationKit
@testable import OperationKitLogging
import Testing

@Suite("LoggingInstrument")
struct LoggingInstrumentTests {
    /// A logger at `level` writing to a capturing handler, and the handler.
    func capture(at level: Logger.Level) -> (Logger, InMemoryLogHandler) {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "operationkit-tests") { _ in handler }
        logger.logLevel = level
        return (logger, handler)
    }

    @Test("at .info, an operation that succeeds writes nothing (the defaults keep production quiet)")
    func quietAtInfo() {
        let (logger, handler) = capture(at: .info)
        let instrument = LoggingInstrument(logger: logger)
        let queue = ConcurrentOperationQueue(name: "quiet")
        tellLifecycle(of: ClosureOperation(name: "fine") {}, on: queue, to: instrument)
        #expect(handler.entries.isEmpty)
        #expect(instrument.trackedCount == 0)
    }

    @Test("at .trace, a line per event with operation, queue, state, wait and duration")
    func everyEventAtTrace() throws {
        let (logger, handler) = capture(at: .trace)
        let instrument = LoggingInstrument(logger: logger)
        let queue = ConcurrentOperationQueue(name: "jobs")
        tellLifecycle(of: ClosureOperation(name: "fetch") {}, on: queue, to: instrument)

        let entries = handler.entries
        #expect(entries.map(\.message.description) == [
            "operation added", "operation ready", "operation started", "operation finished",
        ])
        #expect(entries.map(\.level) == [.trace, .trace, .debug, .debug])
        for entry in entries {
            #expect(entry.metadata["operation"] == "fetch")
            #expect(entry.metadata["queue"] == "jobs")
        }
        #expect(entries.map { $0.metadata["state"]?.description } == ["pending", "ready", "executing", "finished"])
        #expect(entries[2].metadata["wait_ms"]?.description == "2.0")
        let finished = try #require(entries.last)
        #expect(finished.metadata["outcome"] == "succeeded")
        #expect(finished.metadata["duration_ms"]?.description == "3.0")
        #expect(finished.metadata["error"] == nil)
        #expect(instrument.trackedCount == 0)
    }

    @Test("a failure is a warning with the error, even at .info; more than one error lists them all")
    func failureIsAWarning() throws {
        let (logger, handler) = capture(at: .info)
        let instrument = LoggingInstrument(logger: logger)
        let operation = ClosureOperation(name: "upload") {}
        let errors: [any Error] = [TestFailure("disk full"), TestFailure("retry later")]
        tellLifecycle(of: operation, on: nil, to: instrument, outcome: .failed(errors))

        let entry = try #require(handler.entries.first)
        #expect(handler.entries.count == 1)
        #expect(entry.level == .warning)
        #expect(entry.message == "operation finished")
        #expect(entry.metadata["outcome"] == "failed")
        #expect(entry.metadata["error"] == "disk full")
        #expect(entry.metadata["errors"] == ["disk full", "retry later"])
        #expect(entry.metadata["duration_ms"]?.description == "3.0")
        #expect(entry.metadata["queue"] == nil)  // started by hand
        #expect((entry.error as? TestFailure)?.description == "disk full")
    }

    @Test("levels are configurable per kind of event, and nil leaves a kind out")
    func configurableLevels() {
        let (logger, handler) = capture(at: .info)
        var levels = LoggingInstrument.Levels()
        levels.started = .notice
        levels.succeeded = .info
        levels.failed = nil
        let instrument = LoggingInstrument(logger: logger, levels: levels)
        tellLifecycle(of: ClosureOperation(name: "a") {}, on: nil, to: instrument)
        tellLifecycle(of: ClosureOperation(name: "b") {}, on: nil, to: instrument, outcome: .failed([TestFailure("x")]))
        #expect(handler.entries.map { "\($0.level) \($0.message) \($0.metadata["operation"]!)" } == [
            "notice operation started a", "info operation finished a", "notice operation started b",
        ])
        #expect(instrument.trackedCount == 0)
    }

    @Test("Levels.all shows every event at one level")
    func allAtOneLevel() {
        let (logger, handler) = capture(at: .notice)
        let instrument = LoggingInstrument(logger: logger, levels: .all(.notice))
        tellLifecycle(of: ClosureOperation(name: "a") {}, on: nil, to: instrument, outcome: .cancelled([]))
        #expect(handler.entries.count == 4)
        #expect(handler.entries.allSatisfy { $0.level == .notice })
        #expect(handler.entries.last?.metadata["outcome"] == "cancelled")
    }

    @Test("no table entries are kept when no line shows a duration")
    func noTimingWhenQuiet() {
        let (logger, _) = capture(at: .error)
        let instrument = LoggingInstrument(logger: logger)
        let operation = ClosureOperation(name: "a") {}
        instrument.record(OperationEvent(.added, operation: operation, queue: nil))
        instrument.record(OperationEvent(.started, operation: operation, queue: nil))
        #expect(instrument.trackedCount == 0)
    }

    @Test("procedure events: conditions, exclusivity, retry and produced operations")
    func procedureEvents() throws {
        let (logger, handler) = capture(at: .trace)
        let instrument = LoggingInstrument(logger: logger)
        let operation = ClosureOperation(name: "p") {}
        let produced = ClosureOperation(name: "child") {}
        let kinds: [OperationEvent.Kind] = [
            .conditionsEvaluated([(name: "Reachable", result: .satisfied), (name: "LoggedIn", result: .failed(TestFailure("no user")))]),
            .exclusivityWaiting(["b", "a"]),
            .exclusivityGranted(["a"]),
            .retrying(attempt: 2, delay: .milliseconds(250)),
            .produced(produced),
            .cancelled,
        ]
        for kind in kinds { instrument.record(OperationEvent(kind, operation: operation, queue: nil)) }

        let entries = handler.entries
        #expect(entries.map(\.message.description) == [
            "operation conditions evaluated", "operation waiting for exclusivity", "operation granted exclusivity",
            "operation retrying", "operation produced an operation", "operation cancelled",
        ])
        #expect(entries[0].metadata["conditions"] == ["Reachable": "satisfied", "LoggedIn": "failed"])
        #expect(entries[0].metadata["error"] == "no user")
        #expect(entries[1].metadata["categories"] == ["a", "b"])
        #expect(entries[3].level == .info)
        #expect(entries[3].metadata["attempt"]?.description == "2")
        #expect(entries[3].metadata["delay_ms"]?.description == "250.0")
        #expect(entries[4].metadata["produced"] == "child")
        #expect(entries[5].level == .debug)
    }

    @Test("workflow tasks: a line per transition, the run's duration, a failure as a warning")
    func workflowTasks() throws {
        let (logger, handler) = capture(at: .trace)
        let instrument = LoggingInstrument(logger: logger)
        let task = WorkflowTask(name: "compile")
        let timeline = Timeline()
        instrument.record(WorkflowTaskEvent(task: task, workflowName: "build", from: .ready, to: .executing, time: timeline.at(0)))
        instrument.record(
            WorkflowTaskEvent(task: task, workflowName: "build", from: .executing, to: .failed, error: TestFailure("syntax"), time: timeline.at(7)))
        instrument.record(WorkflowTaskEvent(task: task, workflowName: "build", from: .failed, to: .pending, time: timeline.at(8)))

        let entries = handler.entries
        #expect(entries.map(\.message.description) == ["workflow task executing", "workflow task failed", "workflow task pending"])
        #expect(entries.map(\.level) == [.debug, .warning, .trace])
        let failed = entries[1]
        #expect(failed.metadata["workflow"] == "build")
        #expect(failed.metadata["task"] == "compile")
        #expect(failed.metadata["from"] == "executing")
        #expect(failed.metadata["to"] == "failed")
        #expect(failed.metadata["error"] == "syntax")
        #expect(failed.metadata["duration_ms"]?.description == "7.0")
        #expect(instrument.trackedCount == 0)
    }

    @Test("state machine transitions at trace")
    func stateMachines() {
        let (logger, handler) = capture(at: .trace)
        let instrument = LoggingInstrument(logger: logger)
        instrument.record(StateMachineEvent(machineName: "connection", from: "idle", to: "connecting"))
        #expect(handler.entries.map(\.level) == [.trace])
        #expect(handler.entries.first?.metadata == ["machine": "connection", "from": "idle", "to": "connecting"])
    }
}
