import OperationKit
import OperationKitTestSupport
import Testing

/// Issue 14: errors and operations read well when printed.
@Suite("Descriptions of operations and errors", .offThePool)
struct DescriptionTests {
    struct DiskFull: Error, CustomStringConvertible {
        var description: String { "Disk full" }
    }

    @Test("an unnamed operation prints as its type and a short id, the same every time")
    func unnamedOperation() throws {
        let operation = ClosureOperation {}
        let name = operation.displayName
        let parts = name.split(separator: "#")
        #expect(parts.count == 2 && parts[0] == "ClosureOperation", "\(name)")
        let id = try #require(parts.last)
        #expect(id.count == 6 && id.allSatisfy(\.isHexDigit), "\(name)")
        #expect(operation.displayName == name && "\(operation)" == name)
        // Two operations alive together do not share it (short of a clash in six digits, which
        // two adjacent allocations cannot have).
        let other = ClosureOperation {}
        #expect(other.displayName != name)
        #expect(ClosureOperation(name: "named") {}.displayName == "named")
    }

    @Test("an error's description shows its underlying errors")
    func underlyingErrors() {
        let error = OperationError(
            .dependenciesFailed, operations: ["upload"], "a dependency failed",
            underlying: [DiskFull(), OperationError(.timedOut, operations: ["resize"], "too slow")])
        #expect("\(error)" == "OperationError.dependenciesFailed [upload]: a dependency failed (underlying: Disk full; OperationError.timedOut [resize]: too slow)")
        #expect("\(OperationError(.cancelled, "gone"))" == "OperationError.cancelled: gone")
    }
}
