// An observer that records every event of the procedures it watches (kind, procedure name,
// state, errors, thread) and checks their order as Swift Testing expectations.
import Foundation
import OperationKit
import Testing

/// An `OperationObserver` that records every event it is told, in the order told,
/// and checks them: order, exactly-once delivery, lifecycle rules.
///
/// ```swift
/// let observer = RecordingObserver()
/// try procedure.addObserver(observer)
/// try queue.addOperation(procedure)
/// try await procedure.finished(within: .seconds(5))
/// observer.expectOrder([.willExecute, .didExecute, .willFinish, .didFinish])
/// observer.expectExactlyOnce(.willFinish, .didFinish)
/// ```
///
/// One observer may watch several procedures: each event carries its procedure's name and
/// identity, and every check takes an optional `of:` procedure to look at one of them. Its
/// events are complete once the procedure's wait has returned (did finish is delivered before
/// any wait for the procedure returns).
///
/// It also notes when two events of one procedure are told at the same time — one arriving
/// while another is still being told, on another thread or nested inside it — which a
/// procedure never does (``overlaps``, ``expectNoOverlaps(of:sourceLocation:)``, and a rule of
/// ``expectValidLifecycle(of:sourceLocation:)``). A callback given as `onEvent` runs inside each event: it can
/// act from there (cancel, produce, finish) or hold the event open to widen the window.
public final class RecordingObserver: OperationObserver {
    /// The kinds of event an `OperationObserver` is told.
    public enum Kind: String, Hashable, Sendable, CaseIterable, CustomStringConvertible {
        /// `OperationObserver.didAttach(to:)`.
        case didAttach
        /// `OperationObserver.willExecute(_:)`.
        case willExecute
        /// `OperationObserver.didExecute(_:)`.
        case didExecute
        /// `OperationObserver.didCancel(_:with:)`.
        case didCancel
        /// `OperationObserver.procedure(_:didProduce:)`.
        case didProduce
        /// `OperationObserver.procedure(_:willAdd:)`: a produced operation or a group's child
        /// is about to be added.
        case willAdd
        /// `OperationObserver.procedure(_:didAdd:)`: it was added.
        case didAdd
        /// `OperationObserver.willFinish(_:with:)`.
        case willFinish
        /// `OperationObserver.didFinish(_:with:)`.
        case didFinish

        /// The case's name.
        public var description: String { rawValue }
    }

    /// One event, as it was told.
    public struct Event: Sendable, CustomStringConvertible {
        /// What happened.
        public let kind: Kind
        /// The procedure's `ConcurrentOperation.displayName`.
        public let procedureName: String
        /// The procedure's identity, to tell apart procedures of the same name.
        public let procedure: ObjectIdentifier
        /// The procedure's state while the event was delivered.
        public let state: ProcedureState
        /// For did cancel, the cancel's error (if any); for will finish and did finish, every
        /// error the procedure collected; otherwise empty.
        public let errors: [any Error]
        /// For did produce, will add and did add, the operation's name; otherwise `nil`.
        public let producedName: String?
        /// The thread that delivered the event.
        public let thread: ThreadID
        /// The event's place among those this observer recorded, from 0.
        public let sequence: Int

        /// `kind(procedureName)`, and the operation's name for did produce, will add and did add.
        public var description: String {
            if let producedName { return "\(kind)(\(procedureName), \(producedName))" }
            return "\(kind)(\(procedureName))"
        }
    }

    /// Two events of one procedure told at the same time: `event` arrived while `during` was
    /// still being told.
    public struct Overlap: Sendable, CustomStringConvertible {
        /// The event that arrived.
        public let event: Event
        /// An event of the same procedure still being told when it arrived.
        public let during: Event

        /// `event told during other`, with the threads.
        public var description: String {
            "\(event) (\(event.thread)) told during \(during) (\(during.thread))"
        }
    }

    /// A thread's identity, to check which events were delivered on the same thread.
    public struct ThreadID: Hashable, Sendable, CustomStringConvertible {
        private let raw: UInt64

        /// The calling thread.
        public static var current: ThreadID {
            #if canImport(Darwin)
            var id: UInt64 = 0
            pthread_threadid_np(nil, &id)
            return ThreadID(raw: id)
            #elseif canImport(Glibc)
            return ThreadID(raw: UInt64(pthread_self()))
            #else
            return ThreadID(raw: UInt64(UInt(bitPattern: ObjectIdentifier(Thread.current).hashValue)))
            #endif
        }

        /// The identity as a hexadecimal number.
        public var description: String { "thread 0x" + String(raw, radix: 16) }
    }

    private struct Record {
        var events: [Event] = []
        /// The events being told, by procedure.
        var telling: [ObjectIdentifier: [Event]] = [:]
        var overlaps: [Overlap] = []
    }

    private let recorded = Locked(Record())
    private let finishes: Latch
    private let onEvent: (@Sendable (Event) -> Void)?

