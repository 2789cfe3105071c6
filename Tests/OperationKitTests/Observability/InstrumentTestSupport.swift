// Test support for instruments: an error to tell apart. The instrument that records every
// event is the test kit's `RecordingInstrument` (OperationKitTestSupport).

import OperationKit

struct InstrumentTestError: Error, Equatable, CustomStringConvertible {
    let code: Int
    init(_ code: Int) { self.code = code }
    var description: String { "InstrumentTestError(\(code))" }
}
