#!/usr/bin/env bash
# Instructions per operation under callgrind, for the benchmark's scenarios (see InstructionProbe.swift).
#
#   bash Benchmarks/callgrind.sh CONTENDER SCENARIO [COUNT]     e.g. bash Benchmarks/callgrind.sh ok s1 20000
#
# Runs the release benchmark binary under callgrind, with COUNT and 2 x COUNT operations (for s4, layers of
# 100), and prints (instructions(2 x COUNT) - instructions(COUNT)) / COUNT: start-up and one-time costs
# cancel. Build first: swift build -c release --package-path Benchmarks. Set PROBE_BINARY to measure
# another build (another tree's Benchmarks/.build/release/OperationKitBenchmarks).
set -euo pipefail
contender=$1
scenario=$2
count=${3:-20000}
binary=${PROBE_BINARY:-"$(dirname "$0")/.build/release/OperationKitBenchmarks"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Valgrind 3.19 gives up on the DWARF 5 debug information clang writes for the C target
# (COperationKit). The counts need none, so callgrind runs a copy without it.
objcopy --strip-debug "$binary" "$out/probe"
binary="$out/probe"
# The largest of RUNS counts (default 3) at each size: a workflow's or an async operation's last
# objects are freed by a worker thread after the caller's wait returned, and the process may exit
# before or after that teardown; the largest count is the one that includes it, as every count of
# a ClosureOperation run does.
runs=${RUNS:-3}
total() {
    best=0
    for _ in $(seq "$runs"); do
        valgrind --tool=callgrind --callgrind-out-file="$out/$1.out" "$binary" --probe "$contender" "$scenario" "$1" \
            > /dev/null 2> "$out/$1.log" || { cat "$out/$1.log" >&2; exit 1; }
        count=$(grep -m1 -E '^(summary|totals):' "$out/$1.out" | awk '{ print $2 }')
        if [ "$count" -gt "$best" ]; then best=$count; fi
    done
    echo "$best"
}
small=$(total "$count")
large=$(total $((2 * count)))
per=$(( (large - small) / count ))
if [ "$scenario" = s4 ]; then
    echo "$contender $scenario: $per instructions per layer of 100 (10,000 edges), $((per / 10000)) per edge"
else
    echo "$contender $scenario: $per instructions per operation"
fi
