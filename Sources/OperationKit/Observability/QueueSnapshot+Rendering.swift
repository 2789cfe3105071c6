// QueueSnapshot's renders: a text table (its description), and the live graph as Mermaid and as
// Graphviz DOT, with states as shapes and colours and the edges that block marked.

extension QueueSnapshot: CustomStringConvertible {
    /// A text table: a title line, then one row per operation (nested children indented under
    /// their group) with its name, kind, state, priority, time since added and since started and
    /// why it waits; then the wait-for cycles, if any.
    public var description: String {
        var rows: [[String]] = [["NAME", "KIND", "STATE", "PRIORITY", "ADDED", "STARTED", "WAITING FOR"]]
        func add(_ operations: [OperationSnapshot], depth: Int) {
            for operation in operations {
                let indent = depth == 0 ? "" : String(repeating: "  ", count: depth - 1) + "└ "
                let cancelled = operation.isCancelled && operation.state != .cancelled ? " (cancelled)" : ""
                rows.append([
                    indent + operation.name, operation.kind, operation.state.rawValue + cancelled,
                    "\(operation.priority)", operation.sinceAdded?.snapshotText ?? "-",
                    operation.sinceStarted?.snapshotText ?? "-",
                    operation.blockers.isEmpty ? "-" : operation.blockers.map(\.description).joined(separator: "; "),
                ])
                if let children = operation.children { add(children.operations, depth: depth + 1) }
            }
        }
        add(operations, depth: 0)
        var widths = [Int](repeating: 0, count: rows[0].count)
        for row in rows {
            for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) }
        }
        let what = switch source {
        case .queue: "queue"
        case .group: "group"
        case .workflow: "workflow"
        }
        let count = allOperations.count
        var lines = ["\(what) \(name): \(count) operation\(count == 1 ? "" : "s"), at most "
            + "\(maxConcurrentOperationCount) at once\(isSuspended ? ", suspended" : "")"]
        for row in rows {
            let cells = row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[column] - cell.count)
            }
            lines.append(cells.joined(separator: "  "))
        }
        if !waitForCycles.isEmpty {
            lines.append("wait-for cycles:")
            lines.append(contentsOf: waitForCycles.map { "  \($0)" })
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The live graph as a Mermaid flowchart: a node per operation (nested children in a
    /// subgraph per group) whose shape and class show its state, an arrow from each unfinished
    /// dependency (or prerequisite) to its dependent — thick (`==>`) when it blocks — and dotted
    /// arrows labelled with the reason from each other operation a blocker names (a category's
    /// holder, a slot's holder, a group to its waiting children); arrows of a wait-for cycle are
    /// red. Blockers that name no operation (a suspended queue, a condition) are in the label.
    ///
    /// A GitHub Markdown ` ```mermaid ` block renders it.
    public var mermaid: String {
        let graph = RenderGraph(self)
        var lines = ["flowchart LR"]
        func node(_ index: Int) -> String {
            let operation = graph.nodes[index]
            var label = "\(operation.name.mermaidEscaped)<br/>\(operation.state.rawValue)"
            if operation.isCancelled && operation.state != .cancelled { label += ", cancelled" }
            for note in graph.notes[index] { label += "<br/><i>\(note.mermaidEscaped)</i>" }
            let (open, close) = switch operation.state {
            case .pending: ("(", ")")
            case .evaluatingConditions: ("{{", "}}")
            case .ready: ("[", "]")
            case .executing: ("[[", "]]")
            case .finishing, .finished: ("([", "])")
            case .failed, .cancelled: ("[/", "/]")
            }
            return "n\(index)\(open)\"\(label)\"\(close):::\(operation.state.rawValue)"
        }
        for index in graph.topLevel { lines.append("    " + node(index)) }
        for (group, members) in graph.groups {
            lines.append("    subgraph g\(group)[\"\(graph.nodes[group].name.mermaidEscaped): children\"]")
            for index in members { lines.append("        " + node(index)) }
            lines.append("    end")
        }
        for (index, name) in graph.external.enumerated() {
            lines.append("    x\(index)[\"\(name.mermaidEscaped)<br/>elsewhere\"]:::external")
        }
        var red: [Int] = []
        for (number, edge) in graph.edges.enumerated() {
            let arrow = switch edge.style {
            case .blocking: "==>"
            case .plain: "-->"
            case .labelled(let text): "-.->|\(text.mermaidEscaped.replacingAll("|", with: "/"))|"
            }
            lines.append("    \(graph.id(edge.from)) \(arrow) \(graph.id(edge.to))")
            if edge.inCycle { red.append(number) }
        }
        if !red.isEmpty {
            let numbers = red.map { String($0) }.joined(separator: ",")
            lines.append("    linkStyle \(numbers) stroke:#d00000,stroke-width:3px")
        }
        lines.append(contentsOf: [
            "    classDef pending fill:#eeeeee", "    classDef evaluatingConditions fill:#e8dcff",
            "    classDef ready fill:#dde8ff", "    classDef executing fill:#fff2b3",
            "    classDef finishing fill:#d8f5d8", "    classDef finished fill:#c8f0c8",
            "    classDef failed fill:#ffc8c8", "    classDef cancelled fill:#dddddd,stroke-dasharray:4",
            "    classDef external fill:#ffffff,stroke-dasharray:2",
        ])
        return lines.joined(separator: "\n") + "\n"
    }

    /// The live graph as Graphviz DOT text: the same nodes and edges as ``mermaid`` (a cluster per
    /// group's children; shapes and fill colours per state; blocking edges bold; edges labelled
    /// with their reason; the edges of a wait-for cycle red).
    public var dot: String {
        let graph = RenderGraph(self)
        let colors: [OperationSnapshot.State: String] = [
            .pending: "gray90", .evaluatingConditions: "thistle1", .ready: "lightblue", .executing: "khaki1",
            .finishing: "honeydew", .finished: "palegreen", .failed: "salmon", .cancelled: "gray70",
        ]
        let shapes: [OperationSnapshot.State: String] = [
            .pending: "box, style=\"rounded,filled\"", .evaluatingConditions: "hexagon, style=filled",
            .ready: "box, style=filled", .executing: "box, style=\"bold,filled\", peripheries=2",
            .finishing: "oval, style=filled", .finished: "oval, style=filled",
            .failed: "parallelogram, style=filled", .cancelled: "parallelogram, style=\"dashed,filled\"",
        ]
        var lines = ["digraph \"\(name.dotEscaped)\" {", "    rankdir=LR;"]
        func node(_ index: Int) -> String {
            let operation = graph.nodes[index]
            var label = operation.name.dotEscaped + "\\n" + operation.state.rawValue
            if operation.isCancelled && operation.state != .cancelled { label += ", cancelled" }
            for note in graph.notes[index] { label += "\\n" + note.dotEscaped }
            let shape = shapes[operation.state]!
            return "\"n\(index)\" [label=\"\(label)\", shape=\(shape), fillcolor=\(colors[operation.state]!)];"
        }
        for index in graph.topLevel { lines.append("    " + node(index)) }
        for (group, members) in graph.groups {
            lines.append("    subgraph \"cluster_g\(group)\" {")
            lines.append("        label=\"\(graph.nodes[group].name.dotEscaped): children\";")
            for index in members { lines.append("        " + node(index)) }
            lines.append("    }")
        }
        for (index, name) in graph.external.enumerated() {
            lines.append("    \"x\(index)\" [label=\"\(name.dotEscaped)\\nelsewhere\", shape=box, style=dashed];")
        }
        for edge in graph.edges {
            var attributes: [String] = []
            switch edge.style {
            case .blocking: attributes.append("style=bold")
            case .plain: break
            case .labelled(let text): attributes += ["style=dashed", "label=\"\(text.dotEscaped)\""]
            }
            if edge.inCycle { attributes += ["color=red", "penwidth=2"] }
            let suffix = attributes.isEmpty ? "" : " [\(attributes.joined(separator: ", "))]"
            lines.append("    \"\(graph.id(edge.from))\" -> \"\(graph.id(edge.to))\"\(suffix);")
        }
        lines.append("}")
        return lines.joined(separator: "\n") + "\n"
    }
}

/// The nodes and edges both renders draw.
private struct RenderGraph {
    enum End: Hashable {
        case node(Int)
        case external(Int)
    }

    enum Style: Hashable {
        case blocking
        case plain
        case labelled(String)
    }

    struct Edge {
        let from: End
        let to: End
        let style: Style
        var inCycle = false
    }

    var nodes: [OperationSnapshot] = []
    var notes: [[String]] = []
    var topLevel: [Int] = []
    var groups: [(Int, [Int])] = []
    var external: [String] = []
    var edges: [Edge] = []

    init(_ snapshot: QueueSnapshot) {
        var index: [ObjectIdentifier: Int] = [:]
        func collect(_ operations: [OperationSnapshot], into members: inout [Int]) {
            for operation in operations {
                let position = nodes.count
                nodes.append(operation)
                index[operation.id] = position
                members.append(position)
                if let children = operation.children {
                    var nested: [Int] = []
                    collect(children.operations, into: &nested)
                    groups.append((position, nested))
                }
            }
        }
        collect(snapshot.operations, into: &topLevel)
        var externalIndex: [ObjectIdentifier: Int] = [:]
        func end(_ reference: OperationReference) -> End {
            if let position = index[reference.id] { return .node(position) }
            if let position = externalIndex[reference.id] { return .external(position) }
            externalIndex[reference.id] = external.count
            external.append(reference.name)
            return .external(external.count - 1)
        }
        var cycleEdges = Set<[ObjectIdentifier]>()
        for cycle in snapshot.waitForCycles {
            for (position, step) in cycle.steps.enumerated() {
                let next = cycle.steps[(position + 1) % cycle.steps.count]
                cycleEdges.insert([step.operation.id, next.operation.id])
            }
        }
        for (position, operation) in nodes.enumerated() {
            var blocking = Set<ObjectIdentifier>()
            var labelled: [(OperationReference, String)] = []
            var notes: [String] = []
            for blocker in operation.blockers {
                switch blocker {
                case .dependencies(let references), .prerequisites(let references):
                    blocking.formUnion(references.map(\.id))
                case .producedDependencies(let references):
                    labelled += references.map { ($0, "produced") }
                case .layer(let layer, let members):
                    labelled += members.map { ($0, "member of \(layer.name)") }
                case .conditionDependencies(let condition, let references):
                    labelled += references.map { ($0, "condition \(condition)") }
                case .exclusiveCategory(let category, let heldBy, let behind):
                    labelled += heldBy.map { ($0, "holds \(category)") }
                    labelled += behind.map { ($0, "wants \(category) first") }
                case .concurrencyLimit(let limit, let heldBy):
                    labelled += heldBy.map { ($0, "slot") }
                    notes.append("concurrency limit \(limit) full")
                case .children(let references):
                    labelled += references.map { ($0, "child") }
                case .retryAttempt(_, let attempt):
                    labelled.append((attempt, "attempt"))
                    notes.append(blocker.description)
                case .evaluatingCondition, .queueSuspended, .workflowSuspended, .externalCondition, .subworkflow, .retryDelay:
                    notes.append(blocker.description)
                }
            }
            self.notes.append(notes)
            // Dependency edges point from the dependency to its dependent, like a workflow's.
            for dependency in operation.dependencies {
                let isBlocking = blocking.contains(dependency.id)
                edges.append(Edge(
                    from: end(dependency), to: .node(position), style: isBlocking ? .blocking : .plain,
                    inCycle: cycleEdges.contains([operation.id, dependency.id])))
            }
            // Other waits point from what is waited for to the waiter, labelled.
            for (reference, text) in labelled {
                edges.append(Edge(
                    from: end(reference), to: .node(position), style: .labelled(text),
                    inCycle: cycleEdges.contains([operation.id, reference.id])))
            }
        }
    }

    func id(_ end: End) -> String {
        switch end {
        case .node(let index): "n\(index)"
        case .external(let index): "x\(index)"
        }
    }
}

extension String {
    /// Text for a quoted Mermaid label: quotes and angle brackets as entities.
    var mermaidEscaped: String {
        replacingAll("\"", with: "#quot;").replacingAll("<", with: "#lt;").replacingAll(">", with: "#gt;")
    }
}
