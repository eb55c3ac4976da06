#!/usr/bin/env bash
# cfdp against Open vSwitch with DPDK and dpdk-testpmd, side by side in one
# run: each with one forwarding core on the same DPDK virtual devices
# (net_pcap with infinite_rx=1 in, net_null with no-rx=1 out), the same
# 64-byte frames, on 2 MB huge pages (every peer's production setting;
# the script reserves them), rounds alternated, medians.
#
# Workloads:
#   forward-all   cfdp: one allow-all rule; OVS: one OpenFlow flow
#                 (in_port=1 -> output:2); testpmd: io forwarding.
#   forward-all-v6  the same with IPv6/UDP frames (cfdp's rule ::/0).
#   udp-stateful  conversations from inside (10/8) answered from outside:
#                 cfdp: "allow + track" for 10/8 and a catch-all drop;
#                 OVS: the same through ct() (untracked -> ct(table=1);
#                 new from 10/8 -> ct(commit), output; established ->
#                 output; the rest dropped). Every frame of the capture
#                 is either a request or its answer, so both forward all.
#   tcp-stateful  short TCP connections from inside (10/8), eight segments
#                 each (handshake, data, FIN both ways), the same rules
#                 and flows for TCP; each pass of the capture reopens them
#                 from TIME_WAIT (both track TCP windows and checksums);
#                 segment-major order (every SYN, then every SYN-ACK...).
#   acl1_10k, ipc1_10k, fw1_10k   ClassBench sets (from CLASSBENCH, default
#                 ../shared/classbench; skipped when absent): cfdp the set
#                 from `cfdp rules import --action allow`; OVS the same
#                 rules as OpenFlow flows (bench/classbench-openflow.py:
#                 port ranges as value/mask pairs, priority by line, one
#                 drop below; it says how many flows a set becomes);
#                 packets from the set's trace (trace-pcap).
#
# OVS gets its best cache setting for thousands of flows (EMC off, SMC on:
# see OVS_EMC_INV below) and the dpcls kernel it picks for the CPU.
# Verdicts: the forwarded share is read from each (cfdp's final counters;
# OVS: packets of the flows that output over packets received) and
# printed beside the rate. For a ClassBench set, also rule by rule: the
# trace once through OVS (net_pcap without infinite_rx, the flows in
# place before its port) against `cfdp replay` of the same capture, the
# packets each rule took (OVS: summed over the flows of its cookie) and
# those no rule took; the rules whose counts differ are the CSV's
# verdict_diffs (the script fails on any). OVS drops a packet whose
# upcall fails (its datapath flow limit, adapted as it goes, even raised):
# a rule may count fewer packets in OVS, by no more than OVS lost in all,
# never more.
# Cycles a packet: OVS's own (pmd-stats-show); cfdp's and testpmd's as
# the CPU's clock over the rate (a busy-polling core), as OVS's are when
# it is never idle.
#
# Writes bench/results/ovs.csv (run line: date, commit, CPU, SIMD flags,
# each peer's configuration). Installs openvswitch-switch-dpdk and the
# DPDK packages when missing (apt-get, as root).
#
#   bash bench/ovs.sh [--quick]      (DUR=seconds ROUNDS=n WORKLOADS="..."
#                                     SETS="..." override)
set -euo pipefail
cd "$(dirname "$0")/.."
csv=bench/results/ovs.csv
DUR=${DUR:-5}
ROUNDS=${ROUNDS:-3}
# OVS's caches: the EMC off (inverse insert probability 0) and the SMC on
# was its best on these workloads' thousands of flows (the EMC's 8,192
# entries thrash: 780-840 cycles a packet against 360-460; by hand,
# 2026-11-29); OVS_EMC_INV=100 OVS_SMC=false is its shipped default.
OVS_EMC_INV=${OVS_EMC_INV:-0}
OVS_SMC=${OVS_SMC:-true}
if [ "${1:-}" = "--quick" ]; then
    # CI's quick race: forwarding, a stateful workload (OVS's ct()) and one
    # ClassBench set with its rule-by-rule verdict check.
    DUR=2 ROUNDS=1 SETS=${SETS:-acl1_10k} WORKLOADS=${WORKLOADS:-forward-all tcp-stateful}
    mkdir -p bench/results/quick
    csv=bench/results/quick/ovs.csv
