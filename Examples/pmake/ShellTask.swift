// pmake's unit of work: a procedure that runs a task's shell lines in a child process, finishes
// when the process exits, and terminates the process when it is cancelled.

import Foundation
import OperationKit
import Synchronization

/// Why a task failed.
struct ShellTaskError: Error, CustomStringConvertible {
    var task: String
    var reason: String
    var description: String { "\(task): \(reason)" }
}

/// Runs `/bin/sh -c` over a task's lines (stopping at the first that fails) and finishes when the
/// process exits: without errors on status 0, with a ``ShellTaskError`` otherwise. The output is
/// collected and printed in one piece when the task ends, so the lines of tasks running at the
/// same time do not interleave. A cancel terminates the process (and what it started).
final class ShellTask: ProcedureOperation, @unchecked Sendable {  // mutable state is in `state`
    let spec: TaskSpec

    private struct State {
        var process: Process?
        var started: ContinuousClock.Instant?
        var ended: ContinuousClock.Instant?
        var output = ""
        var exitStatus: Int32?
    }

    private let run = Mutex(State())

    init(spec: TaskSpec) {
        self.spec = spec
        super.init(name: spec.name)
    }

    /// How long the process ran, once it has ended.
    var duration: Duration? {
        run.withLock { state in
            guard let started = state.started, let ended = state.ended else { return nil }
            return ended - started
        }
    }

    /// What the process printed (standard output and error together).
    var output: String { run.withLock { $0.output } }

    override func execute() {
        run.withLock { $0.started = .now }
        guard !spec.commands.isEmpty else {
            run.withLock { $0.ended = .now }
            finish(with: nil)
            return
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "set -e\n" + spec.commands.joined(separator: "\n")]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        // Read as the process writes, so a chatty task never blocks on a full pipe.
        let collected = Mutex(Data())
        pipe.fileHandleForReading.readabilityHandler = { handle in
            let chunk = handle.availableData
            collected.withLock { $0.append(chunk) }
        }
        process.terminationHandler = { [spec] process in
            pipe.fileHandleForReading.readabilityHandler = nil
            let rest = pipe.fileHandleForReading.readDataToEndOfFile()
            let text = collected.withLock { data in
                data.append(rest)
                return String(decoding: data, as: UTF8.self)
            }
            let status = process.terminationStatus
            let killed = process.terminationReason == .uncaughtSignal
            self.run.withLock { state in
                state.ended = .now
                state.output = text
                state.exitStatus = status
                state.process = nil
            }
            if killed {
                self.finish(with: ShellTaskError(task: spec.name, reason: "terminated by signal \(status)"))
            } else if status != 0 {
                self.finish(with: ShellTaskError(task: spec.name, reason: "exit status \(status)"))
            } else {
                self.finish(with: nil)
            }
        }
        do {
            // Registered before the launch, so that a cancel that comes meanwhile finds it.
            run.withLock { $0.process = process }
            try process.run()
        } catch {
            // No process, so no termination handler: finish here, or the task would never end.
            run.withLock { state in
                state.process = nil
                state.ended = .now
            }
            finish(with: ShellTaskError(task: spec.name, reason: "could not start /bin/sh: \(error)"))
            return
        }
        // Cancelled while launching: the cancel found no running process to stop.
        if isCancelled { Self.terminate(process) }
    }

    override func procedureDidCancel(with error: (any Error)?) {
        let process = run.withLock { $0.process }
        if let process, process.isRunning { Self.terminate(process) }  // its handler finishes the task
    }

    /// Sends SIGTERM to the process's whole process group — the shell and the commands it started
    /// (a shell waiting for a command would otherwise only die after it). Foundation starts each
    /// child in a process group of its own.
    private static func terminate(_ process: Process) {
        let pid = process.processIdentifier
        if pid > 0 { kill(-pid, SIGTERM) }
    }
}
