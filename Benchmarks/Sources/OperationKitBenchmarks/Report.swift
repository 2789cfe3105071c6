import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Prints `message` to standard error and exits with status 1, so CI fails on a wrong result.
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("OperationKitBenchmarks: FAILED: \(message)\n".utf8))
    exit(1)
}

/// Prints a line and flushes at once, so progress shows up even when the output is piped.
func report(_ line: String = "") {
    print(line)
    fflush(nil)
}

func median(_ samples: [Double]) -> Double {
    precondition(!samples.isEmpty, "median of no samples")
    let sorted = samples.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

func format(_ value: Double, decimals: Int = 2) -> String {
    String(format: "%.\(decimals)f", value)
}

// MARK: - Machine description

/// A few lines naming the machine and toolchain, so a pasted table says where it was measured.
func machineDescription() -> [String] {
    var lines = ["- cores (nproc): \(ProcessInfo.processInfo.activeProcessorCount)"]
    if let uname = commandOutput(["uname", "-srm"]) {
        lines.append("- kernel: \(uname)")
    }
    if let model = cpuModel() {
        lines.append("- CPU: \(model)")
    }
    if let swift = commandOutput(["swift", "--version"])?.split(separator: "\n").first {
        lines.append("- toolchain: \(swift)")
    }
    if let loadavg = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) {
        let recent = loadavg.split(separator: " ").prefix(3).joined(separator: " ")
        lines.append("- load average at start: \(recent) (other work on the machine skews the timings)")
    }
    #if DEBUG
    lines.append("- build: DEBUG (numbers are meaningless; use -c release)")
    #else
    lines.append("- build: release")
    #endif
    return lines
}

private func cpuModel() -> String? {
    guard let cpuinfo = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else {
        return nil
    }
    for line in cpuinfo.split(separator: "\n") where line.hasPrefix("model name") {
        if let colon = line.firstIndex(of: ":") {
            return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }
    return nil
}

/// Runs a command found on PATH and returns its trimmed standard output, or nil if it could not run.
private func commandOutput(_ arguments: [String]) -> String? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    do {
        try process.run()
    } catch {
        return nil
    }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        return nil
    }
    let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    return text.isEmpty ? nil : text
}

// MARK: - Results table

/// The medians of one scenario, in ms.
struct ResultRow {
    let title: String
    let operationKit: Double
    let foundation: Double
    let dispatch: Double
    /// `ClosureProcedure`s with one satisfied condition and one observer, on a `ConcurrentOperationQueue`.
    let procedure: Double
    /// `ClosureProcedure`s with no condition and no observer.
    let bareProcedure: Double
    /// `AsyncOperation`s running the same body, on a `ConcurrentOperationQueue`.
    let asyncOperation: Double
    /// The benchmark's own minimal scheduler; nil where it does not apply (S5: no cancellation).
    let minimal: Double?
}

/// A ratio, or "—" when there is no denominator.
private func ratio(_ numerator: Double, _ denominator: Double?) -> String {
    guard let denominator else {
        return "—"
    }
    return format(numerator / denominator)
}

/// The comparison as a Markdown table; ratios are OperationKit's (`ClosureOperation`'s) median divided by
/// the other's. "OK/minimal" is the distance to the benchmark's own minimal scheduler.
func markdownTable(_ rows: [ResultRow]) -> [String] {
    var lines = [
        "| scenario | OperationKit ms | Foundation ms | Dispatch ms | minimal ms | OK/Foundation | OK/Dispatch "
            + "| OK/minimal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows {
        let cells = [
            row.title,
            format(row.operationKit),
            format(row.foundation),
            format(row.dispatch),
            row.minimal.map { format($0) } ?? "—",
            format(row.operationKit / row.foundation),
            format(row.operationKit / row.dispatch),
            ratio(row.operationKit, row.minimal),
        ]
        lines.append("| " + cells.joined(separator: " | ") + " |")
    }
    return lines
}

/// The most a procedure (one satisfied condition, one observer) may cost relative to a `ClosureOperation`.
let procedureTarget = 2.0

/// The cost of the procedure machinery: the procedure contender against OperationKit's `ClosureOperation`
/// in the same runs (and against Foundation, for scale). Reported, not enforced (CI machines are noisy).
func procedureTable(_ rows: [ResultRow]) -> [String] {
    var lines = [
        "| scenario | OperationKit ms | OK procedure ms | procedure/OK (target <= \(format(procedureTarget, decimals: 1))) "
            + "| procedure/Foundation | OK bare procedure ms | bare procedure/OK | OK async ms | async/OK |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows {
        let ratio = row.procedure / row.operationKit
        let cells = [
            row.title,
            format(row.operationKit),
            format(row.procedure),
            format(ratio) + (ratio > procedureTarget ? " (over)" : ""),
            format(row.procedure / row.foundation),
            format(row.bareProcedure),
            format(row.bareProcedure / row.operationKit),
            format(row.asyncOperation),
            format(row.asyncOperation / row.operationKit),
        ]
        lines.append("| " + cells.joined(separator: " | ") + " |")
    }
    return lines
}