fi
export DEBIAN_FRONTEND=noninteractive
if ! pkg-config --exists libdpdk 2>/dev/null || ! command -v dpdk-testpmd >/dev/null; then
    apt-get update -q && apt-get install -y -q dpdk dpdk-dev libdpdk-dev pkg-config
fi
vswitchd=/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk
if [ ! -x $vswitchd ]; then
    apt-get update -q && apt-get install -y -q openvswitch-switch-dpdk
fi
bash bench/build.sh --dpdk
work=$(mktemp -d)
hp_before=$(cat /proc/sys/vm/nr_hugepages)
cleanup() {
    [ -f "$work/vswitchd.pid" ] && kill "$(cat "$work/vswitchd.pid")" 2>/dev/null || true
    [ -f "$work/ovsdb.pid" ] && kill "$(cat "$work/ovsdb.pid")" 2>/dev/null || true
    sleep 0.5
    echo "$hp_before" >/proc/sys/vm/nr_hugepages || true
    rm -rf "$work"
}
trap cleanup EXIT
# 1 GB for each peer, one at a time.
echo $((hp_before > 600 ? hp_before : 600)) >/proc/sys/vm/nr_hugepages
[ "$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)" -ge 512 ] || {
    echo "ovs.sh: could not reserve 512 huge pages of 2 MB" >&2
    exit 1
}

# The frames: forward-all, 16,384 UDP frames of distinct flows; udp-stateful,
# 4,096 conversations of a request from 10/8 and its answer, in order.
python3 - "$work" <<'PY'
import struct, sys, random
work = sys.argv[1]
rng = random.Random(7)
def frame(s, d, sp, dp):
    # A valid IPv4 header checksum: OVS's conntrack marks a packet whose
    # checksum is wrong invalid (UDP's checksum 0 means none).
    eth = b'\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00'
    iph = struct.pack('>BBHHHBBHII', 0x45, 0, 46, 0, 0, 64, 17, 0, s, d)
    c = sum(struct.unpack('>10H', iph))
    c = (c & 0xffff) + (c >> 16)
    c = (c & 0xffff) + (c >> 16)
    iph = iph[:10] + struct.pack('>H', ~c & 0xffff) + iph[12:]
    return eth + iph + struct.pack('>HHHH', sp, dp, 26, 0) + b'\0' * 18
