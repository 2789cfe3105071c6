import Dispatch

/// Something told about a ``ProcedureOperation``'s lifecycle. Add one with
/// ``ProcedureOperation/addObserver(_:)`` before the procedure executes.
///
/// Each event reaches each observer at most once per procedure, in lifecycle order: did attach
/// first; will execute, then did execute (only if the procedure executes); will add and did add
/// (then did produce) for each operation it produces or, for a group, each child added; did cancel (when it is cancelled: before, during or instead of executing); will
/// finish and did finish last, exactly once. The procedure's own `procedure…` hook for an event
/// runs just before the observers, which are told in the order they were added.
///
/// Events of one procedure are delivered one at a time, in the order they happened, and never
/// while a lock is held (except as ``GroupOperation/addChild(_:)`` describes). Each runs on the
/// thread where it happens:
///
/// - did attach: the thread calling ``ProcedureOperation/addObserver(_:)``;
/// - will execute: the thread that then runs ``ConcurrentOperation/execute()`` (a worker of the
///   procedure's queue, or the caller of ``ConcurrentOperation/start()``);
/// - did execute: that thread once `execute()` returns, or the finishing thread if the finish
///   came first;
/// - did cancel: the cancelling thread (for ``TimeoutObserver``, its clock's timer thread: in
///   real time a thread of the global dispatch queue);
/// - will add, did add, did produce: the thread calling ``ProcedureOperation/produce(_:before:)``
///   or ``GroupOperation/addChild(_:before:)``;
/// - will finish and did finish: the finishing thread (the one that called `finish`, or for a
///   procedure that finishes without executing, the queue worker that reached it).
///
/// An event raised while another thread is delivering an event of the same procedure is handed
/// to that thread, which delivers it right after the one in progress (the raising thread waits
/// for will execute and will finish). So an observer must never wait for its own procedure —
/// to finish, or to get past another event — or it waits for itself. Did finish comes after the
/// procedure's completion block and before any wait for the procedure or its queue returns: a
/// wait returns only once the did-finish observers have returned.
///
/// Every method has an empty default implementation: implement only what you need.
public protocol OperationObserver: Sendable {
    /// The observer was added to `procedure`. The first event, delivered once.
    ///
    /// - Parameter procedure: The procedure observed.
    func didAttach(to procedure: ProcedureOperation)
    /// `procedure` is about to execute: its conditions were satisfied and it was not cancelled.
    /// Its state is already ``ProcedureState/executing``; its work starts once every observer
    /// has returned.
    ///
    /// - Parameter procedure: The procedure observed.
    func willExecute(_ procedure: ProcedureOperation)
    /// `procedure`'s ``ConcurrentOperation/execute()`` returned (or the procedure finished, if
    /// that came first). The procedure may still be executing, waiting for its work to finish it.
    ///
    /// - Parameter procedure: The procedure observed.
    func didExecute(_ procedure: ProcedureOperation)
    /// `procedure` was cancelled, with `error` if one was given. An executing procedure is not
    /// finished by this (unless ``ProcedureOperation/finishesWhenCancelled`` is set).
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - error: The error given to ``ProcedureOperation/cancel(with:)`` (a failed condition's
    ///     error), or `nil`.
    func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?)
    /// `procedure` produced `operation`, which is now in its queue (see
    /// ``ProcedureOperation/produce(_:)``).
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation it produced.
    func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation)
    /// `procedure` is about to add `operation`: one it produces (``ProcedureOperation/produce(_:before:)``)
    /// or, for a ``GroupOperation``, a child (``GroupOperation/addChild(_:before:)``). The add
    /// happens once every observer has returned; it may still be refused (then no did add follows).
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation about to be added.
    func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation)
    /// `procedure` added `operation` (it is in its queue, or its group's queue). For a produced
    /// operation ``procedure(_:didProduce:)`` is told right after this.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation added.
    func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation)
    /// `procedure` is finishing, with these errors; it has not finished yet (its completion block
    /// has not run and its dependents are still waiting).
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    func willFinish(_ procedure: ProcedureOperation, with errors: [any Error])
    /// `procedure` finished, with these errors: the last event. Its completion block has run,
    /// its dependents were released and its ``MutuallyExclusive`` categories given back.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    func didFinish(_ procedure: ProcedureOperation, with errors: [any Error])

    /// The events this observer wants; the others are not delivered to it, and a procedure skips
    /// an event that no observer (and no hook of its class) wants. By default every kind.
    var observedEvents: ProcedureEventKinds { get }

    /// The dispatch queue this observer is told its events on, or `nil` (the default) for the
    /// thread where each event happens. Read once, when the observer is added. Give a serial
    /// queue: the events of one procedure are told there one at a time, exactly once, in order.
    ///
    /// The procedure does not go past will execute, will add or will finish until the observer
    /// has returned from it on that queue, and a wait for the procedure (or its queue) returns
    /// only once did finish has returned there. The thread delivering the procedure's events
    /// never waits for the queue, so work on that queue may finish, cancel or produce for the
    /// procedure without a deadlock; an event raised from the observer's own callback is told
    /// after that callback returns. Do not block the queue waiting for the procedure. See also
    /// ``OperationObserver/on(_:)``.
    var eventQueue: DispatchQueue? { get }
}

