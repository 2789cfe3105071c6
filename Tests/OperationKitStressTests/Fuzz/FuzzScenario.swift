// The model-based fuzz test (see ModelFuzzTests.swift): the seeded random scenarios.
import Dispatch
import Foundation
import OperationKit
import OperationKitTestSupport
import Testing

// MARK: - Scenario

struct FuzzError: Error, Equatable {
    let node: Int
}

/// A plain, printable description of one random scenario.
struct FuzzScenario: CustomStringConvertible {
    enum Condition: CustomStringConvertible {
        case pass, fail, ignore
        /// Produces a quick operation, then passes.
        case producing
        /// Produces an operation that only a cancel ends (generated only beside `fail`/`ignore`).
        case producingNever
        case exclusive(String)

        var description: String {
            switch self {
            case .pass: "pass"
            case .fail: "fail"
            case .ignore: "ignore"
            case .producing: "producing"
            case .producingNever: "producingNever"
            case .exclusive(let category): "exclusive(\(category))"
            }
        }
        var failsOrIgnores: Bool {
            switch self {
            case .fail, .ignore: true
            default: false
            }
        }
    }

    enum Kind: CustomStringConvertible {
        case sync
        case async
        case procedure([Condition])
        /// Work that finishes later on another thread, or never (then a timeout ends it).
        case callback(finishes: Bool, timeoutMilliseconds: Int?)
        /// A group of child nodes (indices into `nodes`), with a category shared by its children.
        case group(children: [Int], category: String?, limit: Int, suspended: Bool, lateChild: Int?)

        var description: String {
            switch self {
            case .sync: "sync"
            case .async: "async"
            case .procedure(let conditions): "procedure\(conditions)"
            case .callback(let finishes, let timeout): "callback(finishes: \(finishes), timeout: \(timeout.map { "\($0)ms" } ?? "none"))"
            case .group(let children, let category, let limit, let suspended, let late):
                "group(children: \(children), category: \(category ?? "none"), limit: \(limit), suspended: \(suspended), late: \(late.map(String.init) ?? "none"))"
            }
        }
    }

    enum Cancel: CustomStringConvertible {
        case none, beforeAdd, afterAdd
        var description: String {
            switch self {
            case .none: "-"
            case .beforeAdd: "cancel before add"
            case .afterAdd: "cancel after add"
            }
        }
    }

    struct Node {
        var kind: Kind
        var queue: Int
        var dependencies: [Int]
        var cancel: Cancel
        /// `nil` for a top-level node; the group's index for a child.
        var parent: Int?
        /// It waits for its dependencies through one `OperationLayer` of them (issue 17) rather
        /// than one edge each: the model's rules are the same.
        var viaLayer = false
    }

    struct Batch {
        var nodes: [Int]
        /// Two extra operations waiting for each other are added with the batch; `breaksCycle`
        /// cancels one of them first (accepted), else the batch is refused and added again
        /// without them.
        var cycle: Bool
        var breaksCycle: Bool
        var barrierAfter: Bool
    }

    let seed: UInt64
    var limits: [Int] = []
    var suspended: [Bool] = []
    var nodes: [Node] = []
    var batches: [Batch] = []

    var operationCount: Int { nodes.count + batches.filter(\.cycle).count * 2 }

