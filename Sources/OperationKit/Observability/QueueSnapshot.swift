// QueueSnapshot and OperationSnapshot: what a queue, a group or a workflow holds at one moment,
// and for every operation that is not executing, why (its blockers).

/// An operation (or workflow task) named in a snapshot: its identity and its name.
public struct OperationReference: Sendable, Hashable, CustomStringConvertible {
    /// The identity of the operation or task object (unique among objects alive together).
    public let id: ObjectIdentifier
    /// Its ``ConcurrentOperation/displayName`` (a task's name).
    public let name: String

    /// Creates a reference.
    ///
    /// - Parameters:
    ///   - id: The identity of the object.
    ///   - name: Its name.
    public init(id: ObjectIdentifier, name: String) {
        self.id = id
        self.name = name
    }

    init(_ operation: ConcurrentOperation) {
        self.init(id: ObjectIdentifier(operation), name: operation.displayName)
    }

    /// The name.
    public var description: String { name }
}

/// One operation (or workflow task) as a snapshot saw it.
public struct OperationSnapshot: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// Where the operation is in its life.
    public enum State: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// In the queue, waiting for its dependencies (a workflow task: for its prerequisites).
        case pending
        /// A procedure whose dependencies finished: its conditions are being evaluated.
        case evaluatingConditions
        /// Runnable: waiting for a worker (or for what its blockers say: a suspended queue, a full
        /// concurrency limit, a mutual exclusivity category).
        case ready
        /// Executing (a group: running its children; a retry: an attempt, or waiting for the next).
        case executing
        /// A finish was accepted; the completion block and observers are being told.
        case finishing
        /// Finished; the queue lets go of it in a moment.
        case finished
        /// A workflow task that failed (it may be retried).
        case failed
        /// A workflow task that was cancelled.
        case cancelled

        /// The raw value: `pending`, `evaluatingConditions`, …
        public var description: String { rawValue }
    }

    /// Why an operation that is not executing does not run — or, for one that is executing but
    /// waits itself (a group, a retry, a workflow's external condition), what it waits for.
    public enum Blocker: Sendable, Hashable, CustomStringConvertible {
        /// Dependencies that have not finished.
        case dependencies([OperationReference])
        /// An ``OperationLayer`` among its unfinished dependencies, and that layer's members that
        /// have not finished: what the dependent really waits for. (Members that are layers
        /// themselves are named, not opened.)
        case layer(OperationReference, unfinishedMembers: [OperationReference])
        /// A condition that was started and has not answered (by its name).
        case evaluatingCondition(String)
        /// Dependencies produced by its conditions that have not finished; the conditions that
        /// produced them are evaluated after they finish.
        case producedDependencies([OperationReference])
        /// A condition (named) not evaluated yet because its own dependencies
        /// (``OperationCondition/dependencies``) have not finished; the unfinished ones.
        case conditionDependencies(String, [OperationReference])
        /// A ``MutuallyExclusive`` category it asked for: held by `heldBy`, or, if nobody outside
        /// its ancestors holds it, wanted first by the earlier requests `queuedBehind`.
        case exclusiveCategory(String, heldBy: [OperationReference], queuedBehind: [OperationReference])
        /// Its queue (named) is suspended.
        case queueSuspended(String)
        /// A workflow task whose start is held because its workflow (named) is suspended
        /// (``Workflow/isSuspended``).
        case workflowSuspended(String)
        /// Its queue runs at most `limit` operations at once and every slot is taken; `heldBy`
        /// are the operations executing there (the rest of the slots are workers about to start
        /// one).
        case concurrencyLimit(Int, heldBy: [OperationReference])
        /// A group waiting for its children that have not finished.
        case children([OperationReference])
        /// A workflow task's prerequisites that have not finished.
        case prerequisites([OperationReference])
        /// An ``ExternalConditionTask`` (named) not fulfilled yet.
        case externalCondition(String)
        /// A ``SubworkflowTask`` waiting for its sub-workflow (named).
        case subworkflow(String)
        /// A ``RetryOperation`` running its attempt number `attempt`.
        case retryAttempt(Int, OperationReference)
        /// A ``RetryOperation`` waiting `delay` before its attempt number `nextAttempt`;
        /// `remaining` is what is left of the wait (to the clock's resolution).
        case retryDelay(nextAttempt: Int, delay: Duration, remaining: Duration)

        /// A short sentence, such as `waits for dependencies: load, parse`.
        public var description: String {
            func names(_ references: [OperationReference]) -> String {
                references.isEmpty ? "-" : references.map(\.name).joined(separator: ", ")
            }
            switch self {
            case .dependencies(let references): return "dependencies: \(names(references))"
            case .layer(let layer, let members): return "layer \(layer.name) waits for: \(names(members))"
            case .evaluatingCondition(let name): return "condition \(name) evaluating"
            case .producedDependencies(let references): return "produced dependencies: \(names(references))"
            case .conditionDependencies(let condition, let references):
                return "condition \(condition) waits for: \(names(references))"
            case .exclusiveCategory(let category, let heldBy, let behind):
                return heldBy.isEmpty
                    ? "category \(category) queued behind \(names(behind))"
                    : "category \(category) held by \(names(heldBy))"
            case .queueSuspended(let queue): return "queue \(queue) suspended"
            case .workflowSuspended(let workflow): return "workflow \(workflow) suspended"
            case .concurrencyLimit(let limit, let heldBy):
                return "concurrency limit \(limit) full: \(names(heldBy))"
            case .children(let references): return "children: \(names(references))"
            case .prerequisites(let references): return "prerequisites: \(names(references))"
            case .externalCondition(let name): return "external condition \(name) not fulfilled"
            case .subworkflow(let name): return "sub-workflow \(name)"
            case .retryAttempt(let attempt, let operation): return "attempt \(attempt): \(operation.name)"
            case .retryDelay(let attempt, let delay, let remaining):
                return "attempt \(attempt) after \(delay.snapshotText) (\(remaining.snapshotText) left)"
            }
        }

        /// The same blocker with every operation it names passed through `transform`.
        func mapReferences(_ transform: (OperationReference) -> OperationReference) -> Blocker {
            switch self {
            case .dependencies(let references): .dependencies(references.map(transform))
            case .layer(let layer, let members): .layer(transform(layer), unfinishedMembers: members.map(transform))
            case .producedDependencies(let references): .producedDependencies(references.map(transform))
            case .conditionDependencies(let condition, let references):
                .conditionDependencies(condition, references.map(transform))
            case .exclusiveCategory(let category, let heldBy, let behind):
                .exclusiveCategory(category, heldBy: heldBy.map(transform), queuedBehind: behind.map(transform))
            case .concurrencyLimit(let limit, let heldBy): .concurrencyLimit(limit, heldBy: heldBy.map(transform))
            case .children(let references): .children(references.map(transform))
            case .prerequisites(let references): .prerequisites(references.map(transform))
            case .retryAttempt(let attempt, let operation): .retryAttempt(attempt, transform(operation))
            case .evaluatingCondition, .queueSuspended, .workflowSuspended, .externalCondition, .subworkflow, .retryDelay: self
            }
        }

        /// The operations this blocker waits for, with the kind of edge (for the wait-for graph).
        var waitsFor: [(OperationReference, WaitForCycle.Reason)] {
            switch self {
            case .dependencies(let references): return references.map { ($0, .dependency) }
            case .layer(_, let members): return members.map { ($0, .dependency) }
            case .producedDependencies(let references): return references.map { ($0, .producedDependency) }
            case .conditionDependencies(_, let references): return references.map { ($0, .dependency) }
            case .exclusiveCategory(let category, let heldBy, let behind):
                return (heldBy + behind).map { ($0, .exclusiveCategory(category)) }
            case .concurrencyLimit(_, let heldBy): return heldBy.map { ($0, .concurrencySlot) }
            case .children(let references): return references.map { ($0, .child) }
            case .prerequisites(let references): return references.map { ($0, .prerequisite) }
            case .retryAttempt(_, let attempt): return [(attempt, .child)]
            case .evaluatingCondition, .queueSuspended, .workflowSuspended, .externalCondition, .subworkflow, .retryDelay: return []
            }
        }
    }

    /// The identity of the operation (or task) object.
    public let id: ObjectIdentifier
    /// Its ``ConcurrentOperation/displayName`` (a task's name).
    public let name: String
    /// Its type, such as `ClosureOperation` or `GroupOperation`.
    public let kind: String
    /// Where it is in its life.
    public let state: State
    /// Whether it was cancelled (it then finishes without executing once a worker reaches it).
    public let isCancelled: Bool
    /// The priority its queue gave it.
    public let priority: ConcurrentOperation.QueuePriority
    /// The time since it was added to its queue (a workflow task: since its run was queued), to
    /// the clock's resolution (a few milliseconds); nil if unknown.
    public let sinceAdded: Duration?
    /// The time since it started executing; nil if it has not.
    public let sinceStarted: Duration?
    /// Its unfinished dependencies (a workflow task: all its prerequisites), the edges of the
    /// rendered graph.
    public let dependencies: [OperationReference]
    /// Why it does not run, or what it waits for while executing; empty when nothing holds it.
    public let blockers: [Blocker]
    // An array for the indirection a recursive value needs: empty, or the group's children.
    private let nested: [QueueSnapshot]

    /// The snapshot of a group's children (or a retry's attempts); nil for other operations.
    public var children: QueueSnapshot? { nested.first }

    /// A reference to this operation.
    public var reference: OperationReference { OperationReference(id: id, name: name) }

    init(
        id: ObjectIdentifier, name: String, kind: String, state: State, isCancelled: Bool,
        priority: ConcurrentOperation.QueuePriority, sinceAdded: Duration?, sinceStarted: Duration?,
        dependencies: [OperationReference], blockers: [Blocker], children: QueueSnapshot?
    ) {
        self.id = id
        self.name = name
        self.kind = kind
        self.state = state
        self.isCancelled = isCancelled
        self.priority = priority
        self.sinceAdded = sinceAdded
        self.sinceStarted = sinceStarted
        self.dependencies = dependencies
        self.blockers = blockers
        nested = children.map { [$0] } ?? []
    }

    /// One line: name, state and blockers.
    public var description: String {
        let why = blockers.isEmpty ? "" : " — " + blockers.map(\.description).joined(separator: "; ")
        return "\(name) [\(state)\(isCancelled ? ", cancelled" : "")]\(why)"
    }
}

