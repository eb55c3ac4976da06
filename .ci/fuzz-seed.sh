#!/usr/bin/env bash
# Seeds the fuzz corpora from the project's own files (never from ../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dataplane/fuzz/corpus/capture dataplane/fuzz/corpus/decode dataplane/fuzz/corpus/p4_write dataplane/fuzz/corpus/p4_read dataplane/fuzz/corpus/p4_stream rules/fuzz/corpus/rule_file rules/fuzz/corpus/request filter/fuzz/corpus/snapshot
cp pcap/mixed.pcap dataplane/fuzz/corpus/capture/
cp pcap/mixed.rules.json rules/fuzz/corpus/rule_file/
# Multi-field rules (with priorities): the grammar's ranges and defaults.
cat > rules/fuzz/corpus/rule_file/multi-field.json <<'JSON'
{"rules": [
  {"id": 1, "priority": 100, "match": {"src_prefix": "10.0.0.0/8", "dst_prefix": "192.168.0.0/16", "proto": "tcp", "sport": "1024-65535", "dport": 80}, "action": "drop"},
  {"id": 2, "priority": 7, "match": {"dst_prefix": "2001:db8::/32", "proto": 17, "dport": "53"}, "action": {"redirect": 1}},
  {"id": 3, "priority": 7, "match": {"src_prefix": "0.0.0.0/0"}, "action": "count"}
]}
JSON
# Request seeds: one line per method, and an apply with each update kind.
i=0
for line in '{"id":1,"method":"ping"}' '{"jsonrpc":"2.0","id":"a","method":"hello","params":{}}' \
    '{"id":2,"method":"get","params":{"id":7}}' '{"id":3,"method":"rules","params":{"offset":0,"limit":10}}' \
    '{"id":4,"method":"apply","params":{"atomicity":"dataplane_atomic","expected_generation":3,"updates":[{"op":"insert","rule":{"id":1,"match":{"flow":{"src":"10.0.0.1","dst":"10.0.0.2","proto":"tcp","sport":1,"dport":80}},"action":"drop"}},{"op":"modify","rule":{"id":2,"match":{"dst_prefix":"2001:db8::/32","proto":"udp","port":53},"action":{"redirect":2}}},{"op":"delete","id":3}]}}' \
    '{"id":5,"method":"migrate","params":{"budget":64}}'; do
    printf '%s' "$line" > "rules/fuzz/corpus/request/seed$i"; i=$((i + 1))
done
# Decode seeds: each frame of mixed.pcap behind a link-type selector byte 0 (Ethernet).
python3 - <<'PY'
import struct
raw = open('pcap/mixed.pcap', 'rb').read()
e = '<' if raw[:4] in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1') else '>'
d = raw[24:]
i = n = 0
while i + 16 <= len(d):
    incl = struct.unpack(e + 'I', d[i + 8:i + 12])[0]
    open(f'dataplane/fuzz/corpus/decode/frame{n}', 'wb').write(b'\x00' + d[i + 16:i + 16 + incl])
    i += 16 + incl; n += 1
PY
# Filter images: written by the filter's own snapshot test helper.
cargo run -q --release -p cfdp-bench --bin seed-images -- filter/fuzz/corpus/snapshot
# P4Runtime WriteRequests and stream events: by the crate's own seed writer.
cargo run -q --release -p cfdp-p4runtime --bin p4-seeds -- dataplane/fuzz/corpus/p4_write dataplane/fuzz/corpus/p4_stream
