// swift-tools-version:6.0
//
// The benchmark harness lives in its own package so the library itself keeps no dependencies.
// Run it with: swift run -c release --package-path Benchmarks OperationKitBenchmarks [--quick]

import PackageDescription

let package = Package(
    name: "OperationKitBenchmarks",
    // Synchronization's Atomic and Mutex need these on Apple systems; elsewhere, a Swift 6 toolchain.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    dependencies: [
        .package(name: "OperationKit", path: "..")
    ],
    targets: [
        .executableTarget(
            name: "OperationKitBenchmarks",
            dependencies: [
                "CMallocInfo",
                .product(name: "OperationKit", package: "OperationKit"),
            ]
        ),
        // A few lines of C: Swift's Glibc module does not expose <malloc.h> (mallinfo2).
        .target(name: "CMallocInfo"),
    ],
    swiftLanguageModes: [.v6]
)