    /// Creates an observer with nothing recorded.
    ///
    /// - Parameters:
    ///   - expectedFinishes: How many did-finish events ``finished(within:)`` waits for
    ///     (one per procedure the observer is added to).
    ///   - onEvent: Called inside each event once it is recorded, on the thread telling it,
    ///     before the observer returns (so before the procedure goes on); `nil` by default.
    public init(expectedFinishes: Int = 1, onEvent: (@Sendable (Event) -> Void)? = nil) {
        finishes = Latch(count: expectedFinishes)
        self.onEvent = onEvent
    }

    /// Every event, in the order told.
    public var events: [Event] { recorded.withLock { $0.events } }

    /// Every time an event of a procedure arrived while another of the same procedure was still
    /// being told to this observer, in the order they arrived. Empty for a procedure that keeps
    /// its promise of one event at a time. (An event is "being told" from the moment the
    /// observer is called until it returns, `onEvent` included.)
    public var overlaps: [Overlap] { recorded.withLock { $0.overlaps } }

    /// The overlaps of `procedure`'s events (see ``overlaps``).
    ///
    /// - Parameter procedure: One of the procedures observed.
    /// - Returns: Its overlaps.
    public func overlaps(of procedure: ProcedureOperation) -> [Overlap] {
        overlaps.filter { $0.event.procedure == ObjectIdentifier(procedure) }
    }

    /// The kinds of every event, in the order told.
    public var kinds: [Kind] { events.map(\.kind) }

    /// The events of `procedure`, in the order told.
    ///
    /// - Parameter procedure: One of the procedures observed.
    /// - Returns: Its events.
    public func events(of procedure: ProcedureOperation) -> [Event] {
        events.filter { $0.procedure == ObjectIdentifier(procedure) }
    }

    /// The kinds of the events of `procedure`, in the order told.
    ///
    /// - Parameter procedure: One of the procedures observed.
    /// - Returns: The kinds of its events.
    public func kinds(of procedure: ProcedureOperation) -> [Kind] { events(of: procedure).map(\.kind) }

    /// Suspends the calling task until as many did-finish events as given at init were
    /// recorded, or `timeout` passes (without blocking a pool thread).
    ///
    /// - Parameter timeout: The longest wait.
    /// - Returns: `true` if they were recorded in time.
    public func finished(within timeout: Duration = .seconds(30)) async -> Bool {
        await finishes.opened(within: timeout)
    }

    // MARK: Observing

    private func note(
        _ kind: Kind, _ procedure: ProcedureOperation, errors: [any Error] = [], produced: String? = nil
    ) {
        let name = procedure.displayName
        let state = procedure.state
        let key = ObjectIdentifier(procedure)
        let event = recorded.withLock { record -> Event in
            let event = Event(
                kind: kind, procedureName: name, procedure: key, state: state, errors: errors,
                producedName: produced, thread: .current, sequence: record.events.count)
            record.events.append(event)
            if let during = record.telling[key]?.last { record.overlaps.append(Overlap(event: event, during: during)) }
            record.telling[key, default: []].append(event)
            return event
        }
        onEvent?(event)
        recorded.withLock { record in
            record.telling[key]?.removeAll { $0.sequence == event.sequence }
            if record.telling[key]?.isEmpty == true { record.telling[key] = nil }
        }
        if kind == .didFinish { finishes.countDown() }
    }

    /// Records did attach.
    ///
    /// - Parameter procedure: The procedure observed.
    public func didAttach(to procedure: ProcedureOperation) { note(.didAttach, procedure) }

    /// Records will execute.
    ///
    /// - Parameter procedure: The procedure observed.
    public func willExecute(_ procedure: ProcedureOperation) { note(.willExecute, procedure) }

    /// Records did execute.
    ///
    /// - Parameter procedure: The procedure observed.
    public func didExecute(_ procedure: ProcedureOperation) { note(.didExecute, procedure) }

    /// Records did cancel, with its error.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - error: The cancel's error, or `nil`.
    public func didCancel(_ procedure: ProcedureOperation, with error: (any Error)?) {
        note(.didCancel, procedure, errors: error.map { [$0] } ?? [])
    }

    /// Records did produce, with the produced operation's name.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation it produced.
    public func procedure(_ procedure: ProcedureOperation, didProduce operation: ConcurrentOperation) {
        note(.didProduce, procedure, produced: operation.displayName)
    }

    /// Records will add, with the operation's name.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation about to be added.
    public func procedure(_ procedure: ProcedureOperation, willAdd operation: ConcurrentOperation) {
        note(.willAdd, procedure, produced: operation.displayName)
    }

    /// Records did add, with the operation's name.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - operation: The operation added.
    public func procedure(_ procedure: ProcedureOperation, didAdd operation: ConcurrentOperation) {
        note(.didAdd, procedure, produced: operation.displayName)
    }

    /// Records will finish, with the errors.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func willFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        note(.willFinish, procedure, errors: errors)
    }

    /// Records did finish, with the errors.
    ///
    /// - Parameters:
    ///   - procedure: The procedure observed.
    ///   - errors: Every error the procedure collected.
    public func didFinish(_ procedure: ProcedureOperation, with errors: [any Error]) {
        note(.didFinish, procedure, errors: errors)
    }
}
