// pmake: a parallel task runner built on OperationKit.
//
// It reads a Makefile-like task file (Examples/pmake/sample.pmake shows the format), runs each
// task's shell lines in a child process wrapped as a procedure, at most `-j N` at once, skips
// the dependents of a task that failed, and on Ctrl-C cancels everything, terminating the running
// child processes. While it runs it prints a progress line; at the end, a summary with each task's
// outcome and time.
//
//     swift run pmake -f Examples/pmake/sample.pmake -j 2
//     swift run pmake -f FILE --graph             # print the task graph as Mermaid and exit
//
// Exit status: 0 if every task succeeded, 1 if one failed or was skipped, 2 for a bad task file
// or bad arguments, 130 when interrupted.

import Dispatch
import Foundation
import OperationKit

struct Options {
    var file = "Examples/pmake/sample.pmake"
    var jobs = 2
    var graphOnly = false
    var targets: [String] = []
}

func usage() -> Never {
    FileHandle.standardError.write(Data("""
        usage: pmake [-f FILE] [-j N] [--graph] [TASK...]
          -f FILE   the task file (default: Examples/pmake/sample.pmake)
          -j N      run at most N tasks at once (default: 2)
          --graph   print the task graph as Mermaid and exit
          TASK      run only these tasks and what they depend on (default: all)

        """.utf8))
    exit(2)
}

func parseOptions(_ arguments: [String]) -> Options {
    var options = Options()
    var rest = arguments[...]
    while let argument = rest.popFirst() {
        switch argument {
        case "-f":
            guard let file = rest.popFirst() else { usage() }
            options.file = file
        case "-j":
            guard let value = rest.popFirst().flatMap(Int.init), value >= 1 else { usage() }
            options.jobs = value
        case "--graph": options.graphOnly = true
        case "-h", "--help": usage()
        default:
            if argument.hasPrefix("-") { usage() }
            options.targets.append(argument)
        }
    }
    return options
}

func fail(_ message: String, status: Int32 = 2) -> Never {
    FileHandle.standardError.write(Data("pmake: \(message)\n".utf8))
    exit(status)
}

/// The tasks named in `targets` and everything they depend on, in file order.
func selected(_ specs: [TaskSpec], targets: [String]) -> [TaskSpec] {
    guard !targets.isEmpty else { return specs }
    let byName = Dictionary(uniqueKeysWithValues: specs.map { ($0.name, $0) })
    var wanted: Set<String> = []
    var stack = targets
    while let name = stack.popLast() {
        guard let spec = byName[name] else { fail("no task named \(name)") }
        if wanted.insert(name).inserted { stack += spec.dependencies }
    }
    return specs.filter { wanted.contains($0.name) }
}

func mermaid(of specs: [TaskSpec]) -> String {
    var lines = ["graph LR"]
    for spec in specs {
        lines.append("    \(spec.name.mermaidID)[\"\(spec.name)\"]")
        for dependency in spec.dependencies { lines.append("    \(dependency.mermaidID) --> \(spec.name.mermaidID)") }
    }
    return lines.joined(separator: "\n")
}

extension String {
    var mermaidID: String { "t_" + String(unicodeScalars.map { $0.properties.isAlphabetic || ("0"..."9").contains($0) ? Character($0) : "_" }) }
}

func formatted(_ duration: Duration?) -> String {
    guard let duration else { return "-" }
    let milliseconds = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    return milliseconds < 1000 ? "\(Int(milliseconds.rounded())) ms" : String(format: "%.2f s", milliseconds / 1000)
}

// MARK: Main

