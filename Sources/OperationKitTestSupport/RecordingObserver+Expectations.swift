// The checks of a RecordingObserver: order of events, exactly-once and never, and the
// lifecycle rules every procedure's events follow. Each records a Swift Testing issue.
import OperationKit
import Testing

extension RecordingObserver {
    private func recorded(of procedure: ProcedureOperation?) -> [Event] {
        procedure.map { events(of: $0) } ?? events
    }

    private func fail(_ problem: String, of procedure: ProcedureOperation?, _ location: SourceLocation) -> Bool {
        let subject = procedure.map { "\($0.displayName): " } ?? ""
        Issue.record(Comment(rawValue: subject + problem), sourceLocation: location)
        return false
    }

    /// Records an issue unless the events of the kinds in `order` are exactly `order`: those
    /// kinds came in that order, each as many times as it is listed. Events of other kinds are
    /// not looked at, so `[.willExecute, .didFinish]` passes for a procedure that executed and
    /// finished, whatever else it was told.
    ///
    /// - Parameters:
    ///   - order: The kinds, in the order expected.
    ///   - procedure: The procedure whose events to check; every event recorded by default.
    ///   - sourceLocation: Where the issue is reported; the caller's line by default.
    /// - Returns: `true` if the order held.
    @discardableResult
    public func expectOrder(
        _ order: [Kind], of procedure: ProcedureOperation? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        let listed = Set(order)
        let seen = recorded(of: procedure).map(\.kind).filter(listed.contains)
        guard seen != order else { return true }
        return fail("expected the events \(order) in this order, got \(seen)", of: procedure, sourceLocation)
    }

    /// Records an issue for each kind in `kinds` that was not told exactly once.
    ///
    /// - Parameters:
    ///   - kinds: The kinds that must come once each.
    ///   - procedure: The procedure whose events to check; every event recorded by default.
    ///   - sourceLocation: Where the issue is reported; the caller's line by default.
    /// - Returns: `true` if each came exactly once.
    @discardableResult
    public func expectExactlyOnce(
        _ kinds: Kind..., of procedure: ProcedureOperation? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        let seen = recorded(of: procedure).map(\.kind)
        var passed = true
        for kind in kinds {
            let count = seen.count(where: { $0 == kind })
            if count != 1 { passed = fail("\(kind) was told \(count) times, expected once", of: procedure, sourceLocation) }
        }
        return passed
    }

    /// Records an issue for each kind in `kinds` that was told at all.
    ///
    /// - Parameters:
    ///   - kinds: The kinds that must not come.
    ///   - procedure: The procedure whose events to check; every event recorded by default.
    ///   - sourceLocation: Where the issue is reported; the caller's line by default.
    /// - Returns: `true` if none came.
    @discardableResult
    public func expectNever(
        _ kinds: Kind..., of procedure: ProcedureOperation? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        let seen = recorded(of: procedure).map(\.kind)
        var passed = true
        for kind in kinds {
            let count = seen.count(where: { $0 == kind })
            if count != 0 { passed = fail("\(kind) was told \(count) times, expected never", of: procedure, sourceLocation) }
        }
        return passed
    }

    /// Records an issue for each time an event arrived while another event of the same procedure
    /// was still being told to this observer (see ``RecordingObserver/overlaps``).
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose events to check; every event recorded by default.
    ///   - sourceLocation: Where the issue is reported; the caller's line by default.
    /// - Returns: `true` if no two events of one procedure overlapped.
    @discardableResult
    public func expectNoOverlaps(
        of procedure: ProcedureOperation? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        let found = procedure.map { overlaps(of: $0) } ?? overlaps
        for overlap in found { _ = fail("\(overlap)", of: procedure, sourceLocation) }
        return found.isEmpty
    }

    /// What breaks the rules every procedure's events follow, in the events of `procedure`:
    /// did attach at most once and first; will execute, did execute and did cancel at most once;
    /// did execute only after will execute; will finish and did finish exactly once, did finish
    /// last and after will finish; each did add after a will add of the same operation (by
    /// name); no event told while another was being told (``RecordingObserver/overlaps``).
    /// (Call it once the procedure has finished.)
    ///
    /// - Parameter procedure: The procedure whose events to check.
    /// - Returns: One line per rule broken; empty if the events follow the rules.
    public func lifecycleViolations(of procedure: ProcedureOperation) -> [String] {
        let kinds = self.kinds(of: procedure)
        func count(_ kind: Kind) -> Int { kinds.count(where: { $0 == kind }) }
        var problems: [String] = []
        for kind in [Kind.didAttach, .willExecute, .didExecute, .didCancel] where count(kind) > 1 {
            problems.append("\(kind) told \(count(kind)) times")
        }
        for kind in [Kind.willFinish, .didFinish] where count(kind) != 1 {
            problems.append("\(kind) told \(count(kind)) times, expected once")
        }
        if let attach = kinds.firstIndex(of: .didAttach), attach != 0 { problems.append("didAttach is not first") }
        if kinds.last != .didFinish { problems.append("didFinish is not last") }
        if let will = kinds.firstIndex(of: .willFinish), let did = kinds.firstIndex(of: .didFinish), did < will {
            problems.append("didFinish before willFinish")
        }
        if let did = kinds.firstIndex(of: .didExecute), (kinds.firstIndex(of: .willExecute) ?? .max) > did {
            problems.append("didExecute without willExecute before it")
        }
        var willAdds: [String: Int] = [:]
        for event in events(of: procedure) {
            guard let name = event.producedName else { continue }
            if event.kind == .willAdd { willAdds[name, default: 0] += 1 }
            if event.kind == .didAdd {
                if willAdds[name, default: 0] == 0 { problems.append("didAdd of \(name) without willAdd before it") }
                willAdds[name, default: 0] -= 1
            }
        }
        problems += overlaps(of: procedure).map { "\($0)" }
        return problems.map { "\($0) (events: \(kinds))" }
    }

    /// Records an issue for each rule of ``lifecycleViolations(of:)`` that the events of
    /// `procedure` break.
    ///
    /// - Parameters:
    ///   - procedure: The procedure whose events to check, once it has finished.
    ///   - sourceLocation: Where the issue is reported; the caller's line by default.
    /// - Returns: `true` if the events follow the rules.
    @discardableResult
    public func expectValidLifecycle(
        of procedure: ProcedureOperation, sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        let problems = lifecycleViolations(of: procedure)
        for problem in problems { _ = fail(problem, of: procedure, sourceLocation) }
        return problems.isEmpty
    }
}
