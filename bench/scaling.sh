#!/usr/bin/env bash
# Multi-core scaling of the read side, for a machine with more cores than
# the 2 of the development and CI machines:
#   * the `scaling` bench binary: the cuckoo filter's batched lookups and
#     the ClassBench set's worker matching over the rule store's published
#     tables, 1..N reader threads, without and with a writer changing
#     rules back to back (see bench/src/bin/scaling.rs);
#   * end to end: `cfdp replay` of the set's trace as a capture with the
#     imported rules, 1..N workers (median of ROUNDS runs each).
# Writes bench/results/scaling.csv (first line: date, commit, machine);
# the replay rows are part "replay" (threads = workers; no writer).
#
#   bash bench/scaling.sh [THREADS]    (default 1,2; e.g. 1,2,4,8,16)
#   bash bench/scaling.sh --quick      (CI: 1,2 threads, acl1_1k, short
#                                       runs, bench/results/quick/)
#
# OLD=PATH also replays with another cfdp binary (rows "replay-old"),
# alternating with this build's run by run; REPEAT=N replays the trace
# N times over in one capture (default 1), so start-up weighs less.
#
# BIN (default target/release, built here) may hold prebuilt
# `scaling`, `cfdp` and `trace-pcap` binaries — a machine without the
# toolchain runs them, with CFDP_RUN_COMMIT naming the commit they were
# built from. CLASSBENCH (default ../shared/classbench) holds acl1_10k and
# its trace; SET overrides the set.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=""
csv=bench/results/scaling.csv
if [ "${1:-}" = "--quick" ]; then
    quick=--quick
    shift
    ROUNDS=1 SET=${SET:-acl1_1k}
    csv=bench/results/quick/scaling.csv
fi
threads=${1:-1,2}
BIN=${BIN:-target/release}
data=${CLASSBENCH:-../shared/classbench}
set_name=${SET:-acl1_10k}
ROUNDS=${ROUNDS:-3}
if [ "$BIN" = target/release ]; then
    bash bench/build.sh
fi
for f in "$data/$set_name" "$data/${set_name}_trace"; do
    [ -r "$f" ] || { echo "scaling: $f: not found (CLASSBENCH=DIR)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$BIN/scaling" $quick --threads "$threads" --rounds "$ROUNDS" \
    --rules "$data/$set_name" --trace "$data/${set_name}_trace" --csv "$work/bench.csv"

"$BIN/cfdp" rules import --format classbench "$data/$set_name" -o "$work/rules.json" \
    --action count 2>/dev/null
for _ in $(seq "${REPEAT:-1}"); do cat "$data/${set_name}_trace"; done >"$work/trace"
"$BIN/trace-pcap" "$work/trace" "$work/trace.pcap" 2>/dev/null
builds="replay=$BIN/cfdp"
[ -z "${OLD:-}" ] || builds="$builds replay-old=$OLD"
: >"$work/replay.csv"
for w in ${threads//,/ }; do
    for _ in $(seq "$ROUNDS"); do
        for b in $builds; do
            "${b#*=}" replay "$work/trace.pcap" --rules "$work/rules.json" --workers "$w" \
                2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["mpps"])' |
                sed "s/^/${b%%=*},$w,/" >>"$work/replay.csv"
        done
    done
done
python3 - "$work/replay.csv" >>"$work/bench.csv" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    part, w, mpps = line.strip().split(",")
    runs[(part, int(w))].append(float(mpps))
for part, w in sorted(runs):
    m = statistics.median(runs[(part, w)])
    print(f"{part},{w},false,{m:.3f},{m / w:.3f},0")
    print(f"{part}: {w} workers {m:.2f} Mpps", file=sys.stderr)
PY
mkdir -p "$(dirname "$csv")"
cp "$work/bench.csv" "$csv"
echo "wrote $csv"
