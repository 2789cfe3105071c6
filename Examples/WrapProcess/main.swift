// WrapProcess: turning a callback API into operations.
//
// Foundation's `Process` reports the end of a child process through `terminationHandler`, a
// callback on a thread of Foundation's choosing. `ClosureOperation(asynchronous:)` hands the
// operation to the closure, which launches the process and returns at once; the operation stays
// executing, holding its place in the queue's concurrency limit but no thread, until the
// termination handler calls `finish()`. If the process cannot be launched, the closure finishes
// the operation itself, so nothing waits forever.
//
//     list ──▶ sort ──┐
//     fails ──────────┼──▶ report
//     missing ────────┘
//
// Run it with `swift run WrapProcess`.

import Foundation
import OperationKit

/// What one process did. Written once, before its operation calls `finish()`, and read only by
/// operations that depend on it or after waiting for it: the queue orders those accesses.
final class ProcessRecord: @unchecked Sendable {
    var output = ""
    var exitCode: Int32?
    var launchError: String?

    var summary: String {
        if let launchError { return "could not launch: \(launchError)" }
        return "exit code \(exitCode.map(String.init) ?? "?"), output \(output.debugDescription)"
    }
}

/// An operation that runs `executable` with `arguments` and finishes when the process exits.
///
/// - Parameters:
///   - name: The operation's name.
///   - executable: The path of the program.
///   - arguments: Its arguments.
///   - input: Called when the operation starts (so after its dependencies finished); its result is
///     written to the process's standard input.
///   - record: Receives the output and exit code, or the launch error.
func processOperation(
    name: String,
    executable: String,
    arguments: [String],
    input: (@Sendable () -> String)? = nil,
    record: ProcessRecord
) -> ClosureOperation {
    ClosureOperation(name: name, asynchronous: { operation in
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        let stdin = input.map { _ in Pipe() }
        if let stdin { process.standardInput = stdin }

        process.terminationHandler = { process in
            // The example's outputs are tiny, so reading after exit is fine; a process that writes
            // more than a pipe holds (64 KiB) would block until someone reads.
            let data = output.fileHandleForReading.readDataToEndOfFile()
            record.output = String(decoding: data, as: UTF8.self)
            record.exitCode = process.terminationStatus
            print("\(name): exited with \(process.terminationStatus)")
            operation.finish()
        }

        do {
            print("\(name): launching \(([executable] + arguments).joined(separator: " "))")
            try process.run()
        } catch {
            // No process, so no termination handler: finish here, or the operation would never end.
            record.launchError = error.localizedDescription
            print("\(name): launch failed")
            operation.finish()
            return
        }
        if let stdin, let input {
            stdin.fileHandleForWriting.write(Data(input().utf8))
            try? stdin.fileHandleForWriting.close()
        }
    })
}

func main() throws {
    let queue = ConcurrentOperationQueue(name: "processes")

    let listed = ProcessRecord()
    let sorted = ProcessRecord()
    let failed = ProcessRecord()
    let missing = ProcessRecord()

    let list = processOperation(
        name: "list", executable: "/bin/sh", arguments: ["-c", "echo pear; echo apple; echo fig"], record: listed)
    // `sort` reads what `list` printed: it starts only after `list` has finished.
    let sort = processOperation(
        name: "sort", executable: "/usr/bin/sort", arguments: [], input: { listed.output }, record: sorted)
    let fails = processOperation(
        name: "fails", executable: "/bin/sh", arguments: ["-c", "echo 'giving up'; exit 3"], record: failed)
    let notThere = processOperation(
        name: "missing", executable: "/no/such/program", arguments: [], record: missing)

    let report = ClosureOperation(name: "report") {
        print("report: all processes are done")
    }

    try sort.addDependency(list)
    try report.addDependency(sort)
    try report.addDependency(fails)
    try report.addDependency(notThere)

    try queue.addOperations([report, notThere, fails, sort, list], waitUntilFinished: false)
    queue.waitUntilAllOperationsAreFinishedBlocking()

    print("")
    print("list:    \(listed.summary)")
    print("sort:    \(sorted.summary)")
    print("fails:   \(failed.summary)")
    print("missing: \(missing.summary)")
    print("all finished: \([list, sort, fails, notThere, report].allSatisfy(\.isFinished))")
}

try main()
