// ProgressAggregate: the pure bookkeeping of a queue's progress — the operations it counts,
// their weights, the running ones' reported fractions, and an optional total set by the user.

/// The progress of a set of operations, by weight: each counted operation adds its weight to the
/// total when it is added, and to the completed units when it finishes; while it runs, its
/// reported fraction times its weight counts in ``progress``'s fraction. A value type with no
/// lock: `QueueProgressTracker` calls it under its broadcaster's lock.
///
/// With ``totalUnitCount`` set, the total is that number instead of the sum of the weights (as
/// Foundation's `OperationQueue.progress` once its `totalUnitCount` is set: finished operations
/// fill up the total the user gave).
struct ProgressAggregate {
    struct Member {
        var weight: Int64
        /// `weight × fraction` reported while running, the weight once cancelled; in fixed point
        /// (`ProgressAggregate.unit` per unit of weight).
        var contribution: Int64
        /// Cancelled: complete, whatever it reports until it finishes.
        var cancelled = false
    }

    /// The counted operations that have not finished, by identity.
    private(set) var members: [ObjectIdentifier: Member] = [:]
    /// Every counted operation's weight, finished or not.
    private(set) var totalWeight: Int64 = 0
    /// The weight of the counted operations that have finished.
    private(set) var completedWeight: Int64 = 0
    /// How many operations were counted.
    private(set) var countedOperations = 0
    /// The sum of the members' contributions. In fixed point, so that a sum kept up to date by
    /// adding each change stays exact however many reports come (a `Double` sum drifted:
    /// 0.7500000000000002 after 2,000 reports).
    private var partialSum: Int64 = 0
    /// Fixed-point units per unit of weight (2^20: binary fractions such as 0.75 stay exact,
    /// others round to 1e-6 of a weight; a member of the largest weight, 2^32, contributes at
    /// most 2^52). The sum wraps rather than trap: kept up to date by differences, it is exact
    /// whenever the true sum fits.
    static let unit: Int64 = 1 << 20
    /// A total set by the user, in place of the weights' sum.
    var totalUnitCount: Int64?

    /// Counts an operation. Returns `false` if it was counted already.
    mutating func add(_ id: ObjectIdentifier, weight: Int64, fraction: Double) -> Bool {
        guard members[id] == nil else { return false }
        members[id] = Member(weight: weight, contribution: 0)
        totalWeight += weight
        countedOperations += 1
        _ = update(id, fraction: fraction)
        return true
    }

    /// Counts an operation that has already finished (found finished when tracking began).
    mutating func addFinished(weight: Int64) {
        totalWeight += weight
        completedWeight += weight
        countedOperations += 1
    }

    /// A running member reported `fraction`. Returns `false` if `id` is not a member.
    mutating func update(_ id: ObjectIdentifier, fraction: Double) -> Bool {
        guard var member = members[id] else { return false }
        if member.cancelled { return true }
        let clamped = min(1, max(0, fraction.isNaN ? 0 : fraction))
        let contribution = Int64((Double(member.weight) * Double(Self.unit) * clamped).rounded())
        setContribution(of: &member, to: contribution)
        members[id] = member
        return true
    }

    /// A member was cancelled: it counts as complete, though it has not finished (it may still
    /// be executing). Returns `false` if `id` is not a member.
    mutating func cancel(_ id: ObjectIdentifier) -> Bool {
        guard var member = members[id] else { return false }
        setContribution(of: &member, to: member.weight * Self.unit)
        member.cancelled = true
        members[id] = member
        return true
    }

    /// A member finished: it counts as complete. Returns `false` if `id` is not a member.
    mutating func finish(_ id: ObjectIdentifier) -> Bool {
        guard var member = members.removeValue(forKey: id) else { return false }
        setContribution(of: &member, to: 0)
        completedWeight += member.weight
        return true
    }

    private mutating func setContribution(of member: inout Member, to contribution: Int64) {
        partialSum = partialSum &+ (contribution &- member.contribution)
        member.contribution = contribution
    }

    /// The aggregate: the completed weight over the total, the running members' contributions in
    /// the fraction; finished once every counted operation has finished (and, with a set total,
    /// the completed units reached it).
    var progress: OperationProgress {
        let total = totalUnitCount ?? totalWeight
        let fraction = total > 0 ? (Double(completedWeight) + Double(partialSum) / Double(Self.unit)) / Double(total) : 0
        let finished = countedOperations > 0 && members.isEmpty && completedWeight >= total
        return OperationProgress(
            completed: completedWeight, total: total, fractionCompleted: finished ? 1 : fraction, isFinished: finished)
    }
}
