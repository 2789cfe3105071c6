extension Workflow {
    /// The workflow as a Mermaid flowchart: a node per task labelled with its name and state
    /// (classes `pending`, `ready`, `executing`, `finished`, `failed`, `cancelled`), an edge per
    /// prerequisite (labelled with its key if keyed), between Start and Finish.
    ///
    /// The graph and the states are read in one critical section, so they are consistent.
    /// - Returns: The flowchart's text, ending with a newline.
    public func mermaidDiagram() -> String {
        let snapshot = graphSnapshot()
        var lines = ["flowchart LR", "    start([Start])", "    finish([Finish])"]
        for task in snapshot.tasks {
            lines.append("    t\(task.index)[\"\(task.name.replacingAll("\"", with: "'")): \(task.state)\"]:::\(task.state)")
        }
        for task in snapshot.tasks {
            if task.prerequisites.isEmpty { lines.append("    start --> t\(task.index)") }
            for prerequisite in task.prerequisites {
                if let key = task.keys[prerequisite] {
                    lines.append("    t\(prerequisite) -- \(key.replacingAll("\"", with: "'")) --> t\(task.index)")
                } else {
                    lines.append("    t\(prerequisite) --> t\(task.index)")
                }
            }
            if task.dependents.isEmpty { lines.append("    t\(task.index) --> finish") }
        }
        if snapshot.tasks.isEmpty { lines.append("    start --> finish") }
        lines.append(contentsOf: [
            "    classDef pending fill:#eeeeee", "    classDef ready fill:#dde8ff", "    classDef executing fill:#fff2b3",
            "    classDef finished fill:#c8f0c8", "    classDef failed fill:#ffc8c8", "    classDef cancelled fill:#dddddd,stroke-dasharray:4",
        ])
        return lines.joined(separator: "\n") + "\n"
    }

    /// The workflow as Graphviz DOT text: a node per task labelled with its name and state and
    /// filled with a colour per state, an edge per prerequisite (labelled with its key if keyed),
    /// between Start and Finish.
    ///
    /// The graph and the states are read in one critical section, so they are consistent.
    /// - Returns: The DOT text, ending with a newline.
    public func graphvizDOT() -> String {
        let snapshot = graphSnapshot()
        let colors: [WorkflowTaskState: String] = [
            .pending: "gray90", .ready: "lightblue", .executing: "khaki1", .finished: "palegreen",
            .failed: "salmon", .cancelled: "gray70",
        ]
        var lines = ["digraph \"\(name.dotEscaped)\" {", "    rankdir=LR;", "    node [shape=box, style=filled];",
                     "    \"__start\" [label=\"Start\", shape=oval, style=solid];",
                     "    \"__finish\" [label=\"Finish\", shape=oval, style=solid];"]
        for task in snapshot.tasks {
            let label = task.name.dotEscaped + "\\n" + "\(task.state)"
            lines.append("    \"t\(task.index)\" [label=\"\(label)\", fillcolor=\(colors[task.state]!)];")
        }
        for task in snapshot.tasks {
            if task.prerequisites.isEmpty { lines.append("    \"__start\" -> \"t\(task.index)\";") }
            for prerequisite in task.prerequisites {
                let label = task.keys[prerequisite].map { " [label=\"\($0.dotEscaped)\"]" } ?? ""
                lines.append("    \"t\(prerequisite)\" -> \"t\(task.index)\"\(label);")
            }
            if task.dependents.isEmpty { lines.append("    \"t\(task.index)\" -> \"__finish\";") }
        }
        if snapshot.tasks.isEmpty { lines.append("    \"__start\" -> \"__finish\";") }
        lines.append("}")
        return lines.joined(separator: "\n") + "\n"
    }

    /// The workflow as an ASCII drawing in the style of Task.framework's README: Start, then one
    /// column per level (a task's level is one more than its deepest prerequisite's; tasks of a
    /// level are stacked in the order they were added), each task a double-lined box with its
    /// name and state, then Finish; below, under "Prerequisites:", every prerequisite edge
    /// (`A ───> C`, with `[key]` if keyed).
    ///
    /// Arrows are drawn only along edges that can be shown in one line: from Start into the first
    /// row's first task, between two boxes side by side when the right one has the left one as a
    /// prerequisite, and into Finish from the first row's last box when that task has no
    /// dependents. The list of edges is complete. The graph and the states are read in one
    /// critical section, so they are consistent.
    /// - Returns: The drawing, ending with a newline; trailing spaces are trimmed.
    public func asciiDiagram() -> String {
        let snapshot = graphSnapshot()
        var level = [Int](repeating: 0, count: snapshot.tasks.count)
        for task in snapshot.tasks {  // prerequisites were added before their dependents
            level[task.index] = (task.prerequisites.map { level[$0] + 1 }.max() ?? 0)
        }
        let columnCount = (level.max() ?? -1) + 1
        var columns = [[Int]](repeating: [], count: columnCount)
        for task in snapshot.tasks { columns[level[task.index]].append(task.index) }
        let labels = snapshot.tasks.map { "\($0.name): \($0.state)" }
        let widths = columns.map { column in (column.map { labels[$0].count }.max() ?? 0) + 2 }
        let rows = max(1, columns.map(\.count).max() ?? 0)

        func box(_ text: String, width: Int, line: Int, double: Bool) -> String {
            let (h, tl, tr, bl, br, v) = double ? ("═", "╔", "╗", "╚", "╝", "║") : ("─", "┌", "┐", "└", "┘", "│")
            switch line {
            case 0: return tl + String(repeating: h, count: width) + tr
            case 1: return v + " " + text + String(repeating: " ", count: max(0, width - 1 - text.count)) + v
            default: return bl + String(repeating: h, count: width) + br
            }
        }
        var output: [String] = []
        for row in 0..<rows {
            for line in 0..<3 {
                var text = row == 0 ? box("Start", width: 7, line: line, double: false) : String(repeating: " ", count: 9)
                for (column, tasks) in columns.enumerated() {
                    // An arrow from Start into each root of the first row, and between two tasks
                    // side by side only when the right one has the left one as a prerequisite.
                    var connected = false
                    if line == 1 && row < tasks.count {
                        if column == 0 {
                            connected = row == 0
                        } else if row < columns[column - 1].count {
                            connected = snapshot.tasks[tasks[row]].prerequisites.contains(columns[column - 1][row])
                        }
                    }
                    text += connected ? "───>" : "    "
                    if row < tasks.count {
                        text += box(labels[tasks[row]], width: widths[column], line: line, double: true)
                    } else {
                        text += String(repeating: " ", count: widths[column] + 2)
                    }
                }
                if row == 0 {
                    // Into Finish from the first row's last task, which has no dependents.
                    let last = columns.last.flatMap(\.first)
                    let arrow = line == 1 && (last == nil || snapshot.tasks[last!].dependents.isEmpty) ? "───>" : "    "
                    text += arrow + box("Finish", width: 8, line: line, double: false)
                }
                output.append(text.replacingTrailingSpaces())
            }
        }
        let edges = snapshot.tasks.flatMap { task in
            task.prerequisites.map { prerequisite in
                "  \(snapshot.tasks[prerequisite].name) ───> \(task.name)" + (task.keys[prerequisite].map { " [\($0)]" } ?? "")
            }
        }
        if !edges.isEmpty {
            output.append("")
            output.append("Prerequisites:")
            output.append(contentsOf: edges)
        }
        return output.joined(separator: "\n") + "\n"
    }

    /// The graph and states, read in one critical section.
    private func graphSnapshot() -> (tasks: [TaskSnapshot], Void) {
        lock.withLock {
            (tasks.map { task in
                TaskSnapshot(
                    index: task.index, name: task.name, state: task.lifecycle.state,
                    prerequisites: task.prerequisiteIndices.array, dependents: task.dependentIndices.array,
                    keys: Dictionary(task.keyedPrerequisiteIndices.map { ($0.value, $0.key) }, uniquingKeysWith: { $0 < $1 ? $0 : $1 }))
            }, ())
        }
    }

    private struct TaskSnapshot {
        let index: Int
        let name: String
        let state: WorkflowTaskState
        let prerequisites: [Int]
        let dependents: [Int]
        let keys: [Int: String]
    }
}

extension String {
    func replacingTrailingSpaces() -> String {
        var result = self
        while result.last == " " { result.removeLast() }
        return result
    }
}