extension OperationObserver {
    /// Every kind of event.
    public var observedEvents: ProcedureEventKinds { .all }

    /// Does nothing.
    ///
    /// - Parameter procedure: The procedure observed.
    public func didAttach(to procedure: ProcedureOperation) {}

    /// Does nothing.
    ///
    /// - Parameter procedure: The procedure observed.
    public func willExecute(_ procedure: ProcedureOperation) {}

    /// Does nothing.
    ///
    /// - Parameter procedure: The procedure observed.
    public func didExecute(_ procedure: ProcedureOperation) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - error: The cancel's error, or `nil`.
    public func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation it produced.
    public func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {}
}

/// An observer made of closures, one per event of ``OperationObserver``; leave out the ones you
/// do not need. Each closure runs when, and on the thread where, its event is delivered.
///
/// ```swift
/// try procedure.addObserver(ClosureObserver(didFinish: { procedure, errors in
///     log("\(procedure.displayName) finished with \(errors.count) errors")
/// }))
/// ```
public struct ClosureObserver: OperationObserver {
    /// The closures, in one object: the observer is one reference, so an `any OperationObserver`
    /// holds it inline (no box per conversion) and copying it is one retain, not seven.
    private final class Closures: Sendable {
        let onDidAttach: (@Sendable (ProcedureOperation) -> Void)?
        let onWillExecute: (@Sendable (ProcedureOperation) -> Void)?
        let onDidExecute: (@Sendable (ProcedureOperation) -> Void)?
        let onDidCancel: (@Sendable (ProcedureOperation, (any Error)?) -> Void)?
        let onDidProduce: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)?
        let onWillAdd: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)?
        let onDidAdd: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)?
        let onWillFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)?
        let onDidFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)?
        /// The events for which a closure was given (worked out once: the procedure asks for
        /// every event it delivers).
        let observedEvents: ProcedureEventKinds

        init(
            didAttach: (@Sendable (ProcedureOperation) -> Void)?,
            willExecute: (@Sendable (ProcedureOperation) -> Void)?,
            didExecute: (@Sendable (ProcedureOperation) -> Void)?,
            didCancel: (@Sendable (ProcedureOperation, (any Error)?) -> Void)?,
            didProduce: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)?,
            willAdd: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)?,
            didAdd: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)?,
            willFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)?,
            didFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)?
        ) {
            onDidAttach = didAttach
            onWillExecute = willExecute
            onDidExecute = didExecute
            onDidCancel = didCancel
            onDidProduce = didProduce
            onWillAdd = willAdd
            onDidAdd = didAdd
            onWillFinish = willFinish
            onDidFinish = didFinish
            var kinds: ProcedureEventKinds = []
            if didAttach != nil { kinds.insert(.didAttach) }
            if willExecute != nil { kinds.insert(.willExecute) }
            if didExecute != nil { kinds.insert(.didExecute) }
            if didCancel != nil { kinds.insert(.didCancel) }
            if didProduce != nil || didAdd != nil { kinds.insert(.didAdd) }
            if willAdd != nil { kinds.insert(.willAdd) }
            if willFinish != nil { kinds.insert(.willFinish) }
            if didFinish != nil { kinds.insert(.didFinish) }
            observedEvents = kinds
        }
    }

    private let closures: Closures

    /// The events for which a closure was given.
    public var observedEvents: ProcedureEventKinds { closures.observedEvents }

    /// Creates an observer from the closures given. Each runs as the event of the same name of
    /// ``OperationObserver``.
    ///
    /// - Parameters:
    ///   - didAttach: Called with the procedure once the observer was added.
    ///   - willExecute: Called with the procedure just before its work starts.
    ///   - didExecute: Called with the procedure once its `execute()` returned.
    ///   - didCancel: Called with the procedure and the cancel's error, if any.
    ///   - didProduce: Called with the procedure and the operation it produced.
    ///   - willFinish: Called with the procedure and its errors while it finishes.
    ///   - didFinish: Called with the procedure and its errors once it has finished.
    ///   - willAdd: Called with the procedure and an operation it is about to add (produced, or a
    ///     group's child).
    ///   - didAdd: Called with the procedure and an operation it added.
    public init(
        didAttach: (@Sendable (ProcedureOperation) -> Void)? = nil,
        willExecute: (@Sendable (ProcedureOperation) -> Void)? = nil,
        didExecute: (@Sendable (ProcedureOperation) -> Void)? = nil,
        didCancel: (@Sendable (ProcedureOperation, (any Error)?) -> Void)? = nil,
        didProduce: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)? = nil,
        willFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)? = nil,
        didFinish: (@Sendable (ProcedureOperation, [any Error]) -> Void)? = nil,
        willAdd: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)? = nil,
        didAdd: (@Sendable (ProcedureOperation, ConcurrentOperation) -> Void)? = nil
    ) {
        closures = Closures(
            didAttach: didAttach, willExecute: willExecute, didExecute: didExecute, didCancel: didCancel,
            didProduce: didProduce, willAdd: willAdd, didAdd: didAdd, willFinish: willFinish, didFinish: didFinish)
    }

    /// Calls the `didAttach` closure, if any.
    ///
    /// - Parameter procedure: The procedure observed.
    public func didAttach(to procedure: ProcedureOperation) { closures.onDidAttach?(procedure) }

    /// Calls the `willExecute` closure, if any.
    ///
    /// - Parameter procedure: The procedure observed.
    public func willExecute(_ procedure: ProcedureOperation) { closures.onWillExecute?(procedure) }

    /// Calls the `didExecute` closure, if any.
    ///
    /// - Parameter procedure: The procedure observed.
    public func didExecute(_ procedure: ProcedureOperation) { closures.onDidExecute?(procedure) }

    /// Calls the `didCancel` closure, if any.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - error: The cancel's error, or `nil`.
    public func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) { closures.onDidCancel?(procedure, error) }

    /// Calls the `didProduce` closure, if any.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation it produced.
    public func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        closures.onDidProduce?(procedure, operation)
    }

    /// Calls the `willAdd` closure, if any.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation about to be added.
    public func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation) {
        closures.onWillAdd?(procedure, operation)
    }

    /// Calls the `didAdd` closure, if any.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation added.
    public func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation) {
        closures.onDidAdd?(procedure, operation)
    }

    /// Calls the `willFinish` closure, if any.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { closures.onWillFinish?(procedure, errors) }

    /// Calls the `didFinish` closure, if any.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) { closures.onDidFinish?(procedure, errors) }
}