/// Runs pmake; returns its exit status. (Not top-level code: that would run on the main actor,
/// and the queue's handlers and the signal handler run on other threads.)
func runPmake(_ options: Options) -> Int32 {

    guard let text = try? String(contentsOfFile: options.file, encoding: .utf8) else { fail("cannot read \(options.file)") }
    let specs: [TaskSpec]
    do {
        specs = selected(try parseTaskFile(text), targets: options.targets)
    } catch {
        fail("\(options.file): \(error)")
    }
    if options.graphOnly {
        print(mermaid(of: specs))
        return 0
    }

    let queue = ConcurrentOperationQueue(name: "pmake")
    do { try queue.setMaxConcurrentOperationCount(options.jobs) } catch { fail("\(error)") }
    let tasks = specs.map(ShellTask.init(spec:))
    let byName = Dictionary(uniqueKeysWithValues: tasks.map { ($0.spec.name, $0) })
    do {
        for task in tasks {
            for dependency in task.spec.dependencies { try task.addDependency(byName[dependency]!) }
            // A task whose dependency failed (or was skipped) does not run.
            if !task.spec.dependencies.isEmpty { try task.addCondition(NoFailedDependencies()) }
        }
    } catch {
        fail("\(options.file): \(error)")
    }

    // Progress: a line per finished task (a live line on a terminal).
    let interactive = isatty(STDOUT_FILENO) != 0
    let printLock = NSLock()
    let total = tasks.count
    let finishedCount = ManagedAtomicCounter()
    let interrupted = ManagedAtomicCounter()
    queue.eventHandlers = QueueEventHandlers(didFinish: { operation in
        guard let task = operation as? ShellTask else { return }
        let done = finishedCount.increment()
        printLock.lock()
        defer { printLock.unlock() }
        let outcome =
            task.isCancelled
            ? (interrupted.value > 0 || task.errors.isEmpty ? "cancelled" : "skipped")
            : (task.errors.isEmpty ? "done" : "FAILED")
        var text = interactive ? "\r\u{1B}[K" : ""  // on a terminal, overwrite the progress line
        for line in task.output.split(separator: "\n", omittingEmptySubsequences: true) {
            text += "  \(task.spec.name) | \(line)\n"
        }
        text += "[\(done)/\(total)] \(task.spec.name) \(outcome) (\(formatted(task.duration)))"
        if interactive {
            FileHandle.standardOutput.write(Data(text.utf8))  // unbuffered: the line stays until the next
        } else {
            print(text)
        }
    })

    // Ctrl-C: cancel everything; running child processes are terminated by their tasks' cancel.
    signal(SIGINT, SIG_IGN)
    let interrupts = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
    interrupts.setEventHandler {
        if interrupted.increment() == 1 {
            printLock.lock()
            print("\npmake: interrupted, cancelling")
            printLock.unlock()
            queue.cancelAllOperations()
        }
    }
    interrupts.resume()

    let started = ContinuousClock.now
    do { try queue.addOperations(tasks, waitUntilFinished: false) } catch { fail("\(error)") }
    queue.waitUntilAllOperationsAreFinishedBlocking()
    let elapsed = ContinuousClock.now - started
    if interactive { print("") }

    // Summary.
    print("\nsummary (\(total) tasks, -j \(options.jobs), \(formatted(elapsed))):")
    let width = tasks.map(\.spec.name.count).max() ?? 0
    var failures = 0
    for task in tasks {
        let outcome: String
        if task.isCancelled {
            let blockers = task.spec.dependencies.filter { name in byName[name].map { !$0.errors.isEmpty || $0.isCancelled } ?? false }
            outcome = interrupted.value > 0 ? "cancelled" : "skipped: \(blockers.joined(separator: ", ")) did not succeed"
            failures += 1
        } else if let error = task.errors.first {
            outcome = "failed: \(error)"
            failures += 1
        } else {
            outcome = "ok"
        }
        print("  \(task.spec.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(formatted(task.duration).padding(toLength: 9, withPad: " ", startingAt: 0))  \(outcome)")
    }
    return interrupted.value > 0 ? 130 : failures > 0 ? 1 : 0
}

exit(runPmake(parseOptions(Array(CommandLine.arguments.dropFirst()))))
