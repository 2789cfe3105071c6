// Delivery to an observer that asked for its events on a dispatch queue (`eventQueue`): the
// procedure's delivering thread posts each event to a mailbox, which runs them on that queue one
// at a time, in the order posted. Nobody holding a procedure's delivery ever waits for the queue,
// so a thread on that queue that raises an event of the same procedure cannot deadlock with it.
//
// What must have returned before the procedure goes on is waited for after the delivery:
// - will execute and will add: the raising thread waits (`ProcedureOperation.awaitEventQueues`);
//   on the observer's queue itself it runs the waiting events there and then, in order, instead;
// - will finish and did finish: the rest of the finish runs once the mailboxes have run what was
//   posted — as a last job on the observer's queue if it has not yet (`EventMailboxes.after`).

import Dispatch

/// The events of one procedure for one observer with an event queue, run on that queue in the
/// order they were posted. Its lock is its own (never a procedure's lock, never held while a job
/// runs).
final class EventMailbox: @unchecked Sendable {  // every field is under `lock`
    /// A job: an event for the observer (its kind, for `isRunning`), or a continuation.
    private struct Job {
        let kind: ProcedureEventKinds
        let body: @Sendable () -> Void
    }

    let queue: DispatchQueue
    private let lock = Lock()
    private var jobs: [Job] = []
    private var head = 0
    /// A drain is scheduled on the queue (or running there).
    private var scheduled = false
    /// The thread running a job now, if one is.
    private var running: ThreadIdentity?
    /// The kind of event of the job running now (empty for a continuation).
    private var runningKind: ProcedureEventKinds = []

    init(queue: DispatchQueue) {
        self.queue = queue
        EventQueueMark.mark(queue)
    }

    /// Whether the calling thread runs on this mailbox's queue (so it may run the jobs itself).
    var isOnQueue: Bool { EventQueueMark.isCurrent(queue) }

    /// Posts an event for the observer; it runs on the queue after every job posted before it.
    func post(_ kind: ProcedureEventKinds, _ body: @escaping @Sendable () -> Void) {
        let schedule = lock.withLock { () -> Bool in
            jobs.append(Job(kind: kind, body: body))
            if scheduled { return false }
            scheduled = true
            return true
        }
        if schedule { queue.async { self.drain() } }
    }

    /// Whether the calling thread is running a job of this mailbox for an event of `kind`.
    func isRunning(_ kind: ProcedureEventKinds) -> Bool {
        lock.withLock { runningKind == kind && running?.isCurrent() == true }
    }

    /// Whether every job posted so far has run.
    private var isDoneLocked: Bool {
        head == jobs.count && running == nil
    }

    /// Runs `body` once every job posted so far has run: returns `false` if they have (the caller
    /// runs `body` now); otherwise posts `body` as a job, which runs on the queue after them.
    func after(_ body: @escaping @Sendable () -> Void) -> Bool {
        let schedule = lock.withLock { () -> Bool? in
            if isDoneLocked { return nil }
            jobs.append(Job(kind: [], body: body))
            if scheduled { return false }
            scheduled = true
            return true
        }
        guard let schedule else { return false }
        if schedule { queue.async { self.drain() } }
        return true
    }

    /// Blocks until every job posted so far has run. On the queue itself, runs them instead —
    /// or, from inside a job of this mailbox, leaves them for after it (see `runPending`).
    func waitUntilDone() {
        if isOnQueue {
            runPending()
            return
        }
        let done = DispatchSemaphore(value: 0)
        if after({ done.signal() }) { done.wait() }
    }

    /// The scheduled drain, on the queue: runs the jobs until none is left.
    private func drain() {
        while let job = take(endingDrain: true) { run(job) }
    }

    /// On the queue, from outside a job of this mailbox: runs the jobs posted so far, in order
    /// (the scheduled drain finds them gone). From inside a job — an event raised by the
    /// observer's own callback — it runs nothing: the events wait until that callback has
    /// returned, as they do for an observer told on the delivering thread.
    func runPending() {
        while let job = take(endingDrain: false) { run(job) }
    }

