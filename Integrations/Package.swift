// swift-tools-version:6.0
//
// Adapters from OperationKit's instrument protocol to swift-log, swift-metrics and
// swift-distributed-tracing. A package of its own, so the library itself keeps no dependencies.
// Test with: swift test --package-path Integrations

import PackageDescription

let package = Package(
    name: "OperationKitIntegrations",
    // As the library: Synchronization's Atomic and Mutex need these on Apple systems.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "OperationKitLogging", targets: ["OperationKitLogging"]),
        .library(name: "OperationKitMetrics", targets: ["OperationKitMetrics"]),
        .library(name: "OperationKitTracing", targets: ["OperationKitTracing"]),
    ],
    dependencies: [
        .package(name: "OperationKit", path: ".."),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        // Its Tracing product re-exports ServiceContextModule (ServiceContext), so swift-service-context
        // is not needed as a dependency of its own.
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        .target(
            name: "OperationKitLogging",
            dependencies: [
                "IntegrationSupport",
                .product(name: "OperationKit", package: "OperationKit"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .target(
            name: "OperationKitMetrics",
            dependencies: [
                "IntegrationSupport",
                .product(name: "OperationKit", package: "OperationKit"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .target(
            name: "OperationKitTracing",
            dependencies: [
                "IntegrationSupport",
                .product(name: "OperationKit", package: "OperationKit"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        // The adapters' lock (package access only; not a product).
        .target(name: "IntegrationSupport"),
        .testTarget(
            name: "OperationKitIntegrationsTests",
            dependencies: [
                "OperationKitLogging",
                "OperationKitMetrics",
                "OperationKitTracing",
                .product(name: "OperationKitTestSupport", package: "OperationKit"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
