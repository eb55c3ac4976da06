#!/usr/bin/env bash
# cfdp's connection table beside DPDK's rte_hash on the same keys and the
# same occupancy, rounds alternating in one run: a table filled with
# established connections to 85 % of 2^20 slots (quick: 2^18), a burst of
# new connections to 95 % timed one insert at a time, then lookups of the
# established connections (one at a time and 32 at a time, in a scattered
# order) and of 200,000 strangers. rte_hash runs in its lock-free
# read/write concurrency mode (RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF) with
# rte_hash_crc, its fastest hash here, on the canonical 38-byte connection
# keys cfdp writes for it (bench/conntrack-rte-hash/harness.c, cfdp's own
# small C harness, built here with cc against the system DPDK).
#
# Writes bench/results/conntrack_rte_hash.csv (quick: results/quick/);
# its first line names the run (date, commit, machine). Installs the
# Debian DPDK packages and a C compiler when missing.
#
#   bash bench/conntrack-rte-hash.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
quick=()
if [ "${1:-}" = "--quick" ]; then
    quick=(--quick)
fi
if ! pkg-config --exists libdpdk 2>/dev/null || ! command -v cc >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q dpdk dpdk-dev libdpdk-dev pkg-config gcc
fi
mkdir -p target
harness=target/conntrack-rte-hash
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -O3 -march=native -Wall -Wextra $(pkg-config --cflags libdpdk) \
    bench/conntrack-rte-hash/harness.c -o "$harness" $(pkg-config --libs libdpdk)
cargo build --release -q -p cfdp-bench --bin conntrack
./target/release/conntrack "${quick[@]}" --rte-hash "$harness"
