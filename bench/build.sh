#!/usr/bin/env bash
# Builds, in release, what every bench script runs: the `cfdp` binary, the
# testkit's tools and the bench binaries, as one package set.
#
#   bash bench/build.sh           # without DPDK
#   bash bench/build.sh --dpdk    # cfdp with its DPDK backend (system DPDK)
#
# Why one set for all of them: Cargo unifies dependencies' features per
# invocation, so `-p cfdp-bench` (whose peers turn on features of shared
# dependencies) and `-p cfdp -p cfdp-testkit` compile most of the
# workspace twice, and each later build of the other set compiles it again
# into new artifacts. With one set, every script after the first finds its
# binaries built (the DPDK variant differs only in the crates above
# cfdp-dpdk-sys).
set -euo pipefail
cd "$(dirname "$0")/.."
features=()
case "${1:-}" in
    "") ;;
    --dpdk) features=(--features cfdp/dpdk) ;;
    *) echo "usage: bench/build.sh [--dpdk]" >&2; exit 2 ;;
esac
cargo build --release -q -p cfdp -p cfdp-testkit -p cfdp-bench "${features[@]}"
