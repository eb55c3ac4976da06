#!/usr/bin/env bash
# Seeds the fuzz corpora from the project's own files (never from ../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dataplane/fuzz/corpus/capture dataplane/fuzz/corpus/decode rules/fuzz/corpus/rule_file filter/fuzz/corpus/snapshot
cp pcap/mixed.pcap dataplane/fuzz/corpus/capture/
cp pcap/mixed.rules.json rules/fuzz/corpus/rule_file/
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
