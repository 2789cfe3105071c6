import CMallocInfo
import Foundation

// MARK: - Heap growth per pending operation (in process)

/// Bytes the C heap currently hands out: arena chunks (`uordblks`) plus mmapped chunks (`hblkhd`), or nil
/// where glibc's `mallinfo2` is unavailable.
///
/// Large buffers (a queue's storage for 100,000 entries, say) can be served by mmap, so both are counted.
func heapBytesInUse() -> Int? {
    let bytes = Int(cmallocinfo_heap_bytes_in_use())
    return bytes > 0 ? bytes : nil
}

/// Heap growth per unit while `count` units sit in a suspended scheduler; they are then cancelled and drained.
///
/// The caller-side array is reserved before the first reading, so it is not counted.
func heapBytesPerPendingUnit<C: Contender>(_: C.Type, count: Int) -> Double? {
    let contender = C()
    let probe = Probe()
    var before: Int?
    var after: Int?
    contender.runSuspended(
        count: count,
        cancelling: true,
        body: { probe.tick() },
        beforeCreating: { before = heapBytesInUse() },
        afterAdding: { after = heapBytesInUse() }
    )
    probe.verify(executed: 0, in: "heap measurement on \(C.name)")
    guard let before, let after else {
        return nil
    }
    return Double(after - before) / Double(count)
}

// MARK: - Peak resident set (one child process per measurement)

/// The memory section of the report, for `count` operations pending in a suspended queue.
func memoryReport(count: Int, quick: Bool) -> [String] {
    func heapCell<C: Contender>(_: C.Type) -> String {
        let samples = (0..<3).compactMap { _ in heapBytesPerPendingUnit(C.self, count: count) }
        return samples.isEmpty ? "n/a" : format(median(samples), decimals: 1)
    }
    // Peak RSS barely varies between runs; three children per mode in full mode, one in quick mode.
    let repeats = quick ? 1 : 3
    func peakKiB(_ mode: PeakMode) -> Double {
        median((0..<repeats).map { _ in Double(measurePeakInChild(mode, quick: quick)) })
    }
    let idle = peakKiB(.idle)
    func peakCell(_ mode: PeakMode) -> String {
        format((peakKiB(mode) - idle) * 1024 / Double(count), decimals: 1)
    }
    return [
        "## Memory per pending operation (\(count) operations in a suspended queue)",
        "",
        "| contender | heap bytes/op (mallinfo2) | peak RSS bytes/op (VmHWM - idle) |",
        "|---|---:|---:|",
        "| OperationKit | \(heapCell(OperationKitContender.self)) | \(peakCell(.operationKit)) |",
        "| OK procedure (ClosureProcedure, 1 condition, 1 observer) | \(heapCell(ProcedureContender.self)) | - |",
        "| OK bare procedure (ClosureProcedure, nothing added) | \(heapCell(BareProcedureContender.self)) | - |",
        "| OK async (AsyncOperation) | \(heapCell(AsyncOperationContender.self)) | - |",
        "| Foundation | \(heapCell(FoundationContender.self)) | \(peakCell(.foundation)) |",
        "| Dispatch (DispatchWorkItem, for reference) | \(heapCell(DispatchContender.self)) | - |",
        "",
        "Heap: growth of mallinfo2 uordblks + hblkhd from before creating the operations to after adding them;",
        "the caller's array is reserved beforehand and not counted. Peak RSS: VmHWM of a child process running",
        "only S1 (suspended, added, resumed, drained) minus an idle child holding an equally large array",
        "(idle VmHWM \(Int(idle)) KiB). Target for OperationKit: <= 250 peak bytes per pending operation.",
    ]
}


/// What a `--peak-rss` child process does before it reports its peak resident set.
enum PeakMode: String, CaseIterable {
    case idle
    case operationKit = "s1-operationkit"
    case foundation = "s1-foundation"
}

/// The process's peak resident set size in KiB (`VmHWM` in /proc/self/status).
func peakResidentKiB() -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else {
        return nil
    }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        return fields.count >= 2 ? Int(fields[1]) : nil
    }
    return nil
}

/// Child side: does only `mode`'s work, then prints `VmHWM <KiB> KiB` on a line of its own.
///
/// `idle` starts both queue types with one operation each and holds an array as large as the one the
/// S1 modes hold, so the difference isolates what the operations and the queue keep per pending entry.
func runPeakChild(_ mode: PeakMode, count: Int) -> Never {
    let probe = Probe()
    switch mode {
    case .idle:
        OperationKitContender().runIndependent(count: 1) { probe.tick() }
        FoundationContender().runIndependent(count: 1) { probe.tick() }
        let placeholder = Probe()
        var references: [AnyObject] = []
        references.reserveCapacity(count)
        for _ in 0..<count {
            references.append(placeholder)
        }
        withExtendedLifetime(references) {
            probe.verify(executed: 2, in: "peak-rss idle")
        }
    case .operationKit:
        OperationKitContender().runSuspended(count: count, cancelling: false) { probe.tick() }
        probe.verify(executed: count, in: "peak-rss \(mode.rawValue)")
    case .foundation:
        FoundationContender().runSuspended(count: count, cancelling: false) { probe.tick() }
        probe.verify(executed: count, in: "peak-rss \(mode.rawValue)")
    }
    guard let peak = peakResidentKiB() else {
        fail("VmHWM is not available in /proc/self/status")
    }
    print("VmHWM \(peak) KiB")
    exit(0)
}

/// Parent side: runs this executable with `--peak-rss mode` and returns the child's VmHWM in KiB.
func measurePeakInChild(_ mode: PeakMode, quick: Bool) -> Int {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: currentExecutablePath())
    process.arguments = ["--peak-rss", mode.rawValue] + (quick ? ["--quick"] : [])
    let output = Pipe()
    process.standardOutput = output
    do {
        try process.run()
    } catch {
        fail("could not start the --peak-rss \(mode.rawValue) child: \(error)")
    }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let text = String(decoding: data, as: UTF8.self)
    guard process.terminationStatus == 0 else {
        fail("--peak-rss \(mode.rawValue) child exited with status \(process.terminationStatus): \(text)")
    }
    for line in text.split(separator: "\n") where line.hasPrefix("VmHWM ") {
        let fields = line.split(separator: " ")
        if fields.count >= 2, let kib = Int(fields[1]) {
            return kib
        }
    }
    fail("--peak-rss \(mode.rawValue) child printed no VmHWM line: \(text)")
}

/// The path of this executable, for spawning children in `--peak-rss` mode.
private func currentExecutablePath() -> String {
    if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        return path
    }
    let argument = CommandLine.arguments[0]
    if argument.hasPrefix("/") {
        return argument
    }
    return FileManager.default.currentDirectoryPath + "/" + argument
}
