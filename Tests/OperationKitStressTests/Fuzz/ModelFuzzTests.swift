// The model-based fuzz test of issue 13: seeded random scenarios of operations, procedures,
// groups, conditions, exclusivity, timeouts, barriers, cancels, suspension and batch adds, run on
// real queues and checked against what the model says must hold. See "Model-based fuzz test" in
// Documentation/Architecture.md.
//
// The parts: FuzzScenario.swift (the seeded random scenarios), FuzzRun.swift (running one on
// real queues and checking it) and this file (the test).
import Dispatch
import Foundation
import OperationKit
import OperationKitTestSupport
import Testing

extension StressTests {
    @Suite("Model-based fuzz")
    struct ModelFuzz {
        /// The short run, part of `swift test`; `FUZZ_SEED=n` runs that seed alone, and
        /// `FUZZ_SECONDS=s` runs seeds from 1 until `s` seconds have passed.
        @Test("random scenarios: everything ends exactly once, in order, within the limits")
        func fuzz() {
            let environment = ProcessInfo.processInfo.environment
            var seeds: [UInt64] = Array(1...250)
            var deadline: ContinuousClock.Instant?
            if let raw = environment["FUZZ_SEED"], let seed = UInt64(raw) {
                seeds = [seed]
            } else if let raw = environment["FUZZ_SECONDS"], let seconds = Double(raw) {
                deadline = .now + .milliseconds(Int(seconds * 1000))
                seeds = []
            }
            var ran = 0
            var operations = 0
            var failures: [UInt64] = []
            let verbose = environment["FUZZ_VERBOSE"] != nil
            func runOne(_ seed: UInt64) {
                if verbose { print("fuzz: seed \(seed)") }
                let scenario = FuzzScenario(seed: seed)
                let violations = FuzzRun(scenario).run()
                ran += 1
                operations += scenario.operationCount
                if !violations.isEmpty {
                    failures.append(seed)
                    let listed = violations.joined(separator: "\n  ")
                    Issue.record("fuzz seed \(seed) (FUZZ_SEED=\(seed) reproduces the scenario):\n\(scenario)\nviolations:\n  \(listed)")
                }
            }
            if let deadline {
                var seed: UInt64 = 1
                while ContinuousClock.now < deadline && failures.count < 5 {
                    runOne(seed)
                    seed += 1
                }
            } else {
                for seed in seeds where failures.count < 5 { runOne(seed) }
            }
            print("fuzz: \(ran) seeds, \(operations) operations, \(failures.count) failures\(failures.isEmpty ? "" : " (seeds \(failures))")")
            #expect(ran > 0)
        }
    }
}
