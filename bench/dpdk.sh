#!/usr/bin/env bash
# The DPDK pipeline against dpdk-testpmd, side by side in one run, on the
# same virtual devices and one forwarding lcore each:
#   * dpdk-null: net_null (the I/O ceiling; its frames are not IP, so no
#     rule lookup happens for them),
#   * dpdk-pcap: net_pcap with infinite_rx=1 over 64-byte UDP frames, 1 % of
#     them matching one of the installed exact-flow rules.
# cfdp runs with RULES installed rules (default 1,000,000), one worker;
# testpmd in io and macswap forwarding modes. Rates are medians of the
# per-second rates (testpmd) or packets / polling time (cfdp).
#
# Writes bench/results/dpdk.csv (its first line names the run: date,
# commit, machine; backend = dpdk-null / dpdk-pcap; impl = filter /
# testpmd-io / testpmd-macswap). Installs the Debian DPDK packages when
# missing.
#
#   bash bench/dpdk.sh [--quick]        (DUR=seconds RULES=n override)
set -euo pipefail
cd "$(dirname "$0")/.."
csv=bench/results/dpdk.csv
DUR=${DUR:-10}
RULES=${RULES:-1000000}
if [ "${1:-}" = "--quick" ]; then
    DUR=2 RULES=100000
    mkdir -p bench/results/quick
    csv=bench/results/quick/dpdk.csv
fi
if ! pkg-config --exists libdpdk 2>/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q dpdk dpdk-dev libdpdk-dev pkg-config
fi
bash bench/build.sh --dpdk
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work" "$RULES" <<'PY'
import json, struct, sys, random
work, n = sys.argv[1], int(sys.argv[2])
def key(i):
    return (0x0a000000 | (i & 0xffffff), 0xc0000000 | ((i >> 24) & 0xff), 1024 + i % 50000)
ip = lambda a: '.'.join(str((a >> s) & 255) for s in (24, 16, 8, 0))
with open(f'{work}/rules.json', 'w') as f:
    f.write('{"rules": [\n')
    for i in range(n):
        s, d, sp = key(i)
        act = '"drop"' if i % 2 == 0 else '"allow"'
        f.write(('' if i == 0 else ',\n') + f'{{"id": {i}, "match": {{"flow": {{"src": "{ip(s)}", "dst": "{ip(d)}", "proto": "udp", "sport": {sp}, "dport": 53}}}}, "action": {act}}}')
    f.write('\n]}\n')
rng = random.Random(7)
with open(f'{work}/frames.pcap', 'wb') as f:
    f.write(struct.pack('<IHHiIII', 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
    for _ in range(16384):
        i = rng.randrange(n) if rng.random() < 0.01 else n + rng.randrange(1 << 30)
        s, d, sp = key(i)
        eth = b'\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00'
        iph = struct.pack('>BBHHHBBHII', 0x45, 0, 46, 0, 0, 64, 17, 0, s, d)
        fr = eth + iph + struct.pack('>HHHH', sp, 53, 26, 0) + b'\0' * 18
        f.write(struct.pack('<IIII', 0, 0, len(fr), len(fr)) + fr)
PY

machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo "machine: $machine; $DUR s per run; cfdp with $RULES rules"

# cfdp: start, wait until the workers poll (after the rules are loaded),
# let it run DUR seconds, stop, read the final line.
run_cfdp() { # backend vdev
    local name=$1 vdev=$2 cfg=$work/$1.toml
    cat > "$cfg" <<TOML
[dataplane]
mode = "verify"
[rules]
file = "$work/rules.json"
[control]
socket = ""
max_rules = $((RULES > 1048576 ? RULES : 1048576))
[filter]
flow_capacity = $RULES
[dpdk]
enabled = true
eal_args = ["--no-huge", "--no-pci", "-m", "2048", "--file-prefix", "cfdp-bench-$name", "-l", "0",
            "--log-level", "*:warning", "--vdev", "$vdev"]
rx_ports = ["${vdev%%,*}"]
tx_ports = ["${vdev%%,*}"]
workers = 1
worker_cpus = [$(( $(nproc) > 1 ? 1 : 0 ))]
mempool_size = 65535
TOML
    ./target/release/cfdp run --config "$cfg" >"$work/$name.out" 2>"$work/$name.err" &
    local pid=$!
    local polling=0
    for _ in $(seq 1 600); do
        grep -q "dpdk: polling" "$work/$name.err" && { polling=1; break; }
        kill -0 $pid 2>/dev/null || { cat "$work/$name.err"; exit 1; }
        sleep 0.1
    done
    [ $polling = 1 ] || { echo "cfdp did not start polling within 60 s" >&2; cat "$work/$name.err" >&2; exit 1; }
    sleep "$DUR"
    kill -TERM $pid
    wait $pid
    tail -n 1 "$work/$name.out" | python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["dpdk"]["mpps"])'
}

run_testpmd() { # mode vdev
    # timeout ends testpmd with SIGINT (status 124): that is the plan.
    { timeout -s INT $((DUR + 3)) dpdk-testpmd --no-huge --no-pci -m 2048 --file-prefix "cfdp-tpmd-$1" \
        -l 0-1 --log-level '*:warning' --vdev "$2" -- --no-mlockall --port-topology=loop \
        --forward-mode="$1" -a --stats-period 1 --total-num-mbufs=65535 2>/dev/null || true; } \
        | awk '/Rx-pps:/ {print $2}' | tail -n +3 | sort -n \
        | awk '{a[NR]=$1} END {if (NR == 0) print "0.000"; else printf "%.3f\n", a[int((NR+1)/2)]/1e6}'
}

rows=()
for backend in null pcap; do
    if [ $backend = null ]; then vdev="net_null0"; else vdev="net_pcap0,rx_pcap=$work/frames.pcap,infinite_rx=1"; fi
    ours=$(run_cfdp "dpdk-$backend" "$vdev")
    io=$(run_testpmd io "$vdev")
    macswap=$(run_testpmd macswap "$vdev")
    printf '%-10s cfdp (filter, %s rules) %8s Mpps | testpmd io %8s | macswap %8s | cfdp/macswap %s\n' \
        "dpdk-$backend" "$RULES" "$ours" "$io" "$macswap" \
        "$(python3 -c "print('%.2f' % ($ours / $macswap if $macswap > 0 else 0))")"
    rows+=("dpdk-$backend,filter,$RULES,1,1,$ours" "dpdk-$backend,testpmd-io,0,,1,$io" "dpdk-$backend,testpmd-macswap,0,,1,$macswap")
done
commit=$(git rev-parse --short HEAD)
git status --porcelain --untracked-files=no -- . ':!bench/results' | grep -q . && commit="$commit-dirty"
{
    echo "# run $(date -u +%Y-%m-%dT%H:%MZ), commit $commit, $machine"
    echo "backend,impl,rules,match_pct,workers,mpps"
    printf '%s\n' "${rows[@]}"
} > "$csv"
echo "wrote $csv"
