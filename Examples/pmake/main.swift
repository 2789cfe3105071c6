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
//     swift run pmake --trace run.json --why 5     # a Perfetto timeline; what waits, after 5 s
//
// While it runs, `kill -USR1 <pid>` prints what each task waits for (the queue's snapshot).
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
    var trace: String?
    var why: Duration?
    var targets: [String] = []
}

func usage() -> Never {
    FileHandle.standardError.write(Data("""
        usage: pmake [-f FILE] [-j N] [--graph] [--trace OUT.json] [--why SECONDS] [TASK...]
          -f FILE          the task file (default: Examples/pmake/sample.pmake)
          -j N             run at most N tasks at once (default: 2)
          --graph          print the task graph (Mermaid) and exit
          --trace FILE     write a Chrome trace / Perfetto timeline of the run to FILE
          --why SECONDS    if the run is not over after SECONDS, print what each task waits for
          TASK             run only these tasks and what they depend on (default: all)
        Send SIGUSR1 (kill -USR1 PID) to print what each task waits for at any time.

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
        case "--trace":
            guard let file = rest.popFirst() else { usage() }
            options.trace = file
        case "--why":
            guard let seconds = rest.popFirst().flatMap(Double.init), seconds >= 0 else { usage() }
            options.why = .milliseconds(Int64(seconds * 1000))
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

    let queue = ConcurrentOperationQueue(name: "pmake")
    // The timeline, if asked for: the recorder is told every event of the queue's operations.
    let recorder = options.trace.map { _ in TimelineRecorder() }
    if let recorder { queue.instrument = recorder }
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

    // --graph: the tasks in a suspended queue, drawn from its snapshot, then cancelled unrun.
    if options.graphOnly {
        queue.isSuspended = true
        do { try queue.addOperations(tasks, waitUntilFinished: false) } catch { fail("\(error)") }
        print(queue.snapshot().mermaid, terminator: "")
        queue.cancelAllOperations()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinishedBlocking()
        return 0
    }

    // A line per finished task, with its output; the queue's aggregate progress as a live line
    // on a terminal (at most every 100 ms), as a line every second otherwise.
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
        var text = interactive ? "\r\u{1B}[K" : ""  // on a terminal, clear the progress line first
        for line in task.output.split(separator: "\n", omittingEmptySubsequences: true) {
            text += "  \(task.spec.name) | \(line)\n"
        }
        text += "[\(done)/\(total)] \(task.spec.name) \(outcome) (\(formatted(task.duration)))\n"
        FileHandle.standardOutput.write(Data(text.utf8))
    })
    let progress = queue.observeProgress(.coalesced(every: interactive ? .milliseconds(100) : .seconds(1))) { value in
        printLock.lock()
        defer { printLock.unlock() }
        guard value.total > 0 else { return }
        let line = "progress: \(value.completed)/\(value.total) tasks, \(Int((value.fractionCompleted * 100).rounded()))%"
        FileHandle.standardOutput.write(Data((interactive ? "\r\u{1B}[K" + line : line + "\n").utf8))
    }

    // What each task waits for: on SIGUSR1, and once after --why SECONDS if the run is not over.
    @Sendable func printSnapshot(_ heading: String) {
        let snapshot = queue.snapshot()
        printLock.lock()
        defer { printLock.unlock() }
        FileHandle.standardOutput.write(Data("\n\(heading)\n\(snapshot)\n".utf8))
    }
    signal(SIGUSR1, SIG_IGN)
    let snapshotRequests = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: .global())
    snapshotRequests.setEventHandler { printSnapshot("pmake: SIGUSR1, the queue now:") }
    snapshotRequests.resume()
    let runOver = ManagedAtomicCounter()
    if let why = options.why {
        let seconds = Double(why.components.seconds) + Double(why.components.attoseconds) / 1e18
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            if runOver.value == 0 { printSnapshot("pmake: still running after \(formatted(why)); the queue now:") }
        }
    }

    // Ctrl-C: cancel everything; running child processes are terminated by their tasks' cancel.
    signal(SIGINT, SIG_IGN)
    let interrupts = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
    interrupts.setEventHandler {
        if interrupted.increment() == 1 {
            printLock.lock()
            FileHandle.standardOutput.write(Data("\npmake: interrupted, cancelling\n".utf8))
            printLock.unlock()
            queue.cancelAllOperations()
        }
    }
    interrupts.resume()

    let started = ContinuousClock.now
    do { try queue.addOperations(tasks, waitUntilFinished: false) } catch { fail("\(error)") }
    queue.waitUntilAllOperationsAreFinishedBlocking()
    _ = runOver.increment()
    let elapsed = ContinuousClock.now - started
    progress.cancel()
    printLock.lock()
    if interactive { FileHandle.standardOutput.write(Data("\n".utf8)) }
    printLock.unlock()
    if let recorder, let path = options.trace {
        do {
            try recorder.write(toFile: path)
            print("timeline written to \(path) (open it in https://ui.perfetto.dev or chrome://tracing)")
        } catch {
            fail("cannot write \(path): \(error)")
        }
    }

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