def write(name, frames):
    with open(f'{work}/{name}.pcap', 'wb') as f:
        f.write(struct.pack('<IHHiIII', 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        for fr in frames:
            f.write(struct.pack('<IIII', 0, 0, len(fr), len(fr)) + fr)
write('forward-all', [frame(0x0a000000 | rng.randrange(1 << 24), 0xc0000000 | rng.randrange(256),
                            1024 + i % 50000, 53) for i in range(16384)])
def frame6(s, d, sp, dp):
    eth = b'\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x86\xdd'
    ip6 = struct.pack('>IHBB', 6 << 28, 8 + 18, 17, 64) + s + d
    return eth + ip6 + struct.pack('>HHHH', sp, dp, 26, 0xffff) + b'\0' * 18
write('forward-all-v6', [frame6(b'\x20\x01\x0d\xb8' + rng.randbytes(12),
                                b'\x20\x01\x0d\xb9' + bytes(11) + bytes([rng.randrange(256)]),
                                1024 + i % 50000, 53) for i in range(16384)])
conv = []
for i in range(4096):
    a, b, sp = 0x0a000000 | rng.randrange(1 << 24), 0xc0000000 | rng.randrange(1 << 16), 1024 + i
    conv += [frame(a, b, sp, 53), frame(b, a, 53, sp)]
write('udp-stateful', conv)
def csum(b):
    if len(b) % 2:
        b += b'\0'
    c = sum(struct.unpack(f'>{len(b) // 2}H', b))
    while c >> 16:
        c = (c & 0xffff) + (c >> 16)
    return ~c & 0xffff
def tcp(s, d, sp, dp, seq, ack, flags, data=b''):
    # Valid IP and TCP checksums: both peers' trackers check them.
    hdr = struct.pack('>HHIIBBHHH', sp, dp, seq, ack, 5 << 4, flags, 65535, 0, 0) + data
    pseudo = struct.pack('>IIBBH', s, d, 0, 6, len(hdr))
    hdr = hdr[:16] + struct.pack('>H', csum(pseudo + hdr)) + hdr[18:]
    iph = struct.pack('>BBHHHBBHII', 0x45, 0, 20 + len(hdr), 0, 0, 64, 6, 0, s, d)
    iph = iph[:10] + struct.pack('>H', csum(iph)) + iph[12:]
    fr = b'\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00' + iph + hdr
    return fr + b'\0' * max(0, 60 - len(fr))
# Short TCP connections from inside, each whole in eight segments (the
# handshake, 18 bytes of data and their ACK, FIN both ways, the last
# ACK); each pass of the capture reopens them from TIME_WAIT.
SYN, FIN, ACK, PSH = 2, 1, 16, 8
conns = []
for i in range(4096):
    a, b, sp = 0x0a000000 | rng.randrange(1 << 24), 0xc0000000 | rng.randrange(1 << 16), 1024 + i
    x, y = rng.randrange(1 << 32), rng.randrange(1 << 32)
    m = lambda n: n & 0xffffffff
    conns.append([tcp(a, b, sp, 80, x, 0, SYN), tcp(b, a, 80, sp, y, m(x + 1), SYN | ACK),
              tcp(a, b, sp, 80, m(x + 1), m(y + 1), ACK),
              tcp(a, b, sp, 80, m(x + 1), m(y + 1), PSH | ACK, b'x' * 18),
              tcp(b, a, 80, sp, m(y + 1), m(x + 19), ACK),
              tcp(a, b, sp, 80, m(x + 19), m(y + 1), FIN | ACK),
              tcp(b, a, 80, sp, m(y + 1), m(x + 20), FIN | ACK),
              tcp(a, b, sp, 80, m(x + 20), m(y + 2), ACK)])
# Segment by segment across the connections (every SYN, then every
# SYN-ACK...): a connection's next segment comes 4,096 frames later, as
# in a network of many connections with round trips between segments.
# (One connection's segments back to back meet OVS's batching: its
# conntrack looks a whole batch up before the batch's ct(commit), so an
# answer in the SYN's batch is new, from outside, and dropped.)
write('tcp-stateful', [c[k] for k in range(8) for c in conns])
PY

cat >"$work/forward-all.json" <<'JSON'
{"rules": [{"id": 1, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "allow"}]}
JSON
cat >"$work/forward-all-v6.json" <<'JSON'
{"rules": [{"id": 1, "priority": 1, "match": {"src_prefix": "::/0"}, "action": "allow"}]}
JSON
cat >"$work/udp-stateful.json" <<'JSON'
{"rules": [
  {"id": 1, "priority": 10, "match": {"src_prefix": "10.0.0.0/8", "proto": "udp"}, "action": "allow", "track": true},
  {"id": 2, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}]}
JSON
cat >"$work/tcp-stateful.json" <<'JSON'
{"rules": [
  {"id": 1, "priority": 10, "match": {"src_prefix": "10.0.0.0/8", "proto": "tcp"}, "action": "allow", "track": true},
  {"id": 2, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}]}
JSON
cat >"$work/forward-all.flows" <<'FLOWS'
in_port=1,actions=output:2
FLOWS
cp "$work/forward-all.flows" "$work/forward-all-v6.flows"
cat >"$work/udp-stateful.flows" <<'FLOWS'
table=0,priority=10,udp,ct_state=-trk,actions=ct(table=1)
table=0,priority=0,actions=drop
table=1,priority=10,udp,ct_state=+trk+new,nw_src=10.0.0.0/8,actions=ct(commit),output:2
table=1,priority=10,udp,ct_state=+trk+est,actions=output:2
table=1,priority=0,actions=drop
FLOWS
sed 's/udp/tcp/g' "$work/udp-stateful.flows" >"$work/tcp-stateful.flows"

# The ClassBench sets: rules for cfdp and for OVS, the trace as a capture.
classbench=${CLASSBENCH:-../shared/classbench}
sets=()
if [ -d "$classbench" ]; then
    for set in ${SETS:-acl1_10k ipc1_10k fw1_10k}; do
        target/release/cfdp rules import --format classbench "$classbench/$set" \
            -o "$work/$set.json" --action allow
        # The same rules counting (cfdp keeps per-rule counters for counting
        # rules): `cfdp replay`'s packets a rule took, for the verdicts.
        target/release/cfdp rules import --format classbench "$classbench/$set" \
            -o "$work/$set.count.json" --action count 2>/dev/null
        python3 bench/classbench-openflow.py "$classbench/$set" >"$work/$set.flows"
        target/release/trace-pcap "$classbench/${set}_trace" "$work/$set.pcap"
        sets+=("$set")
    done
else
    echo "ovs.sh: $classbench not found: the ClassBench workloads are skipped" >&2
fi

model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
mhz=$(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2 | xargs)
simd=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -xE 'sse4_2|popcnt|avx|avx2|bmi1|bmi2|avx512f|avx512bw|avx512vl' | tr '\n' ' ')
fwd_cpu=$(($(nproc) > 1 ? 1 : 0))
in_dev() { echo "net_pcap0,rx_pcap=$work/$1.pcap,infinite_rx=1"; }
out_dev="net_null0,no-rx=1"

# cfdp: start, wait until the worker polls, run DUR seconds, stop, read its
# final line: rate and forwarded share.
run_cfdp() { # workload
    local w=$1 cfg=$work/cfdp-$1.toml
    cat >"$cfg" <<TOML
[dataplane]
mode = "verify"
[rules]
file = "$work/$w.json"
[control]
socket = ""
[dpdk]
enabled = true
eal_args = ["--no-pci", "--in-memory", "-m", "1024", "-l", "0,$fwd_cpu", "--log-level", "*:warning",
            "--vdev", "$(in_dev "$w")", "--vdev", "$out_dev"]
rx_ports = ["net_pcap0"]
tx_ports = ["net_null0"]
workers = 1
worker_cpus = [$fwd_cpu]
# net_pcap with infinite_rx holds the whole capture in mbufs (a
# ClassBench trace is ~100k frames).
mempool_size = 262143
TOML
    ./target/release/cfdp run --config "$cfg" >"$work/cfdp.out" 2>"$work/cfdp.err" &
    local pid=$! polling=0
    for _ in $(seq 1 600); do
        grep -q "dpdk: polling" "$work/cfdp.err" && { polling=1; break; }
        kill -0 $pid 2>/dev/null || { cat "$work/cfdp.err" >&2; exit 1; }
        sleep 0.1
    done
    [ $polling = 1 ] || { echo "cfdp did not start polling" >&2; cat "$work/cfdp.err" >&2; exit 1; }
    sleep "$DUR"
    kill -TERM $pid
    wait $pid
    tail -n 1 "$work/cfdp.out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
t = j["totals"]
print("%.3f %.4f" % (j["dpdk"]["mpps"], t["forwarded"] / max(t["packets"], 1)))'
}

# OVS: a private ovsdb and vswitchd in $work, one PMD thread on the
# forwarding core; the bridge's two DPDK ports, the workload's flows.
ovs_up() {
    local V="ovs-vsctl --db=unix:$work/db.sock --no-wait"
    rm -f "$work/conf.db"
    ovsdb-tool create "$work/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ovsdb-server --remote="punix:$work/db.sock" --pidfile="$work/ovsdb.pid" \
        --unixctl="$work/ovsdb.ctl" --detach --log-file="$work/ovsdb.log" "$work/conf.db"
    $V init
    $V set Open_vSwitch . other_config:dpdk-init=true other_config:dpdk-lcore-mask=0x1 \
        other_config:pmd-cpu-mask=$((1 << fwd_cpu)) other_config:dpdk-socket-mem=1024 \
        "other_config:dpdk-extra=--no-pci" \
        other_config:emc-insert-inv-prob="$OVS_EMC_INV" other_config:smc-enable="$OVS_SMC"
    OVS_RUNDIR=$work OVS_LOGDIR=$work $vswitchd "unix:$work/db.sock" --pidfile="$work/vswitchd.pid" \
        --unixctl="$work/vswitchd.ctl" --detach --log-file="$work/vswitchd.log" >/dev/null 2>&1
}
ovs_down() {
    ovs-appctl -t "$work/vswitchd.ctl" exit >/dev/null 2>&1 || true
    ovs-appctl -t "$work/ovsdb.ctl" exit >/dev/null 2>&1 || true
    rm -f "$work/vswitchd.pid" "$work/ovsdb.pid"
    sleep 0.5
}
run_ovs() { # workload
    local w=$1 V="ovs-vsctl --db=unix:$work/db.sock" A="ovs-appctl -t $work/vswitchd.ctl"
    ovs_up
    $V add-br br0 -- set bridge br0 datapath_type=netdev
    $V add-port br0 in -- set Interface in type=dpdk "options:dpdk-devargs=$(in_dev "$w")" ofport_request=1
    $V add-port br0 out -- set Interface out type=dpdk "options:dpdk-devargs=$out_dev" ofport_request=2
    ovs-ofctl -O OpenFlow13 del-flows "unix:$work/br0.mgmt"
    ovs-ofctl -O OpenFlow13 add-flows "unix:$work/br0.mgmt" "$work/$w.flows"
    sleep 1 # the caches warm
    # Packets of the flows that output and of those that drop (one dump:
    # a dump of thousands of flows takes a while, during which the PMD
    # goes on; the share is of the two deltas, one window).
    fwd() { ovs-ofctl -O OpenFlow13 dump-flows "unix:$work/br0.mgmt" |
        awk 'match($0, /n_packets=[0-9]+/) { n = substr($0, RSTART + 10, RLENGTH - 10); if (/output:2/) o += n; else if (/actions=drop/) d += n }
             END { print o + 0, d + 0 }'; }
    local f0 f1 stats t0 t1
    f0=$(fwd)
    # The rate over the time between the statistics' clear and their read
    # (the flows' dumps are outside it).
    $A dpif-netdev/pmd-stats-clear >/dev/null
    t0=$(date +%s.%N)
    sleep "$DUR"
    stats=$($A dpif-netdev/pmd-stats-show)
    t1=$(date +%s.%N)
    f1=$(fwd)
    ovs_down
    local pkts cyc
    pkts=$(echo "$stats" | awk '/packets received:/ {print $3; exit}')
    cyc=$(echo "$stats" | awk '/avg processing cycles per packet:/ {print $6; exit}')
    python3 -c "
o0, d0 = map(int, '$f0'.split()); o1, d1 = map(int, '$f1'.split())
print('%.3f %.4f %s' % ($pkts / ($t1 - $t0) / 1e6, (o1 - o0) / max(o1 - o0 + d1 - d0, 1), '$cyc'))"
}

# A ClassBench set's trace once through OVS (no infinite_rx; the flows in
# place before the input port exists) and through `cfdp replay`: the
# rules whose packet counts differ, printed with the first few.
verdict_diffs() { # set
    local w=$1 V="ovs-vsctl --db=unix:$work/db.sock" O="ovs-ofctl -O OpenFlow13"
    local A="ovs-appctl -t $work/vswitchd.ctl" want got=0
    # cfdp first: the frames it read are the capture's.
    target/release/cfdp replay "$work/$w.pcap" --rules "$work/$w.count.json" --workers 1 \
        >"$work/replay.json" 2>/dev/null
    want=$(python3 -c "import json; print(json.load(open('$work/replay.json'))['totals']['packets'])")
    ovs_up
    # Upcalls past the datapath's flow limit fail and lose their packet
    # (OVS starts the limit at 10,000 flows and adapts it): raised, so
    # that every frame of the one pass is counted.
    $A upcall/set-flow-limit 200000 >/dev/null
    $V add-br br0 -- set bridge br0 datapath_type=netdev
    $V add-port br0 out -- set Interface out type=dpdk "options:dpdk-devargs=$out_dev" ofport_request=2
    $O del-flows "unix:$work/br0.mgmt"
    $O add-flows "unix:$work/br0.mgmt" "$work/$w.flows"
    $V add-port br0 in -- set Interface in type=dpdk \
        "options:dpdk-devargs=net_pcap0,rx_pcap=$work/$w.pcap" ofport_request=1
    # Until every frame of the capture is counted by some flow or its
    # upcall failed (packets whose upcall fails OVS drops uncounted), two
    # reads apart with nothing new, or 120 s (OVS takes ~30 s on ipc1).
    local lost=0 seen=-1
    for _ in $(seq 1 240); do
        $O dump-flows "unix:$work/br0.mgmt" >"$work/ovs-flows.txt"
        got=$(awk '{ if (match($0, /n_packets=[0-9]+/)) s += substr($0, RSTART + 10, RLENGTH - 10) } END { print s + 0 }' "$work/ovs-flows.txt")
        lost=$($A dpif-netdev/pmd-stats-show | awk '/miss with failed upcall:/ { s += $5 } END { print s + 0 }')
        [ $((got + lost)) -ge "$want" ] && [ "$got" = "$seen" ] && break
        seen=$got
        sleep 0.5
    done
    ovs_down
    python3 - "$work/ovs-flows.txt" "$work/replay.json" "$want" "$lost" <<'PY'
import collections, json, re, sys
flows, replay, want, lost = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ovs = collections.Counter()
for line in open(flows):
    c, n = re.search(r"cookie=(0x[0-9a-f]+|\d+)", line), re.search(r"n_packets=(\d+)", line)
    if c and n:
        ovs[int(c.group(1), 0)] += int(n.group(1))
j = json.load(open(replay))
cfdp = collections.Counter({r["id"]: r["packets"] for r in j["rule_counters"] if r["packets"]})
# Packets no rule took: OVS's drop flow (cookie 0); cfdp's the rest.
cfdp[0] = j["totals"]["packets"] - sum(cfdp.values())
# Frames OVS did not count: its failed upcalls lose theirs (except where
# OVS still runs the actions uninstalled). Counting more than the trace
# holds fails; a frame or two lost beyond the failed upcalls (seen once:
# 298 missing, 297 failed upcalls, on ipc1_10k) is said, not failed: the
# check that matters is that no rule counts more in OVS than in cfdp.
missing = want - sum(ovs.values())
if j["totals"]["packets"] != want or missing < 0:
    sys.exit(f"ovs.sh: the trace's {want} frames: OVS counted {sum(ovs.values())} with {lost} failed upcalls, cfdp {j['totals']['packets']}")
if missing > lost:
    print(f"ovs.sh: OVS lost {missing - lost} frame(s) beyond its {lost} failed upcalls, counted by no flow", file=sys.stderr)
# A rule that took more packets in OVS than in cfdp differs; those that
# took fewer are short by the frames OVS lost, in all, when none took more.
more = sorted(k for k in set(ovs) | set(cfdp) if ovs[k] > cfdp[k])
fewer = sorted(k for k in set(ovs) | set(cfdp) if ovs[k] < cfdp[k])
for k in more[:5]:
    print(f"  rule {k}: OVS {ovs[k]}, cfdp {cfdp[k]}", file=sys.stderr)
print(f"ovs.sh: {want} frames, {missing} lost by OVS ({lost} failed upcalls), {len(fewer)} rules short of them", file=sys.stderr)
print(len(more))
PY
}

run_testpmd() { # workload
    # timeout ends testpmd with SIGINT (status 124): that is the plan.
    { timeout -s INT $((DUR + 4)) dpdk-testpmd --no-pci --in-memory -m 1024 -l "0,$fwd_cpu" \
        --log-level '*:warning' --vdev "$(in_dev "$1")" --vdev "$out_dev" -- --no-mlockall \
        --port-topology=paired --forward-mode=io -a --stats-period 1 --total-num-mbufs=65535 \
        2>/dev/null || true; } |
        awk '/Rx-pps:/ {print $2}' | awk 'NR % 2 == 1' | tail -n +3 | sort -n |
        awk '{a[NR]=$1} END {if (NR == 0) print "0.000"; else printf "%.3f\n", a[int((NR+1)/2)]/1e6}'
}

median() { sort -n | awk '{a[NR]=$1} END {printf "%s", a[int((NR+1)/2)]}'; }
rows=()
echo "machine: $model, $(nproc) cores, $mhz MHz, SIMD $simd; $DUR s a run, $ROUNDS rounds"
for w in ${WORKLOADS:-forward-all forward-all-v6 udp-stateful tcp-stateful} "${sets[@]}"; do
    c_r=() c_f=() o_r=() o_f=() o_c=() t_r=()
    for _ in $(seq 1 "$ROUNDS"); do
        read -r r f < <(run_cfdp "$w")
        c_r+=("$r") c_f+=("$f")
        read -r r f c < <(run_ovs "$w")
        o_r+=("$r") o_f+=("$f") o_c+=("$c")
        case $w in forward-all*) t_r+=("$(run_testpmd "$w")") ;; esac
    done
    cr=$(printf '%s\n' "${c_r[@]}" | median) cf=$(printf '%s\n' "${c_f[@]}" | median)
    or=$(printf '%s\n' "${o_r[@]}" | median) of=$(printf '%s\n' "${o_f[@]}" | median)
    oc=$(printf '%s\n' "${o_c[@]}" | median)
    tr=$( ((${#t_r[@]})) && printf '%s\n' "${t_r[@]}" | median || echo "")
    cc=$(python3 -c "print('%.0f' % ($mhz / $cr))")
    tc=$([ -n "$tr" ] && python3 -c "print('%.0f' % ($mhz / $tr))" || echo "")
    printf '%-13s cfdp %7s Mpps (%s cyc, fwd %s) | OVS %7s Mpps (%s cyc, fwd %s) | testpmd io %7s | cfdp/OVS %s\n' \
        "$w" "$cr" "$cc" "$cf" "$or" "$oc" "$of" "${tr:--}" "$(python3 -c "print('%.2f' % ($cr / $or))")"
    vd=""
    if [[ " ${sets[*]} " == *" $w "* ]]; then
        vd=$(verdict_diffs "$w")
        echo "$w: $vd rules whose packet counts differ between OVS and cfdp"
        [ "$vd" = 0 ] || { echo "ovs.sh: $w: verdicts differ" >&2; exit 1; }
    fi
    rows+=("$w,cfdp,$cr,$cc,$cf,$vd" "$w,ovs-dpdk,$or,$oc,$of,$vd")
    [ -n "$tr" ] && rows+=("$w,testpmd-io,$tr,$tc,,")
done
commit=$(git rev-parse --short HEAD)
git status --porcelain --untracked-files=no -- . ':!bench/results' | grep -q . && commit="$commit-dirty"
ovs_v=$($vswitchd --version | head -1 | awk '{print $NF}')
{
    echo "# run $(date -u +%Y-%m-%dT%H:%MZ), commit $commit, $model, $(nproc) cores, $mhz MHz, SIMD ${simd:-none}; one forwarding core each on net_pcap(infinite_rx) -> net_null(no-rx), 2 MB huge pages; cfdp one DPDK worker (verify mode); OVS $ovs_v (netdev datapath, one PMD, emc-insert-inv-prob=$OVS_EMC_INV, smc-enable=$OVS_SMC, default dpcls); testpmd io; $DUR s a run, medians of $ROUNDS alternated rounds; cycles: OVS's pmd-stats, others CPU MHz / Mpps"
    echo "workload,impl,mpps,cycles_per_packet,forwarded_share,verdict_diffs"
    printf '%s\n' "${rows[@]}"
} >"$csv"
echo "wrote $csv"
