// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "OperationKit",
    // Synchronization's Atomic and Mutex need these on Apple systems; elsewhere, a Swift 6 toolchain.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "OperationKit", targets: ["OperationKit"]),
        .library(name: "OperationKitTestSupport", targets: ["OperationKitTestSupport"]),
    ],
    targets: [
        // The futex system calls of the library's lock (Swift cannot call the variadic `syscall`).
        .target(name: "COperationKit"),
        .target(
            name: "OperationKit",
            dependencies: ["COperationKit"],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .executableTarget(
            name: "Quickstart",
            dependencies: ["OperationKit"],
            path: "Examples/Quickstart"
        ),
        .executableTarget(
            name: "WrapProcess",
            dependencies: ["OperationKit"],
            path: "Examples/WrapProcess"
        ),
        .executableTarget(
            name: "Connection",
            dependencies: ["OperationKit"],
            path: "Examples/Connection"
        ),
        .executableTarget(
            name: "Workflows",
            dependencies: ["OperationKit"],
            path: "Examples/Workflows"
        ),
        .executableTarget(
            name: "pmake",
            dependencies: ["OperationKit"],
            path: "Examples/pmake",
            exclude: ["sample.pmake"]
        ),
        .target(
            name: "OperationKitTestSupport",
            dependencies: ["OperationKit"]
        ),
        .testTarget(
            name: "OperationKitTests",
            dependencies: ["OperationKit", "OperationKitTestSupport"]
        ),
        .testTarget(
            name: "OperationKitStressTests",
            dependencies: ["OperationKit", "OperationKitTestSupport"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
