// TimelineRecorder: the Chrome trace JSON parsed back and checked for its structure — slices per
// operation, lanes without overlap, flow arrows in pairs along dependency edges — and its cap.

import Foundation
import OperationKit
import OperationKitTestSupport
import Testing

@Suite("Observability: TimelineRecorder's Chrome trace", .offThePool, .exclusiveInstrumentation)
struct TimelineRecorderTests {
    typealias Event = [String: Any]

    static func parse(_ json: String) throws -> (root: [String: Any], events: [Event]) {
        let object = try JSONSerialization.jsonObject(with: Data(json.utf8))
        let root = try #require(object as? [String: Any])
        let events = try #require(root["traceEvents"] as? [Event])
        return (root, events)
    }

    static func number(_ event: Event, _ key: String) -> Double? { (event[key] as? NSNumber)?.doubleValue }

    /// Runs a small graph on a queue of two lanes, a workflow and a state machine, all recorded.
    static func recordRun(_ recorder: TimelineRecorder) async throws -> [String: ConcurrentOperation] {
        let queue = try ConcurrentOperationQueue(name: "timeline", maxConcurrentOperationCount: 2)
        queue.instrument = recorder
        let bothRunning = Latch(count: 2)
        let a = ClosureOperation(name: "A") { bothRunning.countDown(); _ = bothRunning.wait(timeout: operationTestTimeout) }
        let b = ClosureOperation(name: "B") {}
        let c = ClosureOperation(name: "C") { bothRunning.countDown(); _ = bothRunning.wait(timeout: operationTestTimeout) }
        let d = ClosureOperation(name: "D") {}
        let failing = ClosureProcedure<Void>(name: "F") { () throws -> Void in throw InstrumentTestError(3) }
        try b.addDependency(a)
        try failing.addDependency(b)
        d.cancel()
        try queue.addOperations([a, b, c, d, failing], waitUntilFinished: false)
        #expect(await queue.waitUntilAllOperationsAreFinishedWithin())

        let workflow = Workflow(name: "flow")
        workflow.instrument = recorder
        let finished = Latch(count: 2)
        let first = ClosureTask(name: "T1") { run in run.finish(with: nil); finished.countDown() }
        let second = ClosureTask(name: "T2") { run in run.finish(with: nil); finished.countDown() }
        try workflow.add(first)
        try workflow.add(second, prerequisites: [first])
        workflow.start()
        _ = try await awaitWithin { await workflow.outcome }

        enum Door: Hashable, Sendable { case open, shut }
        let machine = try StateMachine<Door>(name: "door") {
            StateDefinition(.open, allowedTransitions: .shut)
            StateDefinition(.shut, allowedTransitions: .open)
        }
        machine.instrument = recorder
        _ = try await machine.transition(to: .shut)
        return ["A": a, "B": b, "C": c, "D": d, "F": failing]
    }

