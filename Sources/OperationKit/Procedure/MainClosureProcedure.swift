// MainClosureProcedure: a procedure whose closure runs on the main thread (the main dispatch
// queue), whichever queue the procedure itself is in.
import Dispatch

/// A ``ResultProcedure`` whose closure runs on the main thread, wherever the procedure is queued:
/// its `execute()` hops to the main dispatch queue (or, in ``ConcurrentOperationQueue/main``,
/// runs the closure at once) — for work that touches main-thread-only state, such as an app's UI.
///
/// ```swift
/// let show = MainClosureProcedure<Void>(name: "show") { label.text = "Done" }
/// try show.addDependency(download)
/// try queue.addOperation(show)   // any queue: the closure still runs on the main thread
/// ```
///
/// - The closure's return value finishes the procedure (its ``ResultProcedure/output``); an error
///   it throws finishes it with that error.
/// - Cancelled before it executes, it never hops and never runs the closure. Cancelled while it
///   waits for the main queue, it finishes there without running the closure. The closure runs
///   at most once.
/// - It holds its queue's concurrency slot until the main queue has run it, so the main queue must
///   be serviced: an app's run loop, or `dispatchMain()` in a command-line tool.
public final class MainClosureProcedure<Output: Sendable>: ResultProcedure<Output>, @unchecked Sendable {
    // Set in init; taken (and cleared) on the main queue by the one hop `execute()` makes, or
    // cleared when the procedure finishes without executing.
    @exclusivity(unchecked) private var body: (@MainActor @Sendable () throws -> Output)?

    /// A procedure that runs `body` on the main thread and finishes with its value, or with the
    /// error it throws.
    ///
    /// - Parameters:
    ///   - name: A name for logs and errors.
    ///   - body: The work, run on the main actor (the main thread).
    public init(name: String? = nil, _ body: @escaping @MainActor @Sendable () throws -> Output) {
        self.body = body
        super.init(name: name, hookEvents: [])  // overrides no hook
    }

    /// Runs the closure on the main queue: at once on ``ConcurrentOperationQueue/main``'s worker,
    /// else after a hop to the main dispatch queue.
    public override func execute() {
        if let current = ConcurrentOperationQueue.current, current === ConcurrentOperationQueue.main {
            runOnMain()
        } else {
            DispatchQueue.main.async { self.runOnMain() }
        }
    }

    /// On the main thread: runs the closure unless the procedure was cancelled meanwhile, and
    /// finishes it.
    private func runOnMain() {
        let work = body
        body = nil
        guard let work, !isCancelled else {
            finish()
            return
        }
        do {
            let value = try MainActor.assumeIsolated { try work() }
            finish(withValue: value)
        } catch {
            finish(with: error)
        }
    }

    override func didFinishWithoutExecuting() {
        body = nil
    }
}