/// What a ``ConcurrentOperationQueue``, a ``GroupOperation`` or a ``Workflow`` held at one moment:
/// every operation (or task), its state, how long it has waited or run, and why each one that
/// is not executing does not run; with the wait-for cycles found among them.
///
/// Made by ``ConcurrentOperationQueue/snapshot()``, ``GroupOperation/snapshot()`` and
/// ``Workflow/snapshot()``. Its ``description`` is a text table; ``mermaid`` and ``dot`` draw the
/// live graph.
///
/// **What is guaranteed.** A snapshot never stops the queue: it takes each lock it needs briefly,
/// one at a time, in the library's lock order. Each operation's own facts (state, blockers
/// that come from its own fields) are consistent with each other; different operations are read
/// at slightly different moments, so an operation that finished meanwhile may still be named as a
/// blocker of another, and one added meanwhile may be missing. A wait-for cycle is a cycle in
/// that view: a real deadlock shows up in every snapshot, while a cycle seen only once may have
/// been a moment's coincidence.
public struct QueueSnapshot: Sendable, Hashable {
    /// What was snapshotted.
    public enum Source: Sendable, Hashable {
        /// A ``ConcurrentOperationQueue``.
        case queue
        /// The children of a ``GroupOperation`` (or the attempts of a ``RetryOperation``).
        case group
        /// The tasks of a ``Workflow``.
        case workflow
    }