    @Test("the JSON: traceEvents with the keys each phase needs, a slice per operation, lanes without overlap, flows in pairs along dependencies")
    func structure() async throws {
        let recorder = TimelineRecorder()
        _ = try await Self.recordRun(recorder)
        let (root, events) = try Self.parse(recorder.chromeTraceJSON())
        #expect(root["displayTimeUnit"] as? String == "ms")
        #expect((root["otherData"] as? [String: Any])?["dropped_events"] as? String == "0")

        for event in events {
            let phase = try #require(event["ph"] as? String)
            #expect(event["name"] is String && event["pid"] is NSNumber && event["tid"] is NSNumber, "\(event)")
            switch phase {
            case "X":
                #expect(Self.number(event, "ts") != nil && (Self.number(event, "dur") ?? -1) >= 0, "\(event)")
                #expect(event["args"] is [String: Any])
            case "i":
                #expect(Self.number(event, "ts") != nil && event["s"] as? String == "t", "\(event)")
            case "s", "f":
                #expect(Self.number(event, "ts") != nil && event["id"] is NSNumber, "\(event)")
                if phase == "f" { #expect(event["bp"] as? String == "e") }
            case "M":
                #expect(event["args"] is [String: Any])
            default:
                Issue.record("unexpected phase \(phase)")
            }
        }

        let slices = events.filter { $0["ph"] as? String == "X" }
        func slice(_ name: String) -> [Event] { slices.filter { $0["name"] as? String == name } }
        for name in ["A", "B", "C", "F", "T1", "T2"] { #expect(slice(name).count == 1, "one slice for \(name)") }
        #expect(slice("D").isEmpty)
        #expect(events.contains { $0["name"] as? String == "D (not executed)" && $0["ph"] as? String == "i" })
        let failed = try #require(slice("F").first?["args"] as? [String: Any])
        #expect(failed["outcome"] as? String == "failed")
        #expect((failed["errors"] as? [String]) == ["InstrumentTestError(3)"])
        #expect(failed["queue"] as? String == "timeline")
        #expect(Self.number(try #require(slice("B").first?["args"] as? [String: Any]), "wait_us") != nil)

        // Lanes: named after the queue; A and C overlapped, so two lanes; none overlaps itself.
        let laneNames = events.filter { $0["ph"] as? String == "M" && $0["name"] as? String == "thread_name" }
            .compactMap { ($0["args"] as? [String: Any])?["name"] as? String }
        #expect(laneNames.contains("timeline #1") && laneNames.contains("timeline #2"))
        #expect(laneNames.contains("flow #1") && laneNames.contains("door"))
        var byLane: [String: [(Double, Double)]] = [:]
        for event in slices {
            let key = "\(event["pid"]!)/\(event["tid"]!)"
            byLane[key, default: []].append((Self.number(event, "ts")!, Self.number(event, "dur")!))
        }
        for (lane, intervals) in byLane {
            let sorted = intervals.sorted { $0.0 < $1.0 }
            for (earlier, later) in zip(sorted, sorted.dropFirst()) {
                #expect(later.0 >= earlier.0 + earlier.1 - 0.0005, "overlap in lane \(lane)")
            }
        }

        // Flows: each id once as s and once as f; each end inside a slice of its lane.
        func enclosing(_ event: Event) -> String? {
            let ts = Self.number(event, "ts")!
            return slices.first {
                "\($0["pid"]!)/\($0["tid"]!)" == "\(event["pid"]!)/\(event["tid"]!)"
                    && Self.number($0, "ts")! <= ts + 0.0005 && ts <= Self.number($0, "ts")! + Self.number($0, "dur")! + 0.0005
            }?["name"] as? String
        }
        let starts = events.filter { $0["ph"] as? String == "s" }
        let ends = events.filter { $0["ph"] as? String == "f" }
        #expect(starts.count == ends.count && !starts.isEmpty)
        var edges: Set<String> = []
        for start in starts {
            let id = (start["id"] as! NSNumber).intValue
            let matching = ends.filter { ($0["id"] as! NSNumber).intValue == id }
            #expect(matching.count == 1)
            guard let end = matching.first, let from = enclosing(start), let to = enclosing(end) else {
                Issue.record("flow \(id) not bound to slices")
                continue
            }
            edges.insert("\(from)->\(to)")
        }
        #expect(edges == ["A->B", "B->F"])
    }

    @Test("write(toFile:) writes the same JSON; a path that cannot be opened throws")
    func writing() async throws {
        let recorder = TimelineRecorder()
        _ = try await Self.recordRun(recorder)
        let path = NSTemporaryDirectory() + "operationkit-timeline-\(UInt(bitPattern: ObjectIdentifier(recorder).hashValue)).json"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try recorder.write(toFile: path)
        let written = try String(contentsOfFile: path, encoding: .utf8)
        #expect(try Self.parse(written).events.count == Self.parse(recorder.chromeTraceJSON()).events.count)
        #expect(throws: TimelineRecorder.WriteError.self) { try recorder.write(toFile: "/nonexistent-directory/trace.json") }
    }

    @Test("memory is capped: events beyond maxEvents are dropped and counted")
    func cap() throws {
        let recorder = TimelineRecorder(maxEvents: 5)
        let queue = ConcurrentOperationQueue(name: "capped")
        queue.instrument = recorder
        for index in 0..<10 { try queue.addOperation(ClosureOperation(name: "op\(index)") {}) }
        #expect(queue.waitUntilAllOperationsAreFinishedBlocking(timeout: operationTestTimeout))
        #expect(recorder.recordedEventCount == 5)
        #expect(recorder.droppedEventCount == 35)
        let (root, _) = try Self.parse(recorder.chromeTraceJSON())
        #expect((root["otherData"] as? [String: Any])?["dropped_events"] as? String == "35")
    }
}
