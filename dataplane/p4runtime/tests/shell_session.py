"""Drives a running `cfdp run` with the P4 community's own client library,
p4runtime-shell, the way an operator's script would.

Run by dataplane/cli/tests/p4runtime.rs (which starts cfdp run with a
looping capture of UDP 10.9.0.1:1000 -> 10.9.0.2:2000 and compares what
this prints with `cfdp ctl rules`):

    python shell_session.py HOST:PORT DEVICE_ID P4INFO_TXT DEVICE_CONFIG CFDP SOCKET

Each step checks its outcome and exits non-zero with the reason; the last
line printed is the table entries read back, as JSON.
"""
import ipaddress
import json
import os
import subprocess
import sys
import time

import grpc
import p4runtime_sh.shell as sh
from p4.v1 import p4runtime_pb2
from p4.config.v1 import p4info_pb2
from google.rpc import code_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeWriteException

ADDR, DEVICE, P4INFO, DEVICE_CONFIG, CFDP, SOCKET = sys.argv[1:7]
DEVICE = int(DEVICE)
PRIMARY, BACKUP = (0, 10), (0, 5)


def check(cond, what):
    if not cond:
        print("FAILED: " + what, flush=True)
        # The client's stream thread would keep a plain exit waiting.
        os._exit(1)
    print("ok:", what, flush=True)


def entry(table, action, priority, **fields):
    te = sh.TableEntry(table)(action=action)
    for k, v in fields.items():
        te.match[k] = v
    te.priority = priority
    return te


def raw_entries(table_name=None, counters=False):
    """Table entries as the server sends them (wildcard read)."""
    ent = p4runtime_pb2.Entity()
    if table_name:
        ent.table_entry.table_id = sh.context.get_obj_id(sh.P4Type.table, table_name)
    else:
        ent.table_entry.SetInParent()
    if counters:
        ent.table_entry.counter_data.SetInParent()
    out = []
    for rep in sh.client.read_one(ent):
        out.extend(e.table_entry for e in rep.entities)
    return out


def describe(te):
    """A table entry as cfdp's rule JSON spells its match."""
    table = sh.context.get_name_from_id(te.table_id)
    v6 = table == "acl6"
    bits = 128 if v6 else 32
    d = {"src_prefix": None, "dst_prefix": None, "proto": None, "sport": None, "dport": None}
    for m in te.match:
        name = sh.context.get_mf_name(table, m.field_id)
        if name.endswith("_src") or name.endswith("_dst"):
            value = int.from_bytes(m.ternary.value, "big")
            plen = bin(int.from_bytes(m.ternary.mask, "big")).count("1")
            addr = ipaddress.IPv6Address(value) if v6 else ipaddress.IPv4Address(value)
            d["src_prefix" if name.endswith("_src") else "dst_prefix"] = f"{addr}/{plen}"
        elif name == "ip_proto":
            d["proto"] = int.from_bytes(m.ternary.value, "big")
        else:
            lo, hi = int.from_bytes(m.range.low, "big"), int.from_bytes(m.range.high, "big")
            d["sport" if name == "l4_sport" else "dport"] = f"{lo}" if lo == hi else f"{lo}-{hi}"
    any_addr = "::/0" if v6 else "0.0.0.0/0"
    d["src_prefix"] = d["src_prefix"] or any_addr
    d["dst_prefix"] = d["dst_prefix"] or any_addr
    d["priority"] = te.priority
    action = sh.context.get_name_from_id(te.action.action.action_id)
    if action == "redirect":
        action = "redirect:%d" % int.from_bytes(te.action.action.params[0].value, "big")
    d["action"] = action
    return d


def write_error(f):
    try:
        f()
    except P4RuntimeWriteException as e:
        return [(i, code_pb2.Code.Name(err.canonical_code), err.message) for i, err in e.errors]
    return None


# The shell sends the shipped P4Info (SetForwardingPipelineConfig,
# VERIFY_AND_COMMIT) and reads it back: it exits if cfdp refuses it.
sh.setup(device_id=DEVICE, grpc_addr=ADDR, election_id=PRIMARY, verbose=False,
         config=sh.FwdPipeConfig(P4INFO, DEVICE_CONFIG))
check(sh.client.api_version().startswith("1."), "Capabilities answers a P4Runtime version")
check({t.preamble.name for t in sh.context.p4info.tables} == {"acl", "acl6"},
      "the P4Info fetched at setup has cfdp's tables")

# Insert: a counted host-to-host UDP entry, a /16 allow under it, an IPv6 drop.
a = entry("acl", "count", 100, ipv4_src="10.9.0.1&&&255.255.255.255",
          ipv4_dst="10.9.0.2&&&255.255.255.255", ip_proto="17", l4_dport="2000..2000")
a.insert()
b = entry("acl", "allow", 50, ipv4_src="10.9.0.0&&&255.255.0.0", l4_dport="1024..65000",
          ip_proto="17")
b.insert()
c = entry("acl6", "drop", 5, ipv6_src="2001:db8::&&&ffff:ffff::")
c.insert()
check(len(raw_entries("acl")) == 2 and len(raw_entries("acl6")) == 1,
      "inserted entries read back (2 in acl, 1 in acl6)")
