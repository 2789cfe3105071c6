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

/// One scenario's samples, in ms, run by run: in round `i` every contender ran its `i`th run, in
/// turn (Foundation's reduced plan runs in the first rounds only).
struct ResultRow {
    let title: String
    let operationKit: [Double]
    let foundation: [Double]
    let dispatch: [Double]
    /// `ClosureProcedure`s with one satisfied condition and one observer, on a `ConcurrentOperationQueue`.
    let procedure: [Double]
    /// `ClosureProcedure`s with no condition and no observer.
    let bareProcedure: [Double]
    /// `AsyncOperation`s running the same body, on a `ConcurrentOperationQueue`.
    let asyncOperation: [Double]
    /// The benchmark's own minimal scheduler; nil where it does not apply (S5: no cancellation).
    let minimal: [Double]?
}

/// The median of the rounds' own ratios, `numerator[i] / denominator[i]`, over the rounds both ran
/// (`nil` if none). Paired by round, a burst of load from elsewhere that slows one round moves one
/// ratio, where it would move one contender's median and not the other's: on a noisy machine this
/// is the steadier figure (the ratio of the medians moves more from one run to the next; see
/// Benchmarks/README.md). Every table with a target reports its ratios this way.
func pairedRatioValue(_ numerator: [Double], _ denominator: [Double]) -> Double? {
    let ratios = zip(numerator, denominator).map { $0 / $1 }
    return ratios.isEmpty ? nil : median(ratios)
}

/// ``pairedRatioValue(_:_:)`` formatted, or "—" without a denominator.
func pairedRatio(_ numerator: [Double], _ denominator: [Double]?) -> String {
    guard let denominator, let ratio = pairedRatioValue(numerator, denominator) else {
        return "—"
    }
    return format(ratio)
}

/// The comparison as a Markdown table: each contender's median in ms, and OperationKit's
/// (`ClosureOperation`'s) time over the other's as the median of the rounds' ratios
/// (``pairedRatio(_:_:)``). "OK/minimal" is the distance to the benchmark's own minimal scheduler.
func markdownTable(_ rows: [ResultRow]) -> [String] {
    var lines = [
        "| scenario | OperationKit ms | Foundation ms | Dispatch ms | minimal ms | OK/Foundation | OK/Dispatch "
            + "| OK/minimal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows {
        let cells = [
            row.title,
            format(median(row.operationKit)),
            format(median(row.foundation)),
            format(median(row.dispatch)),
            row.minimal.map { format(median($0)) } ?? "—",
            pairedRatio(row.operationKit, row.foundation),
            pairedRatio(row.operationKit, row.dispatch),
            pairedRatio(row.operationKit, row.minimal),
        ]
        lines.append("| " + cells.joined(separator: " | ") + " |")
    }
    return lines
}

/// The most a procedure (one satisfied condition, one observer) may cost relative to a `ClosureOperation`.
let procedureTarget = 2.0

/// The cost of the procedure machinery: the procedure contender against OperationKit's `ClosureOperation`
/// in the same runs (and against Foundation, for scale), as medians in ms and ratios paired by round
/// (``pairedRatio(_:_:)``). Reported, not enforced (CI machines are noisy).
func procedureTable(_ rows: [ResultRow]) -> [String] {
    var lines = [
        "| scenario | OperationKit ms | OK procedure ms | procedure/OK (target <= \(format(procedureTarget, decimals: 1))) "
            + "| procedure/Foundation | OK bare procedure ms | bare procedure/OK | OK async ms | async/OK |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows {
        let over = (pairedRatioValue(row.procedure, row.operationKit) ?? 0) > procedureTarget
        let cells = [
            row.title,
            format(median(row.operationKit)),
            format(median(row.procedure)),
            pairedRatio(row.procedure, row.operationKit) + (over ? " (over)" : ""),
            pairedRatio(row.procedure, row.foundation),
            format(median(row.bareProcedure)),
            pairedRatio(row.bareProcedure, row.operationKit),
            format(median(row.asyncOperation)),
            pairedRatio(row.asyncOperation, row.operationKit),
        ]
        lines.append("| " + cells.joined(separator: " | ") + " |")
    }
    return lines
}