    init(seed: UInt64) {
        self.seed = seed
        var random = SplitMix64(seed: seed &* 0x9E37_79B9 &+ 17)
        let queueCount = 1 + random.below(3)
        limits = (0..<queueCount).map { _ in 1 + random.below(8) }
        suspended = (0..<queueCount).map { _ in random.chance(30) }
        // Categories are process-wide: each seed has its own, so that one seed's failure cannot
        // hold up the next ones.
        let categories = ["red\(seed)", "green\(seed)"]
        let topCount = 4 + random.below(18)
        var topLevel: [Int] = []
        /// Top-level nodes without dependencies: children may wait for them (item 4, repro B).
        var independent: [Int] = []

        func condition(_ random: inout SplitMix64, allowNever: Bool) -> Condition {
            switch random.below(100) {
            case 0..<30: return .pass
            case 30..<42: return .fail
            case 42..<50: return .ignore
            case 50..<70: return .producing
            case 70..<78 where allowNever: return .producingNever
            default: return .exclusive(categories[random.below(categories.count)])
            }
        }
        func procedureConditions(_ random: inout SplitMix64, category: String?) -> [Condition] {
            var conditions = (0..<random.below(4)).map { _ in condition(&random, allowNever: true) }
            if let category {
                // Inside a group: only its category (two groups taking two categories in
                // opposite orders deadlock, as two locks do).
                conditions = conditions.map {
                    if case .exclusive = $0 { return .exclusive(category) }
                    return $0
                }
            }
            if conditions.contains(where: { if case .producingNever = $0 { true } else { false } }),
               !conditions.contains(where: \.failsOrIgnores) {
                conditions.append(random.chance(70) ? .fail : .ignore)
            }
            return conditions
        }

        for _ in 0..<topCount {
            let queue = random.below(queueCount)
            var dependencies: [Int] = []
            if !topLevel.isEmpty {
                for _ in 0..<random.below(3) {
                    let dependency = topLevel[random.below(topLevel.count)]
                    if !dependencies.contains(dependency) { dependencies.append(dependency) }
                }
            }
            let cancel: Cancel = random.chance(8) ? .beforeAdd : random.chance(10) ? .afterAdd : .none
            let roll = random.below(100)
            let kind: Kind
            if roll < 25 {
                kind = .sync
            } else if roll < 40 {
                kind = .async
            } else if roll < 65 {
                kind = .procedure(procedureConditions(&random, category: nil))
            } else if roll < 78 {
                let finishes = random.chance(70)
                kind = .callback(finishes: finishes, timeoutMilliseconds: finishes && random.chance(60) ? nil : 5 + random.below(40))
            } else {
                // A group; its children are appended after it, below.
                kind = .group(children: [], category: nil, limit: 1, suspended: false, lateChild: nil)
            }
            nodes.append(Node(kind: kind, queue: queue, dependencies: dependencies, cancel: cancel, parent: nil))
            topLevel.append(nodes.count - 1)
            if dependencies.isEmpty && kind.isLeaf { independent.append(nodes.count - 1) }
        }
        // Fill in the groups.
        for group in topLevel {
            guard case .group = nodes[group].kind else { continue }
            let category: String? = random.chance(50) ? categories[random.below(categories.count)] : nil
            var children: [Int] = []
            for _ in 0..<(1 + random.below(5)) {
                let child = nodes.count
                var dependencies: [Int] = []
                if !children.isEmpty && random.chance(40) { dependencies.append(children[random.below(children.count)]) }
                let kind: Kind = random.chance(50)
                    ? .sync
                    : .procedure(procedureConditions(&random, category: category)
                        + (category != nil && random.chance(50) ? [.exclusive(category!)] : []))
                nodes.append(Node(kind: kind, queue: nodes[group].queue, dependencies: dependencies, cancel: random.chance(5) ? .beforeAdd : .none, parent: group))
                children.append(child)
            }
            // A child waiting for a top-level node queued behind the group (item 4, repro B): only
            // for one with no dependencies, so that nothing it waits for waits for the group.
            if let last = children.last, random.chance(30),
               let behind = independent.filter({ $0 > group }).randomElement(using: &random) {
                nodes[last].dependencies.append(behind)
            }
            var lateChild: Int?
            if random.chance(35) {
                lateChild = nodes.count
                nodes.append(Node(kind: .sync, queue: nodes[group].queue, dependencies: [], cancel: .none, parent: group))
            }
            nodes[group].kind = .group(
                children: children, category: category, limit: 1 + random.below(3),
                suspended: random.chance(25), lateChild: lateChild)
            // The group's own conditions: its category, sometimes.
        }
        // Batches of top-level nodes, in index order.
        var start = 0
        while start < topLevel.count {
            let size = 1 + random.below(6)
            let members = Array(topLevel[start..<min(topLevel.count, start + size)])
            let cycle = random.chance(25)
            batches.append(Batch(nodes: members, cycle: cycle, breaksCycle: cycle && random.chance(40), barrierAfter: random.chance(15)))
            start += size
        }
        // A child may wait for a top-level node only if no barrier comes before that node: the
        // node would wait for the barrier, and the barrier for what was queued before it — the
        // group itself, or a procedure that wants the category the group holds — while the group
        // waits for the child: a wait-for cycle through a barrier, a category and a group's
        // membership, which no registered edge shows (the user's to avoid; Testing.md).
        var batchOf: [Int: Int] = [:]
        for (index, batch) in batches.enumerated() { for node in batch.nodes { batchOf[node] = index } }
        let described = nodes
        let allBatches = batches
        for child in nodes.indices {
            guard let group = described[child].parent, let groupBatch = batchOf[group] else { continue }
            nodes[child].dependencies.removeAll { dependency in
                guard described[dependency].parent == nil, let dependencyBatch = batchOf[dependency] else { return false }
                _ = groupBatch
                return allBatches[0..<dependencyBatch].contains(where: \.barrierAfter)
            }
        }
        // Some nodes wait through a layer: drawn from a generator of their own, so that the rest
        // of every seed's scenario is what it was before layers existed.
        var layering = SplitMix64(seed: seed &* 0x5851_F42D &+ 29)
        for index in nodes.indices where !nodes[index].dependencies.isEmpty && layering.chance(30) {
            nodes[index].viaLayer = true
        }
    }

    var description: String {
        var lines = ["seed \(seed): queues limits \(limits), suspended \(suspended)"]
        for (index, node) in nodes.enumerated() {
            lines.append("  #\(index) q\(node.queue) \(node.kind) deps \(node.dependencies)\(node.viaLayer ? " via layer" : "") \(node.cancel)\(node.parent.map { " child of #\($0)" } ?? "")")
        }
        for batch in batches {
            lines.append("  batch \(batch.nodes)\(batch.cycle ? (batch.breaksCycle ? " + cycle broken by a cancel" : " + cycle (refused)") : "")\(batch.barrierAfter ? " then barrier" : "")")
        }
        return lines.joined(separator: "\n")
    }
}

extension FuzzScenario.Kind {
    var isLeaf: Bool {
        switch self {
        case .sync, .async: true
        default: false
        }
    }
}
