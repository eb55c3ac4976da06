#!/usr/bin/env bash
# cfdp beside rte_acl on a 10k-rule set from every ClassBench seed, and on
# 100k-rule sets from the fw1 and ipc1 seeds (LARGE; acl1's is
# ../shared/classbench/acl1_100k, in bench/classbench.sh's race)
# (bench/classbench-seeds/: how they were made is in its README): each set
# is unpacked, given a trace by `classbench --make-trace` (a 100k set: one
# packet in ten of it, ~1 a rule as acl1_100k's trace), and run through
# bench/classbench.sh (verdicts against dpdk-test-acl, IPv4 and IPv6,
# fresh and churned; every rate) without its replay and compile-p99 parts.
# Writes bench/results/classbench_seeds.csv. Installs Debian's dpdk
# package if missing (through classbench.sh).
#
#   bash bench/classbench-seeds.sh [--quick]   (ROUNDS, SEEDS override)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
# Every seed: fw2 and fw4's port ranges on protocol 2 (IGMP) are taken as
# rte_acl takes them (see classbench-seeds/README.md).
SEEDS=${SEEDS:-acl1 acl2 acl3 acl4 acl5 fw1 fw2 fw3 fw4 fw5 ipc1 ipc2}
LARGE=${LARGE-fw1 ipc1}
csv=bench/results/classbench_seeds.csv
if [ "${1:-}" = "--quick" ]; then
    SEEDS=acl2 ROUNDS=1 LARGE=""
    mkdir -p bench/results/quick
    csv=bench/results/quick/classbench_seeds.csv
fi
bash bench/build.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sets=""
for seed in $SEEDS; do
    set_=${seed}_10k
    xz -dc "bench/classbench-seeds/$set_.xz" >"$work/$set_"
    target/release/classbench --rules "$work/$set_" --make-trace "$work/${set_}_trace"
    sets="$sets $set_"
done
for seed in $LARGE; do
    set_=${seed}_100k
    xz -dc "bench/classbench-seeds/$set_.xz" >"$work/$set_"
    target/release/classbench --rules "$work/$set_" --make-trace "$work/all_trace"
    awk 'NR % 10 == 1' "$work/all_trace" >"$work/${set_}_trace"
    sets="$sets $set_"
done
# rte_acl's fw1_100k build takes ~4.9 GB (measured: RSS with --no-huge):
# 3,072 huge pages (6 GB) with a 100k set.
pages=1024
[ -n "$LARGE" ] && pages=3072
CLASSBENCH="$work" SETS="$sets" ROUNDS="$ROUNDS" ITER="${ITER:-10}" CSV="$csv" \
    P99CSV="$work/p99.csv" REPLAY=0 P99=0 HUGE_PAGES="${HUGE_PAGES:-$pages}" bash bench/classbench.sh
