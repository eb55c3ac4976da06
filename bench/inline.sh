#!/usr/bin/env bash
# cfdp inline against dpdk-testpmd --forward-mode=io, side by side in one
# run on the same veth lab (dataplane/dpdk/scripts/veth-lab.sh: two network
# namespaces, net_af_packet — and then net_af_xdp — on the root side of
# their veths), real kernel traffic from iperf3:
#   * tcp:    one TCP stream A→B for DUR seconds (Gbit/s at the receiver),
#   * udp64:  UDP with 18-byte payloads (64-byte frames on the wire) as fast
#             as one sender goes (bench/src/bin/udp-flood.rs, sendmmsg; the
#             packets/s B's interface received while A sent).
# Both forwarders get one forwarding core (core 1; iperf3 and the kernel
# get core 0 — 2-core machines have nothing else), one queue pair per port,
# cfdp with no rules installed and with RULES exact-flow rules (none of
# which match: the lookup happens, the verdict is forward); each of the
# three on AF_PACKET (impl names as they are) and on AF_XDP (the same names
# with "-afxdp"; generic XDP on the veths). ROUNDS rounds, the forwarders
# alternating within each; medians are printed and every
# round goes to bench/results/inline.csv with the run's date, commit and
# machine.
#
# As root. Installs DPDK, iperf3 and ethtool with apt-get when missing.
#
#   bash bench/inline.sh [--quick]         (DUR=seconds ROUNDS=n RULES=n override)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-8}
ROUNDS=${ROUNDS:-3}
RULES=${RULES:-100000}
csv=bench/results/inline.csv
if [ "${1:-}" = "--quick" ]; then
    DUR=2 ROUNDS=1 RULES=1000
    mkdir -p bench/results/quick
    csv=bench/results/quick/inline.csv
fi
need=()
pkg-config --exists libdpdk 2>/dev/null || need+=(dpdk dpdk-dev libdpdk-dev pkg-config)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ethtool >/dev/null || need+=(ethtool)
if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q "${need[@]}"
fi
bash bench/build.sh --dpdk
lab=dataplane/dpdk/scripts/veth-lab.sh
P=cfb
work=$(mktemp -d)
cleanup() {
    [ -n "${fwd_pid:-}" ] && kill -INT "$fwd_pid" 2>/dev/null || true
    ip netns pids ${P}b 2>/dev/null | xargs -r kill 2>/dev/null || true
    bash $lab down $P
    rm -rf "$work"
}
trap cleanup EXIT
bash $lab down $P
bash $lab up $P 1

python3 - "$work/rules.json" "$RULES" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, 'w') as f:
    f.write('{"rules": [\n')
    for i in range(n):
        src = f"10.{100 + (i >> 16) % 100}.{(i >> 8) & 255}.{i & 255}"
        f.write(('' if i == 0 else ',\n') + f'{{"id": {i}, "match": {{"flow": {{"src": "{src}", "dst": "10.77.0.2", "proto": "udp", "sport": 9, "dport": 9}}}}, "action": "drop"}}')
    f.write('\n]}\n')
PY
echo '{"rules": []}' > "$work/none.json"

machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(uname -r)"
commit=$(git rev-parse --short HEAD)
git status --porcelain --untracked-files=no -- . ':!bench/results' | grep -q . && commit="$commit-dirty"
echo "machine: $machine; $DUR s per test, $ROUNDS rounds"

start_cfdp() { # rules-file pmd
    bash $lab config $P 1 1 "$2" | sed "s|^file = \"\"|file = \"$1\"|; s|^socket = .*|socket = \"\"|" \
        > "$work/cfdp.toml"
    printf 'worker_cpus = [1]\nmempool_size = 16383\n' >> "$work/cfdp.toml"
    printf '[filter]\nflow_capacity = %d\n' "$RULES" >> "$work/cfdp.toml"
    ./target/release/cfdp run --config "$work/cfdp.toml" >"$work/cfdp.out" 2>"$work/cfdp.err" &
    fwd_pid=$!
    for _ in $(seq 1 600); do
        grep -q "dpdk: polling" "$work/cfdp.err" && return 0
        kill -0 $fwd_pid 2>/dev/null || { cat "$work/cfdp.err" >&2; exit 1; }
        sleep 0.1
    done
    echo "cfdp did not start" >&2; exit 1
}

