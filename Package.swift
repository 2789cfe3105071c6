// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "OperationKit",
    products: [
        .library(name: "OperationKit", targets: ["OperationKit"]),
    ],
    targets: [
        .target(
            name: "OperationKit",
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
        .testTarget(
            name: "OperationKitTests",
            dependencies: ["OperationKit"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
