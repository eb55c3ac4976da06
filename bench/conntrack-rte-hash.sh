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
# small C harness, built here with cc against the system DPDK), and on 2 MB
# huge pages as DPDK runs in production: as root the script reserves 256
# of them (512 MB) for the run and gives them back after; where it cannot,
# rte_hash runs on 4 KB pages (--no-huge) and the CSV's `pages` column
# says so. cfdp's table asks the kernel for transparent huge pages for its
# slots and filter (madvise); the column says whether it got them.
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
bash bench/build.sh

# Huge pages for rte_hash (it needs ~70 MB at 2^20 slots).
unset HARNESS_HUGEPAGES
# shellcheck source=bench/hugepages.sh
source bench/hugepages.sh
if hugepages_reserve 256 64; then
    export HARNESS_HUGEPAGES=1
fi
[ -n "${HARNESS_HUGEPAGES:-}" ] || echo "no huge pages to reserve: rte_hash runs on 4 KB pages"
./target/release/conntrack "${quick[@]}" --rte-hash "$harness"