    /// The next job to run, marked running; none while a job runs (see `runPending`).
    private func take(endingDrain: Bool) -> Job? {
        lock.withLock {
            guard running == nil else { return nil }
            guard head < jobs.count else {
                if endingDrain { scheduled = false }
                // Compacted only when empty: the array is reused.
                jobs.removeAll(keepingCapacity: true)
                head = 0
                return nil
            }
            let job = jobs[head]
            head += 1
            running = .current
            runningKind = job.kind
            return job
        }
    }

    private func run(_ job: Job) {
        job.body()
        lock.withLock { running = nil }
    }
}

/// Several mailboxes: a continuation after all of them.
enum EventMailboxes {
    /// Runs `body` once each mailbox has run the jobs posted so far: now, on this thread, if they
    /// have (running those of a mailbox whose queue this thread is on first), otherwise on the
    /// queue of the last one to get there.
    static func after(_ mailboxes: [EventMailbox], _ body: @escaping @Sendable () -> Void) {
        for mailbox in mailboxes where mailbox.isOnQueue { mailbox.runPending() }
        let remaining = AtomicCountdown(mailboxes.count + 1)
        for mailbox in mailboxes where !mailbox.after({ if remaining.countDown() { body() } }) {
            if remaining.countDown() { body() }
        }
        if remaining.countDown() { body() }
    }

    /// Blocks until each mailbox has run the jobs posted so far (see `EventMailbox.waitUntilDone`).
    static func waitUntilDone(_ mailboxes: [EventMailbox]) {
        for mailbox in mailboxes { mailbox.waitUntilDone() }
    }
}

/// A count shared by continuations: the one that takes it to zero goes on.
private final class AtomicCountdown: @unchecked Sendable {  // `remaining` is under `lock`
    private let lock = Lock()
    private var remaining: Int

    init(_ count: Int) { remaining = count }

    /// Counts one down; `true` for the one that reached zero.
    func countDown() -> Bool {
        lock.withLock {
            remaining -= 1
            return remaining == 0
        }
    }
}

/// Marks a dispatch queue used as an event queue, to recognise a thread running on it.
private final class EventQueueMark: Sendable {
    let queue: ObjectIdentifier
    init(_ queue: DispatchQueue) { self.queue = ObjectIdentifier(queue) }

    /// The key of the marks (set on event queues only).
    static let key = DispatchSpecificKey<EventQueueMark>()

    static func mark(_ queue: DispatchQueue) {
        if queue.getSpecific(key: key)?.queue != ObjectIdentifier(queue) {
            queue.setSpecific(key: key, value: EventQueueMark(queue))
        }
    }

    static func isCurrent(_ queue: DispatchQueue) -> Bool {
        DispatchQueue.getSpecific(key: key)?.queue == ObjectIdentifier(queue)
    }
}

extension ProcedureOperation {
    /// The mailboxes of the observers with an event queue; none (and no lock taken) usually.
    func eventMailboxes() -> [EventMailbox] {
        guard hasEventQueueObservers.load(ordering: .acquiring) else { return [] }
        return lock.withLock { conditionExtras?.eventMailboxes ?? [] }
    }

    /// After this thread raised will execute or will add: waits until the observers with an
    /// event queue have been told it (and what came before it). Not on a thread delivering this
    /// procedure's events: the event waits behind the one in progress there (it is told after
    /// it), and waiting would stop that delivery.
    func awaitEventQueues() {
        guard hasEventQueueObservers.load(ordering: .acquiring) else { return }
        let mailboxes = lock.withLock {
            eventDelivery.isDeliveringOnCurrentThread ? [] : conditionExtras?.eventMailboxes ?? []
        }
        EventMailboxes.waitUntilDone(mailboxes)
    }

    /// Under `lock`: whether this thread is telling an observer with an event queue the
    /// event `kind` of this procedure (a will execute or will finish callback, where an add
    /// before that event is still in time).
    func isTellingEventQueueObserverLocked(_ kind: ProcedureEventKinds) -> Bool {
        guard let mailboxes = conditionExtras?.eventMailboxes, !mailboxes.isEmpty else { return false }
        return mailboxes.contains { $0.isRunning(kind) }
    }
}
