extension StateMachine {
    /// The allowed-transition graph as a Mermaid `stateDiagram-v2`.
    ///
    /// The initial state is entered from `[*]`, final states lead to `[*]`, and a global state gets
    /// an edge from every state that may leave (drawn as `-->` like the others, with a note saying
    /// it is global). Dynamic transitions and barriers are closures, so they are not drawn.
    /// - Parameter markingCurrentState: Whether to style the current state (class `current`).
    public func mermaidDiagram(markingCurrentState: Bool = false) -> String {
        let ids = StateGraphIDs(table.definitions.map { "\($0.state)" })
        var lines = ["stateDiagram-v2"]
        for (index, label) in ids.labels.enumerated() where label != ids.ids[index] {
            lines.append("    state \"\(label.replacingAll("\"", with: "'"))\" as \(ids.ids[index])")
        }
        lines.append("    [*] --> \(ids.ids[0])")
        let edges = edges()
        for (from, to) in edges {
            lines.append("    \(ids.ids[from]) --> \(ids.ids[to])")
        }
        // A state on no edge and with no label line (a suspension state, typically) is declared
        // on its own, so that every registered state appears.
        for index in isolatedStates(edges) where ids.labels[index] == ids.ids[index] {
            lines.append("    \(ids.ids[index])")
        }
        for index in table.definitions.indices where table.isFinal(index) {
            lines.append("    \(ids.ids[index]) --> [*]")
        }
        for index in table.definitions.indices where table.isGlobal(index) {
            lines.append("    note right of \(ids.ids[index]) : global")
        }
        if markingCurrentState {
            lines.append("    classDef current font-weight:bold,stroke-width:3px")
            lines.append("    class \(ids.ids[currentIndex]) current")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The allowed-transition graph as Graphviz DOT text: the initial state is entered from a
    /// point, final states are double circles, edges into a global state are dashed.
    /// - Parameter markingCurrentState: Whether to draw the current state filled.
    public func graphvizDOT(markingCurrentState: Bool = false) -> String {
        let labels = table.definitions.map { "\"" + "\($0.state)".dotEscaped + "\"" }
        // The start point's name must differ from every state's.
        var start = "\"__initial\""
        while labels.contains(start) { start = "\"_" + start.dropFirst() }
        var lines = ["digraph \"\(name.dotEscaped)\" {", "    rankdir=LR;", "    node [shape=ellipse];",
                     "    \(start) [shape=point];", "    \(start) -> \(labels[0]);"]
        let edges = edges()
        let isolated = Set(isolatedStates(edges))
        for index in table.definitions.indices {
            var attributes: [String] = []
            if table.isFinal(index) { attributes.append("shape=doublecircle") }
            if markingCurrentState && index == currentIndex { attributes.append("style=filled") }
            if !attributes.isEmpty {
                lines.append("    \(labels[index]) [\(attributes.joined(separator: ", "))];")
            } else if isolated.contains(index) {
                lines.append("    \(labels[index]);")
            }
        }
        for (from, to) in edges {
            let style = table.isGlobal(to) && !table.allows(from: from, to: to) ? " [style=dashed]" : ""
            lines.append("    \(labels[from]) -> \(labels[to])\(style);")
        }
        lines.append("}")
        return lines.joined(separator: "\n") + "\n"
    }

    private var currentIndex: Int {
        lock.lock()
        defer { lock.unlock() }
        return rules.current
    }

    /// The states that are not the initial state, not final and on no edge.
    private func isolatedStates(_ edges: [(Int, Int)]) -> [Int] {
        var connected = Set([0])
        for (from, to) in edges {
            connected.insert(from)
            connected.insert(to)
        }
        return table.definitions.indices.filter { !connected.contains($0) && !table.isFinal($0) }
    }

    /// Every allowed edge once, in definition order: the listed transitions, then one edge into
    /// each global state from every non-final state that does not list it. A state listing itself
    /// draws no edge (such a request is a same-state no-op).
    private func edges() -> [(Int, Int)] {
        var result: [(Int, Int)] = []
        for from in table.definitions.indices {
            var listed = Set<Int>()
            for target in table.definitions[from].allowedTransitions {
                if let to = table.index(of: target), to != from, listed.insert(to).inserted { result.append((from, to)) }
            }
            guard !table.isFinal(from) else { continue }
            for to in table.definitions.indices
            where to != from && table.isGlobal(to) && !table.allows(from: from, to: to) {
                result.append((from, to))
            }
        }
        return result
    }
}

/// Identifiers for Mermaid: each state's description reduced to letters, digits and `_`, made
/// unique; the description itself is kept as the label.
struct StateGraphIDs {
    let labels: [String]
    let ids: [String]

    init(_ labels: [String]) {
        self.labels = labels
        var used: Set<String> = []
        var ids: [String] = []
        for label in labels {
            var base = String(label.map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" })
            if base.isEmpty || base.first!.isNumber { base = "s_" + base }
            var id = base
            var suffix = 2
            while !used.insert(id).inserted {
                id = "\(base)_\(suffix)"
                suffix += 1
            }
            ids.append(id)
        }
        self.ids = ids
    }
}

extension String {
    /// The string with `"` and `\` escaped for a DOT quoted identifier.
    var dotEscaped: String {
        var result = ""
        for character in self {
            if character == "\"" || character == "\\" { result.append("\\") }
            result.append(character)
        }
        return result
    }

    func replacingAll(_ target: Character, with replacement: String) -> String {
        var result = ""
        for character in self {
            if character == target { result += replacement } else { result.append(character) }
        }
        return result
    }
}
