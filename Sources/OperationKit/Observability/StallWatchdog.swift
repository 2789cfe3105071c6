// StallWatchdog: an opt-in timer that takes snapshots of a queue or a workflow and reports an
// operation executing too long, work that stopped moving, and wait-for cycles.

import Dispatch

/// What a stall watchdog watches for. Every check is off unless set.
public struct StallWatchdogConfiguration: Sendable, Hashable {
    /// Report an operation that has been executing for longer than this (once per operation).
    public var executionLimit: Duration?
    /// Report when the queue holds work but no operation has started or finished for this long
    /// (once per stall: again only after something moved).
    public var progressTimeout: Duration?
    /// Report each wait-for cycle found in a snapshot (once for as long as it lasts).
    public var reportsWaitForCycles: Bool
    /// How often the watchdog takes a snapshot. By default a quarter of the smallest limit set,
    /// between 1 millisecond and 1 second (1 second if only cycles are watched).
    public var checkInterval: Duration

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - executionLimit: Report operations executing longer than this; nil to not check.
    ///   - progressTimeout: Report work that has not moved for this long; nil to not check.
    ///   - reportsWaitForCycles: Whether to report wait-for cycles.
    ///   - checkInterval: How often to check; nil for the default (see ``checkInterval``).
    public init(
        executionLimit: Duration? = nil, progressTimeout: Duration? = nil, reportsWaitForCycles: Bool = true,
        checkInterval: Duration? = nil
    ) {
        self.executionLimit = executionLimit
        self.progressTimeout = progressTimeout
        self.reportsWaitForCycles = reportsWaitForCycles
        let limits = [executionLimit, progressTimeout].compactMap { $0 }
        let quarter = (limits.min() ?? .seconds(4)) / 4
        self.checkInterval = checkInterval ?? min(.seconds(1), max(.milliseconds(1), quarter))
    }
}

/// What a stall watchdog found, with the snapshot it found it in.
public struct StallReport: Sendable, CustomStringConvertible {
    /// What was found.
    public enum Reason: Sendable, Hashable, CustomStringConvertible {
        /// These operations have been executing longer than the configured limit.
        case executingTooLong([OperationReference])
        /// The queue holds work, but nothing started or finished for this long.
        case noProgress(Duration)
        /// Operations wait for each other in a cycle.
        case waitForCycle(WaitForCycle)

        /// One line.
        public var description: String {
            switch self {
            case .executingTooLong(let operations):
                "executing too long: " + operations.map(\.name).joined(separator: ", ")
            case .noProgress(let duration): "no operation started or finished for \(duration.snapshotText)"
            case .waitForCycle(let cycle): "wait-for cycle: \(cycle)"
            }
        }
    }

    /// What was found.
    public let reason: Reason
    /// The snapshot it was found in.
    public let snapshot: QueueSnapshot

    /// The reason, then the snapshot's table.
    public var description: String { "stall: \(reason)\n\(snapshot)" }
}

/// The timer behind a watchdog: a `DispatchSourceTimer` that exists only while the watchdog is
/// on. It holds what it watches weakly (through `takeSnapshot`) and is held by it, so releasing
/// the queue or workflow releases it, and its `deinit` cancels the timer.
final class StallWatchdog: @unchecked Sendable {  // the fields below are confined to `queue`
    private let configuration: StallWatchdogConfiguration
    private let handler: @Sendable (StallReport) -> Void
    private let takeSnapshot: @Sendable () -> QueueSnapshot?
    private let queue = DispatchQueue(label: "OperationKit.StallWatchdog")
    private let timer: any DispatchSourceTimer
    // confined to `queue`
    private var reportedLong = Set<ObjectIdentifier>()
    private var reportedCycles = Set<[ObjectIdentifier]>()
    private var previousStates: [ObjectIdentifier: OperationSnapshot.State] = [:]
    private var lastMovement = ContinuousClock.now
    private var lastCheck = ContinuousClock.now
    private var stallReported = false

    init(
        _ configuration: StallWatchdogConfiguration, handler: @escaping @Sendable (StallReport) -> Void,
        takeSnapshot: @escaping @Sendable () -> QueueSnapshot?
    ) {
        self.configuration = configuration
        self.handler = handler
        self.takeSnapshot = takeSnapshot
        timer = DispatchSource.makeTimerSource(queue: queue)
        let interval = configuration.checkInterval.dispatchInterval
        timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(1))
        timer.setEventHandler { [weak self] in self?.check() }
        timer.resume()
    }

    /// Stops the timer; no report is made after this returns, except one already being made.
    func stop() {
        timer.cancel()
    }

    deinit {
        timer.cancel()
    }

    /// On `queue`: one snapshot, every check the configuration asks for.
    private func check() {
        guard let snapshot = takeSnapshot() else {
            timer.cancel()  // what it watched is gone
            return
        }
        let now = ContinuousClock.now
        let operations = snapshot.allOperations
        var reports: [StallReport.Reason] = []
        if let limit = configuration.executionLimit {
            let over = operations.filter { operation in
                (operation.state == .executing || operation.state == .finishing)
                    && (operation.sinceStarted ?? .zero) > limit
            }
            let new = over.filter { !reportedLong.contains($0.id) }
            reportedLong = Set(over.map(\.id))
            if !new.isEmpty { reports.append(.executingTooLong(new.map(\.reference))) }
        }
        if let timeout = configuration.progressTimeout {
            if moved(operations, sinceLastCheck: now - lastCheck) 
                || operations.allSatisfy({ $0.state == .finished || $0.state == .failed || $0.state == .cancelled }) {
                lastMovement = now
                stallReported = false
            } else if now - lastMovement >= timeout && !stallReported {
                stallReported = true
                reports.append(.noProgress(now - lastMovement))
            }
            previousStates = Dictionary(operations.map { ($0.id, $0.state) }, uniquingKeysWith: { first, _ in first })
        }
        if configuration.reportsWaitForCycles {
            var current = Set<[ObjectIdentifier]>()
            for cycle in snapshot.waitForCycles {
                let key = cycle.steps.map(\.operation.id).sorted()
                current.insert(key)
                if !reportedCycles.contains(key) { reports.append(.waitForCycle(cycle)) }
            }
            reportedCycles = current
        }
        lastCheck = now
        for reason in reports { handler(StallReport(reason: reason, snapshot: snapshot)) }
    }

    /// Whether an operation started or finished since the last check: one seen then is gone or
    /// reached a later state, or one started less than a check interval ago.
    private func moved(_ operations: [OperationSnapshot], sinceLastCheck elapsed: Duration) -> Bool {
        let current = Dictionary(operations.map { ($0.id, $0.state) }, uniquingKeysWith: { first, _ in first })
        for (id, state) in previousStates {
            guard let now = current[id] else { return true }
            if now != state && now.hasStarted { return true }
        }
        return operations.contains { operation in
            operation.state.hasStarted && previousStates[operation.id].map { !$0.hasStarted } ?? true
                && (operation.sinceStarted.map { $0 <= elapsed } ?? false)
        }
    }
}

extension OperationSnapshot.State {
    /// Executing or past it.
    var hasStarted: Bool {
        switch self {
        case .executing, .finishing, .finished, .failed, .cancelled: true
        case .pending, .evaluatingConditions, .ready: false
        }
    }
}
