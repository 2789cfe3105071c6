// TimelineRecorder: the recorded run as Chrome trace event format JSON (lanes, slices, flow
// arrows, marks), and writing it to a file through the C library.

#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension TimelineRecorder {
    /// Why ``write(toFile:)`` failed.
    public struct WriteError: Error, CustomStringConvertible {
        /// The file.
        public let path: String
        /// The C library's `errno`.
        public let code: Int32

        /// The path and the C library's message.
        public var description: String { "cannot write \(path): \(String(cString: strerror(code)))" }
    }

    /// Writes ``chromeTraceJSON()`` to the file at `path` (made or replaced), to open in
    /// [Perfetto](https://ui.perfetto.dev) or `chrome://tracing`.
    ///
    /// - Parameter path: The file's path.
    /// - Throws: ``WriteError`` if the file cannot be opened or written.
    public func write(toFile path: String) throws(WriteError) {
        var json = chromeTraceJSON()
        guard let file = fopen(path, "w") else { throw WriteError(path: path, code: errno) }
        let written = json.withUTF8 { fwrite($0.baseAddress, 1, $0.count, file) }
        let failed = written != json.utf8.count
        let code = errno
        if fclose(file) != 0 || failed { throw WriteError(path: path, code: failed ? code : errno) }
    }

    /// The recorded run in the Chrome trace event format (an object with a `traceEvents` array),
    /// which Perfetto and `chrome://tracing` open. Times are in microseconds from the first
    /// event recorded.
    ///
    /// - Operations: process 1, a lane ("thread") per queue and concurrency lane, named like
    ///   `images #2`; a complete slice (`"ph":"X"`) per operation that started, from its start
    ///   to its finish (to now if it runs still), with the arguments `queue`, `type`, `outcome`,
    ///   `errors`, `wait_us` (from added to started), and `conditions` and
    ///   `exclusivity_wait_us` for procedures; a mark (`"ph":"i"`) for an operation that
    ///   finished without executing, for a cancel and for a retry; a flow arrow (`"ph":"s"` then
    ///   `"f"`, bound to the enclosing slices) from each dependency to its dependent and from a
    ///   procedure to what it produced.
    /// - Workflow tasks: process 2, lanes per workflow; a slice per run, from executing to its
    ///   end (`outcome`: finished, failed, cancelled or pending after a reset).
    /// - State machines: process 3, a lane per machine, a mark per transition.
    ///
    /// - Returns: The JSON text.
    public func chromeTraceJSON() -> String {
        let now = ContinuousClock.now
        return withState { state in
            var trace = ChromeTrace(state: state, now: now, maxEvents: maxEvents)
            return trace.json()
        }
    }
}

/// Builds the JSON of a recorded state.
private struct ChromeTrace {
    let state: TimelineRecorder.State
    let now: ContinuousClock.Instant
    let maxEvents: Int
    let origin: ContinuousClock.Instant
    var out = ""
    var first = true

    init(state: TimelineRecorder.State, now: ContinuousClock.Instant, maxEvents: Int) {
        self.state = state
        self.now = now
        self.maxEvents = maxEvents
        var origin = now
        for operation in state.operations {
            for time in [operation.added, operation.ready, operation.started, operation.finished] {
                if let time, time < origin { origin = time }
            }
            for mark in operation.marks where mark.time < origin { origin = mark.time }
        }
        for task in state.tasks where task.started < origin { origin = task.started }
        for (_, mark) in state.taskMarks where mark.time < origin { origin = mark.time }
        for mark in state.machineMarks where mark.time < origin { origin = mark.time }
        self.origin = origin
    }

    /// Nanoseconds from the origin.
    func ns(_ time: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (time - origin).components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// Microseconds with three decimals (exact nanoseconds), as JSON.
    static func micros(_ nanoseconds: Int64) -> String {
        let value = max(0, nanoseconds)
        let fraction = String(value % 1000)
        return "\(value / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)"
    }

    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }

