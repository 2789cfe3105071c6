// MetricsInstrument against swift-metrics' TestMetrics, injected as the instrument's factory (no
// process-wide bootstrap): counters, timers and meters for synthetic events.

import MetricsTestKit
import OperationKit
@testable import OperationKitMetrics
import Testing

@Suite("MetricsInstrument")
struct MetricsInstrumentTests {
    @Test("a successful operation: added, started, finished, the wait and the run timed, meters back to 0")
    func successfulOperation() throws {
        let metrics = TestMetrics()
        let instrument = MetricsInstrument(factory: metrics)
        let queue = ConcurrentOperationQueue(name: "jobs")
        tellLifecycle(of: ClosureOperation(name: "a") {}, on: queue, to: instrument)

        let jobs = [("queue", "jobs")]
        #expect(try metrics.expectCounter("operationkit_operations_added_total", jobs).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_operations_started_total", jobs).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_operations_finished_total", jobs).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_operations_failed_total", jobs).totalValue == 0)
        #expect(try metrics.expectCounter("operationkit_operations_cancelled_total", jobs).totalValue == 0)
        #expect(try metrics.expectTimer("operationkit_operation_wait_duration_seconds", jobs).values == [2_000_000])
        #expect(try metrics.expectTimer("operationkit_operation_execution_duration_seconds", jobs).values == [3_000_000])
        let pending = try metrics.expectMeter("operationkit_operations_pending", jobs)
        let executing = try metrics.expectMeter("operationkit_operations_executing", jobs)
        #expect(pending.values == [1, 0])
        #expect(executing.values == [1, 0])
        #expect(instrument.trackedCount == 0)
    }

    @Test("failed and cancelled are counted as finished too; an operation cancelled before starting leaves pending")
    func failedAndCancelled() throws {
        let metrics = TestMetrics()
        let instrument = MetricsInstrument(factory: metrics)
        let queue = ConcurrentOperationQueue(name: "mixed")
        tellLifecycle(of: ClosureOperation {}, on: queue, to: instrument, outcome: .failed([TestFailure("x")]))
        let unstarted = ClosureOperation {}
        instrument.record(OperationEvent(.added, operation: unstarted, queue: queue))
        instrument.record(OperationEvent(.cancelled, operation: unstarted, queue: queue))
        instrument.record(OperationEvent(.finished(.cancelled([])), operation: unstarted, queue: queue))

        let mixed = [("queue", "mixed")]
        #expect(try metrics.expectCounter("operationkit_operations_added_total", mixed).totalValue == 2)
        #expect(try metrics.expectCounter("operationkit_operations_started_total", mixed).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_operations_finished_total", mixed).totalValue == 2)
        #expect(try metrics.expectCounter("operationkit_operations_failed_total", mixed).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_operations_cancelled_total", mixed).totalValue == 1)
        #expect(try metrics.expectTimer("operationkit_operation_wait_duration_seconds", mixed).values.count == 1)
        #expect(try metrics.expectMeter("operationkit_operations_pending", mixed).lastValue == 0)
        #expect(try metrics.expectMeter("operationkit_operations_executing", mixed).lastValue == 0)
        #expect(instrument.trackedCount == 0)
    }

    @Test("the queue dimension: the name, unnamed for a queue without one, none for an operation started by hand")
    func queueDimension() throws {
        let metrics = TestMetrics()
        let instrument = MetricsInstrument(factory: metrics)
        tellLifecycle(of: ClosureOperation {}, on: ConcurrentOperationQueue(), to: instrument)
        tellLifecycle(of: ClosureOperation {}, on: ConcurrentOperationQueue(), to: instrument)
        let byHand = ClosureOperation {}
        instrument.record(OperationEvent(.started, operation: byHand, queue: nil))
        instrument.record(OperationEvent(.finished(.succeeded), operation: byHand, queue: nil))

        #expect(try metrics.expectCounter("operationkit_operations_finished_total", [("queue", "unnamed")]).totalValue == 2)
        #expect(try metrics.expectCounter("operationkit_operations_finished_total", [("queue", "none")]).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_operations_added_total", [("queue", "none")]).totalValue == 0)
        #expect(metrics.counters(label: "operationkit_operations_finished_total").count == 2)
    }

    @Test("retries are counted; a label prefix replaces operationkit")
    func retriesAndPrefix() throws {
        let metrics = TestMetrics()
        let instrument = MetricsInstrument(factory: metrics, labelPrefix: "myapp")
        let queue = ConcurrentOperationQueue(name: "q")
        let operation = ClosureOperation {}
        instrument.record(OperationEvent(.added, operation: operation, queue: queue))
        instrument.record(OperationEvent(.retrying(attempt: 2, delay: .zero), operation: operation, queue: queue))
        instrument.record(OperationEvent(.retrying(attempt: 3, delay: .zero), operation: operation, queue: queue))
        #expect(try metrics.expectCounter("myapp_operations_retried_total", [("queue", "q")]).totalValue == 2)
        #expect(metrics.counters(label: "operationkit_operations_retried_total").isEmpty)
    }

    @Test("workflow tasks: started, finished, failed and cancelled runs, and the runs' durations")
    func workflowTasks() throws {
        let metrics = TestMetrics()
        let instrument = MetricsInstrument(factory: metrics)
        let timeline = Timeline()
        let compile = WorkflowTask(name: "compile")
        let test = WorkflowTask(name: "test")
        func tell(_ task: WorkflowTask, _ from: WorkflowTaskState, _ to: WorkflowTaskState, at milliseconds: Int) {
            instrument.record(WorkflowTaskEvent(task: task, workflowName: "ci", from: from, to: to, time: timeline.at(milliseconds)))
        }
        tell(compile, .ready, .executing, at: 0)
        tell(compile, .executing, .failed, at: 4)
        tell(compile, .failed, .pending, at: 5)
        tell(compile, .pending, .ready, at: 5)
        tell(compile, .ready, .executing, at: 6)
        tell(compile, .executing, .finished, at: 9)
        tell(test, .ready, .pending, at: 0)
        tell(test, .pending, .cancelled, at: 10)

        let ci = [("workflow", "ci")]
        #expect(try metrics.expectCounter("operationkit_workflow_tasks_started_total", ci).totalValue == 2)
        #expect(try metrics.expectCounter("operationkit_workflow_tasks_finished_total", ci).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_workflow_tasks_failed_total", ci).totalValue == 1)
        #expect(try metrics.expectCounter("operationkit_workflow_tasks_cancelled_total", ci).totalValue == 1)
        #expect(try metrics.expectTimer("operationkit_workflow_task_run_duration_seconds", ci).values == [4_000_000, 3_000_000])
        #expect(instrument.trackedCount == 0)
    }
}
