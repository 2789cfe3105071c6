// pmake's task file: a small Makefile-like format (a task's name, its dependencies, its shell
// lines) and its parser, which reports every mistake with its line number.

/// One task of a task file.
struct TaskSpec {
    var name: String
    var dependencies: [String]
    var commands: [String]
    var line: Int
}

/// A mistake in a task file: where, and what.
struct TaskFileError: Error, CustomStringConvertible {
    var line: Int
    var message: String
    var description: String { "line \(line): \(message)" }
}

/// Parses a task file:
///
///     # a comment
///     build: fetch configure      ← a task, then the tasks it depends on
///         cc -c main.c            ← its shell lines, indented, run by /bin/sh one after another
///         cc -o app main.o
///
/// Names are letters, digits, `-`, `_` and `.`; a task may have no lines (it only groups its
/// dependencies). Unknown dependencies, duplicate names and indented lines before any task are
/// errors; cycles are left to the queue, which refuses the edge that closes one.
func parseTaskFile(_ text: String) throws(TaskFileError) -> [TaskSpec] {
    var tasks: [TaskSpec] = []
    var seen: Set<String> = []
    for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
        let number = index + 1
        let line = String(rawLine)
        let trimmed = line.trimmingSpaces()
        if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
        if line.first == " " || line.first == "\t" {
            guard !tasks.isEmpty else { throw TaskFileError(line: number, message: "a command line before any task") }
            tasks[tasks.count - 1].commands.append(trimmed)
            continue
        }
        guard let colon = trimmed.firstIndex(of: ":") else {
            throw TaskFileError(line: number, message: "expected `name: dependencies`, found \(trimmed.debugDescription)")
        }
        let name = String(trimmed[..<colon]).trimmingSpaces()
        guard isValidName(name) else { throw TaskFileError(line: number, message: "invalid task name \(name.debugDescription)") }
        guard seen.insert(name).inserted else { throw TaskFileError(line: number, message: "task \(name) is defined twice") }
        let dependencies = trimmed[trimmed.index(after: colon)...].split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        for dependency in dependencies where !isValidName(dependency) {
            throw TaskFileError(line: number, message: "invalid dependency name \(dependency.debugDescription)")
        }
        tasks.append(TaskSpec(name: name, dependencies: dependencies, commands: [], line: number))
    }
    for task in tasks {
        for dependency in task.dependencies where !seen.contains(dependency) {
            throw TaskFileError(line: task.line, message: "task \(task.name) depends on unknown task \(dependency)")
        }
    }
    return tasks
}

private func isValidName(_ name: String) -> Bool {
    !name.isEmpty && name.unicodeScalars.allSatisfy { scalar in
        scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || scalar == "-" || scalar == "_" || scalar == "."
    }
}

extension String {
    func trimmingSpaces() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[start...end])
    }
}