start_testpmd() { # pmd
    # One forwarding lcore (1); main lcore 0 only handles the CLI.
    local vdevs=(--vdev "net_af_packet0,iface=${P}a1" --vdev "net_af_packet1,iface=${P}b1")
    [ "$1" = af_xdp ] && vdevs=(--vdev "net_af_xdp0,iface=${P}a1,start_queue=0,queue_count=1"
        --vdev "net_af_xdp1,iface=${P}b1,start_queue=0,queue_count=1")
    sleep 3600 | dpdk-testpmd --no-huge --no-pci -m 1024 --file-prefix "$P" -l 0-1 \
        --log-level '*:warning' "${vdevs[@]}" -- --forward-mode=io --stats-period 0 \
        --total-num-mbufs=16383 >"$work/testpmd.out" 2>&1 &
    fwd_pid=$!
    for _ in $(seq 1 300); do
        grep -q "Press enter to exit\|Start automatic\|Checking link statuses" "$work/testpmd.out" && break
        sleep 0.1
    done
    sleep 1
}

stop_fwd() {
    kill -INT $fwd_pid 2>/dev/null || true
    pkill -f "sleep 3600" 2>/dev/null || true
    wait $fwd_pid 2>/dev/null || true
    sleep 0.5
}

# Waits until A reaches B through the forwarder (ARP resolved, path up).
reach() {
    for _ in $(seq 1 50); do
        ip netns exec ${P}a ping -c 1 -W 1 -q 10.77.0.2 >/dev/null 2>&1 && return 0
    done
    echo "no path A→B through the forwarder" >&2; exit 1
}

rx_b() { ip netns exec ${P}b cat /sys/class/net/${P}b0/statistics/rx_packets; }

measure() { # → "tcp_gbps udp64_offered_kpps udp64_kpps"
    reach
    ip netns exec ${P}b taskset -c 0 iperf3 -s -1 -D -p 5201 >/dev/null 2>&1; sleep 0.3
    local tcp
    tcp=$(ip netns exec ${P}a taskset -c 0 iperf3 -c 10.77.0.2 -p 5201 -t "$DUR" -J |
        python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
    # 64-byte frames: what B's interface received while A sent.
    ip netns exec ${P}b taskset -c 0 ./target/release/udp-flood recv 10.77.0.2:9000 "$DUR" \
        >/dev/null 2>&1 &
    local rpid=$! before after sent
    sleep 0.3
    before=$(rx_b)
    sent=$(ip netns exec ${P}a taskset -c 0 ./target/release/udp-flood send 10.77.0.2:9000 "$DUR" 18)
    after=$(rx_b)
    wait $rpid || true
    python3 -c "
import json
s = json.loads('$sent')
print('$tcp', '%.1f' % s['kpps'], '%.1f' % (($after - $before) / s['seconds'] / 1e3))"
}

[ -f "$csv" ] || echo "date,commit,machine,round,impl,rules,tcp_gbps,udp64_offered_kpps,udp64_kpps" > "$csv"
date=$(date -u +%Y-%m-%dT%H:%MZ)
declare -A tcp udp
impls="testpmd-io cfdp cfdp-rules testpmd-io-afxdp cfdp-afxdp cfdp-rules-afxdp"
for r in $(seq 1 "$ROUNDS"); do
    for impl in $impls; do
        pmd=af_packet
        case $impl in *-afxdp) pmd=af_xdp ;; esac
        case $impl in
        testpmd-io*) start_testpmd $pmd ;;
        cfdp-rules*) start_cfdp "$work/rules.json" $pmd ;;
        cfdp*) start_cfdp "$work/none.json" $pmd ;;
        esac
        read -r t o u < <(measure)
        stop_fwd
        n=0
        case $impl in cfdp-rules*) n=$RULES ;; esac
        echo "round $r  $impl ($n rules): TCP $t Gbit/s, UDP 64 B $u kpps delivered of $o sent"
        echo "$date,$commit,\"$machine\",$r,$impl,$n,$t,$o,$u" >> "$csv"
        tcp[$impl]+="$t "
        udp[$impl]+="$u "
    done
done
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for impl in $impls; do
    peer=testpmd-io
    case $impl in *-afxdp) peer=testpmd-io-afxdp ;; esac
    mt=$(echo "${tcp[$impl]}" | med); mu=$(echo "${udp[$impl]}" | med)
    mt0=$(echo "${tcp[$peer]}" | med); mu0=$(echo "${udp[$peer]}" | med)
    printf 'median %-17s TCP %7s Gbit/s (%.2fx testpmd io, same PMD)   UDP 64 B %8s kpps (%.2fx)\n' \
        "$impl" "$mt" "$(python3 -c "print($mt/$mt0 if $mt0 else 0)")" \
        "$mu" "$(python3 -c "print($mu/$mu0 if $mu0 else 0)")"
done
echo "rows appended to $csv"
