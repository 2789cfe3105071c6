// A queue delegate that records every will-add, did-add, will-finish and did-finish it is
// told, with the operation's name and state at that moment.
import OperationKit

/// A `ConcurrentOperationQueueDelegate` that records every call, in the order
/// told, as `"event name state"` — for example `"didAdd upload pending"` — where the state is a
/// procedure's `ProcedureState`, or for a plain operation `finished` or `-`.
///
/// ```swift
/// let delegate = RecordingQueueDelegate()
/// queue.delegate = delegate
/// try queue.addOperation(upload)
/// #expect(await delegate.didFinishAll.opened(within: .seconds(5)))
/// #expect(delegate.events(of: "upload") == ["willAdd initialized", "didAdd pending", "willFinish finishing", "didFinish finished"])
/// ```
public final class RecordingQueueDelegate: ConcurrentOperationQueueDelegate {
    private struct Entry: Sendable {
        let event: String
        let name: String
        let state: String
    }

    private let recorded = Locked<[Entry]>([])
    /// Opens after as many did-finish calls as given at init.
    public let didFinishAll: Latch

    /// Creates a delegate with nothing recorded.
    ///
    /// - Parameter expectedFinishes: How many did-finish calls open ``didFinishAll``.
    public init(expectedFinishes: Int = 1) {
        didFinishAll = Latch(count: expectedFinishes)
    }

    private func note(_ event: String, _ operation: ConcurrentOperation) {
        let state = (operation as? ProcedureOperation).map { "\($0.state)" } ?? (operation.isFinished ? "finished" : "-")
        let entry = Entry(event: event, name: operation.displayName, state: state)
        recorded.withLock { $0.append(entry) }
    }

    /// Records will-add.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation being added.
    public func operationQueue(_ queue: ConcurrentOperationQueue, willAdd operation: ConcurrentOperation) {
        note("willAdd", operation)
    }

    /// Records did-add.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation added.
    public func operationQueue(_ queue: ConcurrentOperationQueue, didAdd operation: ConcurrentOperation) {
        note("didAdd", operation)
    }

    /// Records will-finish.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The procedure finishing.
    public func operationQueue(_ queue: ConcurrentOperationQueue, willFinish operation: ConcurrentOperation) {
        note("willFinish", operation)
    }

    /// Records did-finish and counts ``didFinishAll`` down.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - operation: The operation that finished.
    public func operationQueue(_ queue: ConcurrentOperationQueue, didFinish operation: ConcurrentOperation) {
        note("didFinish", operation)
        didFinishAll.countDown()
    }

    /// Every call, in the order told, as `"event name state"`.
    public var events: [String] { recorded.withLock { $0 }.map { "\($0.event) \($0.name) \($0.state)" } }

    /// The calls about the operations named `name`, in the order told, as `"event state"`.
    ///
    /// - Parameter name: An operation's `ConcurrentOperation.displayName`.
    /// - Returns: Its calls.
    public func events(of name: String) -> [String] {
        recorded.withLock { $0 }.filter { $0.name == name }.map { "\($0.event) \($0.state)" }
    }
}