check(write_error(a.insert) == [(0, "ALREADY_EXISTS", write_error(a.insert)[0][2])],
      "inserting the same match and priority again is ALREADY_EXISTS")

# Modify b's action; delete c.
b2 = entry("acl", "redirect", 50, ipv4_src="10.9.0.0&&&255.255.0.0", l4_dport="1024..65000",
           ip_proto="17")
b2.action["port"] = "3"
b2.modify()
got = [describe(e) for e in raw_entries("acl") if e.priority == 50]
check(len(got) == 1 and got[0]["action"] == "redirect:3", "MODIFY changed the action: %s" % got)
c.delete()
check(raw_entries("acl6") == [], "DELETE removed the acl6 entry")
errs = write_error(c.delete)
check(errs is not None and errs[0][1] == "NOT_FOUND", "deleting it again is NOT_FOUND: %s" % errs)

# A ROLLBACK_ON_ERROR batch with one bad entry leaves nothing.
good = entry("acl", "drop", 7, ipv4_dst="192.0.2.0&&&255.255.255.0")
bad = entry("acl", "drop", 8, ipv4_src="10.0.0.0&&&255.0.255.0")  # not a prefix mask
req = p4runtime_pb2.WriteRequest()
req.atomicity = p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR
for te in (good, bad):
    te._update_msg()
    u = req.updates.add()
    u.type = p4runtime_pb2.Update.INSERT
    u.entity.table_entry.CopyFrom(te._entry)
errs = write_error(lambda: sh.client.write(req))
check(errs is not None and [e[:2] for e in errs] == [(0, "ABORTED"), (1, "INVALID_ARGUMENT")]
      and "ipv4_src" in errs[1][2], "ROLLBACK_ON_ERROR: the bad entry is named, the good one aborted: %s" % errs)
check(len(raw_entries("acl")) == 2, "... and nothing of that batch was applied")

# A second controller with a lower election id is a backup: it may read, not write.
backup = P4RuntimeClient(DEVICE, ADDR, BACKUP)
try:
    w = p4runtime_pb2.WriteRequest()
    w.device_id = DEVICE
    w.election_id.high, w.election_id.low = BACKUP
    u = w.updates.add()
    u.type = p4runtime_pb2.Update.INSERT
    u.entity.table_entry.CopyFrom(good._entry)
    try:
        backup.stub.Write(w)
        denied = None
    except grpc.RpcError as e:
        denied = e.code()
    check(denied == grpc.StatusCode.PERMISSION_DENIED, "the backup's write is PERMISSION_DENIED: %s" % denied)
    rd = p4runtime_pb2.ReadRequest(device_id=DEVICE)
    rd.entities.add().table_entry.SetInParent()
    n = sum(len(r.entities) for r in backup.stub.Read(rd))
    check(n == 2, "the backup reads the entries")
finally:
    backup.tear_down()

# A pipeline that is not cfdp's is refused; cfdp's own is taken.
def set_pipeline(p4info):
    r = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=DEVICE)
    r.election_id.high, r.election_id.low = PRIMARY
    r.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    r.config.p4info.CopyFrom(p4info)
    try:
        sh.client.stub.SetForwardingPipelineConfig(r)
        return None
    except grpc.RpcError as e:
        return e.code()

other = p4info_pb2.P4Info()
other.CopyFrom(sh.context.p4info)
other.tables[0].match_fields[0].bitwidth = 48
check(set_pipeline(other) == grpc.StatusCode.INVALID_ARGUMENT, "another P4Info is refused")
check(set_pipeline(sh.context.p4info) is None, "cfdp's own P4Info is accepted")

# Counters: entry a matches the capture's flow A, which cfdp replays in a loop.
def node_packets():
    """Packets the node has received (`cfdp ctl stats`)."""
    out = subprocess.run([CFDP, "ctl", "--socket", SOCKET, "stats"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["result"]["totals"]["packets"]


# Ordered by the node's own packet count, not by the clock: once it has
# received 1024 more frames than when the entry was read back (8 passes of
# the 128-frame capture, whose every other frame is flow A), the entry's
# counter must have risen (counters trail the packet count by one burst).
start = node_packets()
packets = 0
while True:
    got = [e for e in raw_entries("acl", counters=True) if e.priority == 100]
    packets = got[0].counter_data.packet_count if got else 0
    if packets > 0 or node_packets() > start + 1024:
        break
    time.sleep(0.05)
# (46-byte frames: Ethernet, IPv4, UDP, a 4-byte sequence number)
check(packets > 0 and got[0].counter_data.byte_count == 46 * packets,
      "the direct counter of the matching entry rises: %d packets" % packets)
dc = list(sh.DirectCounterEntry("acl_counter").read())
check(len(dc) == 2 and max(d.packet_count for d in dc) >= packets,
      "DirectCounterEntry reads the same counters")

final = [describe(e) for e in raw_entries()]
sh.teardown()
print(json.dumps(sorted(final, key=lambda d: d["priority"])))