    /// What was snapshotted.
    public let source: Source
    /// The queue's ``ConcurrentOperationQueue/displayName``, the group's or the workflow's name.
    public let name: String
    /// Every operation (or task) it held, in the order they were added.
    public let operations: [OperationSnapshot]
    /// Whether the queue was suspended (a group: held back, because it is not executing or was
    /// suspended).
    public let isSuspended: Bool
    /// The queue's ``ConcurrentOperationQueue/maxConcurrentOperationCount``.
    public let maxConcurrentOperationCount: Int
    /// The wait-for cycles among the operations of this snapshot and its nested children.
    public let waitForCycles: [WaitForCycle]

    init(
        source: Source, name: String, operations: [OperationSnapshot], isSuspended: Bool,
        maxConcurrentOperationCount: Int, findCycles: Bool = true
    ) {
        self.source = source
        self.name = name
        self.operations = operations
        self.isSuspended = isSuspended
        self.maxConcurrentOperationCount = maxConcurrentOperationCount
        waitForCycles = findCycles ? WaitForCycle.find(in: operations) : []
    }

    /// The operation named `name`, searching nested children too.
    ///
    /// - Parameter name: A ``OperationSnapshot/name``.
    /// - Returns: The first operation with that name, or nil.
    public func operation(named name: String) -> OperationSnapshot? {
        for operation in operations {
            if operation.name == name { return operation }
            if let found = operation.children?.operation(named: name) { return found }
        }
        return nil
    }

    /// Every operation, nested children included (depth first, a group before its children).
    public var allOperations: [OperationSnapshot] {
        operations.flatMap { [$0] + ($0.children?.allOperations ?? []) }
    }
}

extension Duration {
    /// `350 ms`, `2.4 s`, `3 min 5 s`: the form snapshots print.
    var snapshotText: String {
        let milliseconds = components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000
        if milliseconds < 1_000 { return "\(milliseconds) ms" }
        if milliseconds < 60_000 {
            let tenths = milliseconds / 100
            return "\(tenths / 10).\(tenths % 10) s"
        }
        let seconds = milliseconds / 1_000
        return "\(seconds / 60) min \(seconds % 60) s"
    }
}