    /// Appends one event object made of already encoded fields.
    mutating func emit(_ fields: [(String, String)]) {
        out += first ? "\n" : ",\n"
        first = false
        out += "{" + fields.map { "\(Self.quoted($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    static func object(_ fields: [(String, String)]) -> String {
        "{" + fields.map { "\(quoted($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    mutating func metadata(_ name: String, pid: Int, tid: Int, _ value: String) {
        emit([("name", Self.quoted(name)), ("ph", "\"M\""), ("pid", "\(pid)"), ("tid", "\(tid)"),
              ("args", Self.object([("name", Self.quoted(value))]))])
    }

    /// Assigns each interval a lane such that the intervals of one lane never overlap (touching
    /// is allowed): by start, each to the first lane free by then. Returns the lane per interval
    /// (from 0) and the number of lanes.
    static func lanes(_ intervals: [(start: Int64, end: Int64)]) -> (lanes: [Int], count: Int) {
        var result = [Int](repeating: 0, count: intervals.count)
        var ends: [Int64] = []
        for index in intervals.indices.sorted(by: { (intervals[$0].start, $0) < (intervals[$1].start, $1) }) {
            let interval = intervals[index]
            if let lane = ends.firstIndex(where: { $0 <= interval.start }) {
                result[index] = lane
                ends[lane] = interval.end
            } else {
                result[index] = ends.count
                ends.append(interval.end)
            }
        }
        return (result, max(ends.count, 1))
    }

    mutating func json() -> String {
        out = "{\"displayTimeUnit\":\"ms\",\"otherData\":"
        out += Self.object([
            ("generator", Self.quoted("OperationKit TimelineRecorder")),
            ("recorded_events", Self.quoted("\(state.eventCount)")),
            ("dropped_events", Self.quoted("\(state.dropped)")),
            ("max_events", Self.quoted("\(maxEvents)")),
        ])
        out += ",\"traceEvents\":["
        operations()
        tasks()
        machines()
        out += "\n]}\n"
        return out
    }
}

extension ChromeTrace {
    /// Process 1: the operations, a lane per queue and concurrency lane.
    mutating func operations() {
        let records = state.operations
        guard !records.isEmpty else { return }
        metadata("process_name", pid: 1, tid: 0, "Operations")
        // Slices by queue (index + 1: 0 is "started by hand").
        var slices = [[(record: Int, start: Int64, end: Int64)]](repeating: [], count: state.queues.count + 1)
        for (index, record) in records.enumerated() {
            guard let started = record.started else { continue }
            let start = ns(started)
            slices[record.queue + 1].append((index, start, max(start, ns(record.finished ?? now))))
        }
        var tidOfRecord = [Int](repeating: 0, count: records.count)
        var firstTidOfQueue = [Int](repeating: 0, count: state.queues.count + 1)
        var interval = [(start: Int64, end: Int64)?](repeating: nil, count: records.count)
        var nextTid = 1
        for queue in slices.indices {
            let name = queue == 0 ? "started by hand" : state.queues[queue - 1]
            let used = queue == 0 ? !slices[0].isEmpty || records.contains { $0.queue == -1 } : true
            guard used else { continue }
            let (lanes, count) = Self.lanes(slices[queue].map { (start: $0.start, end: $0.end) })
            firstTidOfQueue[queue] = nextTid
            for lane in 0..<count {
                metadata("thread_name", pid: 1, tid: nextTid + lane, "\(name) #\(lane + 1)")
                emit([("name", "\"thread_sort_index\""), ("ph", "\"M\""), ("pid", "1"), ("tid", "\(nextTid + lane)"),
                      ("args", Self.object([("sort_index", "\(nextTid + lane)")]))])
            }
            for (slice, lane) in zip(slices[queue], lanes) {
                tidOfRecord[slice.record] = nextTid + lane
                interval[slice.record] = (slice.start, slice.end)
            }
            nextTid += count
        }
        for (index, record) in records.enumerated() {
            let queueName = record.queue >= 0 ? state.queues[record.queue] : ""
            guard let slice = interval[index] else {
                tidOfRecord[index] = firstTidOfQueue[record.queue + 1]
                // Finished without executing (cancelled before it started): a mark.
                if let finished = record.finished {
                    emit([("name", Self.quoted("\(record.name) (not executed)")), ("cat", "\"operation\""),
                          ("ph", "\"i\""), ("s", "\"t\""), ("ts", Self.micros(ns(finished))), ("pid", "1"),
                          ("tid", "\(tidOfRecord[index])"), ("args", Self.object(arguments(of: record, queue: queueName)))])
                }
                continue
            }
            emit([("name", Self.quoted(record.name)), ("cat", "\"operation\""), ("ph", "\"X\""),
                  ("ts", Self.micros(slice.start)), ("dur", Self.micros(slice.end - slice.start)), ("pid", "1"),
                  ("tid", "\(tidOfRecord[index])"), ("args", Self.object(arguments(of: record, queue: queueName)))])
        }
        for (index, record) in records.enumerated() {
            for mark in record.marks {
                emit([("name", Self.quoted(mark.name)), ("cat", "\"operation\""), ("ph", "\"i\""), ("s", "\"t\""),
                      ("ts", Self.micros(ns(mark.time))), ("pid", "1"), ("tid", "\(tidOfRecord[index])"),
                      ("args", Self.object([("operation", Self.quoted(record.name))] + mark.args.map { ($0.0, Self.quoted($0.1)) }))])
            }
        }
        // Flow arrows: from the end of each dependency's slice to the start of its dependent's;
        // from a procedure's slice, when it produced an operation, to that operation's start.
        var flowID = 0
        for (index, record) in records.enumerated() {
            guard let target = interval[index] else { continue }
            var sources: [(record: Int, at: Int64, name: String)] = record.dependencies.compactMap { dependency in
                guard let source = interval[dependency] else { return nil }
                return (dependency, max(source.start, source.end - 1), "dependency")
            }
            if let producer = record.producer, let source = interval[producer] {
                let at = record.added.map { ns($0) } ?? source.end
                sources.append((producer, min(max(at, source.start), max(source.start, source.end - 1)), "produced"))
            }
            for source in sources {
                flowID += 1
                emit([("name", Self.quoted(source.name)), ("cat", Self.quoted(source.name)), ("ph", "\"s\""),
                      ("id", "\(flowID)"), ("ts", Self.micros(source.at)), ("pid", "1"), ("tid", "\(tidOfRecord[source.record])")])
                emit([("name", Self.quoted(source.name)), ("cat", Self.quoted(source.name)), ("ph", "\"f\""), ("bp", "\"e\""),
                      ("id", "\(flowID)"), ("ts", Self.micros(target.start)), ("pid", "1"), ("tid", "\(tidOfRecord[index])")])
            }
        }
    }

    func arguments(of record: TimelineRecorder.OperationRecord, queue: String) -> [(String, String)] {
        var args: [(String, String)] = [("type", Self.quoted(record.type))]
        if !queue.isEmpty { args.append(("queue", Self.quoted(queue))) }
        args.append(("outcome", Self.quoted(record.outcome ?? (record.started == nil ? "pending" : "executing"))))
        if !record.errors.isEmpty { args.append(("errors", "[" + record.errors.map(Self.quoted).joined(separator: ",") + "]")) }
        if let added = record.added, let started = record.started {
            args.append(("wait_us", Self.micros(ns(started) - ns(added))))
        }
        if let conditions = record.conditions { args.append(("conditions", Self.quoted(conditions))) }
        if let waiting = record.exclusivityWaiting, let granted = record.exclusivityGranted {
            args.append(("exclusivity_wait_us", Self.micros(ns(granted) - ns(waiting))))
        }
        return args
    }

    /// Process 2: workflow task runs, lanes per workflow.
    mutating func tasks() {
        guard !state.tasks.isEmpty || !state.taskMarks.isEmpty else { return }
        metadata("process_name", pid: 2, tid: 0, "Workflows")
        var nextTid = 1
        for (workflow, name) in state.workflows.enumerated() {
            let runs = state.tasks.filter { $0.workflow == workflow }
            let intervals = runs.map { run -> (start: Int64, end: Int64) in
                let start = ns(run.started)
                return (start, max(start, ns(run.ended ?? now)))
            }
            let (lanes, count) = Self.lanes(intervals)
            for lane in 0..<count { metadata("thread_name", pid: 2, tid: nextTid + lane, "\(name) #\(lane + 1)") }
            for ((run, slice), lane) in zip(zip(runs, intervals), lanes) {
                var args: [(String, String)] = [("workflow", Self.quoted(name)), ("outcome", Self.quoted(run.outcome ?? "executing"))]
                if let error = run.error { args.append(("error", Self.quoted(error))) }
                emit([("name", Self.quoted(run.name)), ("cat", "\"workflow_task\""), ("ph", "\"X\""),
                      ("ts", Self.micros(slice.start)), ("dur", Self.micros(slice.end - slice.start)), ("pid", "2"),
                      ("tid", "\(nextTid + lane)"), ("args", Self.object(args))])
            }
            for (_, mark) in state.taskMarks.filter({ $0.workflow == workflow }) {
                emit([("name", Self.quoted(mark.name)), ("cat", "\"workflow_task\""), ("ph", "\"i\""), ("s", "\"t\""),
                      ("ts", Self.micros(ns(mark.time))), ("pid", "2"), ("tid", "\(nextTid)")])
            }
            nextTid += count
        }
    }

    /// Process 3: state machines, a lane each, a mark per transition.
    mutating func machines() {
        guard !state.machineMarks.isEmpty else { return }
        metadata("process_name", pid: 3, tid: 0, "State machines")
        for (index, name) in state.machines.enumerated() { metadata("thread_name", pid: 3, tid: index + 1, name) }
        for mark in state.machineMarks {
            emit([("name", Self.quoted("\(mark.from) → \(mark.to)")), ("cat", "\"state_machine\""), ("ph", "\"i\""),
                  ("s", "\"t\""), ("ts", Self.micros(ns(mark.time))), ("pid", "3"), ("tid", "\(mark.machine + 1)"),
                  ("args", Self.object([("from", Self.quoted(mark.from)), ("to", Self.quoted(mark.to))]))])
        }
    }
}
