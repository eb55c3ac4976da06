#!/usr/bin/env bash
# Established TCP traffic through one worker before and after Linux's TCP
# window tracking (the conntrack issue's goal: >= 0.9x the rate before):
# the `conntrack` bench's flood part ("established": ACKs of 100k
# established connections, 64-byte frames from memory) built at OLD (the
# commit before window tracking, 04c9501 by default) and at this tree,
# run alternately ROUNDS times; each run is itself the median of 7 rounds.
#
# Writes bench/results/conntrack_window_ab_established.csv (its first line names the
# run: date, both commits, machine with its SIMD flags). Needs only the
# Rust toolchain; building OLD in a worktree takes minutes (OLD_BIN=path
# skips it with a binary built there before).
#
#   bash bench/conntrack-window-ab.sh [OLD] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-04c9501}
rounds=${2:-3}
csv=bench/results/conntrack_window_ab_established.csv
if [ -z "${OLD_BIN:-}" ]; then
    tmp=$(mktemp -d)
    git worktree add -f "$tmp/tree" "$old" >/dev/null
    trap 'git worktree remove --force "$tmp/tree"; rm -rf "$tmp"' EXIT
    (cd "$tmp/tree" && CARGO_TARGET_DIR="$tmp/target" cargo build --release -q -p cfdp-bench --bin conntrack)
    OLD_BIN=$tmp/target/release/conntrack
fi
cargo build --release -q -p cfdp-bench --bin conntrack
new_bin=target/release/conntrack
new=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain -- dataplane bench/src)" ]; then
    new="$new-dirty"
fi
# The old binary has no --part: it runs every part, and only the flood's
# "established" line is read.
rate() { "$@" 2>/dev/null | awk '$1 == "established" { print $2; exit }'; }
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
simd=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -xE 'sse4_2|popcnt|avx|avx2|bmi1|bmi2|avx512f|avx512bw|avx512vl' | tr '\n' ' ')
{
    echo "# run $(date -u +%Y-%m-%dT%H:%MZ), old $old, new $new, $model, $(nproc) cores, SIMD ${simd:-none}: the conntrack bench's flood part (established ACKs, one worker), old and new run alternately $rounds times; each figure the median of 7 rounds inside a run"
    echo "run,old_established_mpps,new_established_mpps,ratio"
    for r in $(seq 1 "$rounds"); do
        o=$(rate "$OLD_BIN")
        n=$(rate "$new_bin" --part flood)
        echo "$r,$o,$n,$(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.3f", n / o }')"
    done
} >"$csv.tmp"
mv "$csv.tmp" "$csv"
cat "$csv"