/// Ends a procedure that has not finished within `timeout` of starting to execute (the time its
/// will-execute event is delivered), or by a `deadline`: by default it is cancelled with an
/// ``OperationError/Code-swift.struct/timedOut`` error and finished with that error.
///
/// What happens on expiry is the observer's ``Action``:
///
/// - ``Action/cancelAndFinish`` (the default): the procedure is cancelled with the `timedOut`
///   error — it is told (its did-cancel hook and observers, on a thread of the global dispatch
///   queue) — and then finished on that thread, unless it finished meanwhile (from its did-cancel
///   hook, say). Its ``ProcedureOperation/errors`` are then `[timedOut]`, and a later finish from
///   its work is ignored, as every later finish is (recorded in
///   ``ProcedureOperation/diagnostics``). Callback work whose callback never comes — a lost
///   network reply — ends at the timeout.
/// - ``Action/cancelOnly``: the procedure is only cancelled with the `timedOut` error and
///   finishes itself — or at once, if ``ProcedureOperation/finishesWhenCancelled`` is set. Work
///   that never finishes then never ends.
///
/// With ``Action/cancelAndFinish``, a procedure cancelled before the timeout expired (by
/// ``ProcedureOperation/cancel()`` or its group) that is still executing on expiry is finished
/// then with the `timedOut` error: a cancel does not keep a lost reply from ending. Nothing
/// happens if the procedure finished first, if it never executes, or — with
/// ``Action/cancelOnly`` — if it was cancelled first. The timer holds the procedure weakly.
///
/// The timer is one of `clock`'s if given, else of the clock of the queue the procedure runs in
/// (``ConcurrentOperationQueue/clock``; real time by default), so a test with a virtual clock
/// times out when it moves time past the timeout.
///
/// ```swift
/// try download.addObserver(TimeoutObserver(timeout: .seconds(30)))
/// try upload.addObserver(TimeoutObserver(timeout: .seconds(30), action: .cancelOnly))
/// try report.addObserver(TimeoutObserver(until: .now + .seconds(5)))
/// ```
public struct TimeoutObserver: OperationObserver {
    /// What a ``TimeoutObserver`` does to a procedure still executing when its timeout expires.
    public enum Action: Hashable, Sendable {
        /// Cancel the procedure with the `timedOut` error, then finish it (the default).
        case cancelAndFinish
        /// Only cancel the procedure with the `timedOut` error; it finishes itself.
        case cancelOnly
    }

