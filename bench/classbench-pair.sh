#!/usr/bin/env bash
# cfdp's classifier and rte_acl's vector algorithms on ClassBench sets,
# alternated round by round, from binaries already built: what
# bench/classbench.sh measures for speed, without its build, apt, huge
# pages, churn, replay and worst cases — for a machine that only runs
# what it is given (the device machine: no toolchain, no DPDK package,
# gVisor without hugetlbfs, so rte_acl on 4 KB pages, `--no-huge`).
#
# Per round and set: dpdk-test-acl --alg=avx512x32, avx512x16, avx2 (and
# avx512x32 at --tracestep=32) over the whole trace, --iter=ITER; then
# cfdp's classbench --classifier-only (one timing of ITER passes, single
# and batched). Then one set's verdicts, cfdp's first matching line
# against rte_acl scalar's, counted as classbench.sh counts them: the
# script fails on any difference.
#
#   CLASSBENCH_BIN=target/release/classbench DPDK_TEST_ACL=dpdk-test-acl \
#   DATA=../shared/classbench SETS="acl1_1k acl1_10k" ROUNDS=5 \
#   bash bench/classbench-pair.sh OUT.csv
#
# OUT.csv: the classbench binary's run header (CFDP_RUN_COMMIT names the
# commit where the binary was built elsewhere), then round,set,impl,mpps.
# The v6 rows need V6=DIR holding SET/rules and SET/trace as
# `classbench --v6 32 --write-v6 DIR/SET` writes them.
set -euo pipefail
out=${1:?usage: bench/classbench-pair.sh OUT.csv}
bin=${CLASSBENCH_BIN:-target/release/classbench}
acl_bin=${DPDK_TEST_ACL:-dpdk-test-acl}
data=${DATA:-../shared/classbench}
SETS=${SETS:-acl1_1k acl1_10k ipc1_10k fw1_10k}
ROUNDS=${ROUNDS:-3}
ITER=${ITER:-20}
V6=${V6:-}
algs="avx512x32 avx512x16 avx2"
grep -qw avx512bw /proc/cpuinfo || algs="avx2 sse"

acl() { # rules trace alg [app options]
    local wide=""
    case "$3" in avx512*) wide="--force-max-simd-bitwidth=512" ;; esac
    # shellcheck disable=SC2086 # wide and the app options are lists
    "$acl_bin" -l 0 --no-huge -m 1024 --no-pci --no-telemetry --file-prefix "cbp$$" $wide -- \
        --rulesf="$1" --tracef="$2" --rulenum=200000 --tracenum=200000 \
        --iter="$ITER" --verbose=0 --alg="$3" ${4:-} 2>&1 |
        sed -n 's/.* \([0-9.]*\) pkt\/sec$/\1/p' | awk '{printf "%.3f", $1 / 1e6}'
}
cfdp() { # rules trace [options]: "single batched"
    "$bin" --rules "$1" --trace "$2" --rounds 1 --passes "$ITER" --classifier-only ${3:-} |
        tail -1 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["mpps_single"], j["mpps_batched"])'
}
row() { echo "$1,$2,$3,$4" >>"$out"; }

"$bin" --run-header >"$out"
echo "round,set,impl,mpps" >>"$out"
for r in $(seq "$ROUNDS"); do
    for set in $SETS; do
        fams=("$data/$set $data/${set}_trace ")
        [ -n "$V6" ] && fams+=("$V6/$set/rules $V6/$set/trace -v6")
        for fam in "${fams[@]}"; do
            read -r rules trace suffix <<<"$fam"
            opt=""
            [ -n "$suffix" ] && opt="--ipv6"
            for alg in $algs; do
                row "$r" "$set" "rte_acl-$alg$suffix" "$(acl "$rules" "$trace" "$alg" "$opt")"
            done
            [ -n "$suffix" ] || row "$r" "$set" "rte_acl-${algs%% *}-step32" \
                "$(acl "$rules" "$trace" "${algs%% *}" --tracestep=32)"
            # cfdp reads the IPv4 set and moves it itself (--v6 32), as
            # classbench.sh does: the same rules rte_acl reads from V6.
            copt=""
            [ -n "$suffix" ] && copt="--v6 32"
            read -r single batched <<<"$(cfdp "$data/$set" "$data/${set}_trace" "$copt")"
            row "$r" "$set" "cfdp-single$suffix" "$single"
            row "$r" "$set" "cfdp-batched$suffix" "$batched"
        done
    done
done

# Verdicts on the first set: rte_acl scalar's first matching rule (0-based
# line, 0 also for none) against cfdp's (1-based, 0 for none).
set=${SETS%% *}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$acl_bin" -l 0 --no-huge -m 1024 --no-pci --no-telemetry --file-prefix "cbv$$" -- \
    --rulesf="$data/$set" --tracef="$data/${set}_trace" --rulenum=200000 --tracenum=200000 \
    --iter=1 --verbose=2 --alg=scalar 2>&1 | sed -n 's/.*result: //p' >"$work/truth"
"$bin" --rules "$data/$set" --trace "$data/${set}_trace" --verdicts "$work/ours" --rounds 1 \
    --classifier-only >/dev/null
diffs=$(awk '{print ($1 > 0) ? $1 - 1 : 0}' "$work/ours" | paste - "$work/truth" | awk '$1 != $2' | wc -l)
echo "# verdicts $set: $(wc -l <"$work/truth") packets, $diffs differ" >>"$out"
if [ "$diffs" != 0 ] || [ "$(wc -l <"$work/truth")" != "$(wc -l <"$work/ours")" ]; then
    echo "classbench-pair: $set: $diffs verdicts differ from rte_acl's" >&2
    exit 1
fi