    /// How long the procedure may execute; positive for an observer made with a timeout, `.zero`
    /// for one made with a ``deadline``.
    public let timeout: Duration
    /// The instant by which the procedure must have finished, for an observer made with
    /// ``init(until:action:clock:)``; `nil` for one made with a timeout.
    public let deadline: ContinuousClock.Instant?
    /// What happens when the timeout expires.
    public let action: Action
    /// The clock of the timer; `nil` for the clock of the procedure's queue (real time outside
    /// a queue).
    public let clock: (any OperationClock)?

    /// Will execute only.
    public var observedEvents: ProcedureEventKinds { .willExecute }

    /// Creates the observer.
    ///
    /// - Parameters:
    ///   - timeout: How long the procedure may execute before it is ended; must be positive.
    ///   - action: What happens when the timeout expires: by default the procedure is cancelled
    ///     with the `timedOut` error and finished.
    ///   - clock: The clock of the timer; `nil` (the default) for the clock of the queue the
    ///     procedure runs in, or real time outside a queue.
    /// - Throws: ``OperationError/Code-swift.struct/invalidTimeout`` if `timeout` is zero or
    ///   negative (a timeout that has already expired is a caller's mistake, not "cancel at once"
    ///   and not "no timeout").
    public init(timeout: Duration, action: Action = .cancelAndFinish, clock: (any OperationClock)? = nil) throws(OperationError) {
        guard timeout > .zero else {
            throw OperationError(.invalidTimeout, operations: [], "a TimeoutObserver's timeout must be positive, not \(timeout)")
        }
        self.timeout = timeout
        self.deadline = nil
        self.action = action
        self.clock = clock
    }

    /// Creates an observer that ends the procedure if it still executes at `deadline`.
    ///
    /// A deadline already passed when the procedure is about to execute times it out at once,
    /// on the thread that executes it (its work then does not run).
    ///
    /// - Parameters:
    ///   - deadline: The instant, on `clock`, by which the procedure must have finished.
    ///   - action: What happens at the deadline: by default the procedure is cancelled with the
    ///     `timedOut` error and finished.
    ///   - clock: The clock of the timer; `nil` (the default) for the clock of the queue the
    ///     procedure runs in, or real time outside a queue.
    public init(until deadline: ContinuousClock.Instant, action: Action = .cancelAndFinish, clock: (any OperationClock)? = nil) {
        self.timeout = .zero
        self.deadline = deadline
        self.action = action
        self.clock = clock
    }

    /// Starts the timer (or, past a deadline, times the procedure out now).
    ///
    /// - Parameter procedure: The procedure about to execute.
    public func willExecute(_ procedure: ProcedureOperation) {
        let (timeout, deadline, finishing) = (self.timeout, self.deadline, action == .cancelAndFinish)
        let clock = self.clock ?? procedure.lock.withLock({ procedure.queue })?.clock ?? SystemOperationClock()
        let now = clock.now
        let expiry = deadline ?? now.advanced(by: timeout)
        if deadline != nil && expiry <= now {
            procedure.timedOut(after: nil, finishing: finishing)
            return
        }
        clock.schedule(at: expiry) { [weak procedure] in
            guard let procedure, !procedure.isFinished else { return }
            procedure.timedOut(after: deadline == nil ? timeout : nil, finishing: finishing)
        }
    }
}

extension ProcedureOperation {
    /// A ``TimeoutObserver``'s timer expired: cancel with `timedOut` (unless a cancel came first)
    /// and, if `finishing`, finish if it still executes — with the `timedOut` error, which the
    /// cancel put in its `errors` or, cancelled earlier, the finish does. `timeout` is `nil` for
    /// a deadline.
    func timedOut(after timeout: Duration?, finishing: Bool) {
        let error = OperationError(
            .timedOut, operations: [displayName], timeout.map { "did not finish within \($0)" } ?? "did not finish by its deadline")
        let cancelledNow = cancelCounting(with: error)
        guard finishing else { return }
        // Still executing after its did-cancel hook and observers (which may have finished it):
        // finish it now.
        guard lock.withLock({ procedureLifecycle.state == .executing }) else { return }
        if cancelledNow { finish() } else { _ = finish(with: error) }
    }
}
