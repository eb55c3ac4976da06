#!/usr/bin/env python3
"""A ClassBench filter set as OpenFlow flows for Open vSwitch (bench/ovs.sh).

    python3 bench/classbench-openflow.py SET > SET.flows

Each rule (line L, 1-based; the first matching line wins) becomes one or
more flows at priority 65535 - L with cookie L, actions=output:2; one
flow at priority 0 drops what no rule matches. OpenFlow matches a port
only as value/mask, so a range becomes the fewest value/mask pairs that
cover it and a rule with both ranges split becomes their cross product
(stated on stderr: rules in, flows out). OpenFlow matches ports only
under TCP, UDP or SCTP: a rule of another protocol is a flow without
ports when both its ranges hold 0 (a packet of such a protocol has
ports 0 in OVS's flow key, as in cfdp's), and no flow when they do not
(it can match nothing). A rule of any protocol with a port range other
than 0-65535 has no faithful OpenFlow form in one table: refused with
its line, never approximated.
"""
import sys

MAX_RULES = 65534  # priorities 65534..1 for rules, 0 for the drop


def ranges_to_masks(lo, hi):
    """The fewest (value, mask) pairs whose union is [lo, hi] of 16 bits."""
    out = []
    while lo <= hi:
        size = lo & -lo if lo else 1 << 16
        while size > hi - lo + 1:
            size >>= 1
        out.append((lo, 0xFFFF & ~(size - 1)))
        lo += size
    return out


def port_match(field, lo, hi):
    if (lo, hi) == (0, 0xFFFF):
        return [""]
    return [f",{field}={v}" if m == 0xFFFF else f",{field}={v}/0x{m:04x}" for v, m in ranges_to_masks(lo, hi)]


def parse(line, n):
    f = line.rstrip("\n").split("\t")
    if len(f) < 5 or not f[0].startswith("@"):
        raise ValueError(f"line {n}: not a ClassBench rule: {line.strip()!r}")
    src, dst = f[0][1:], f[1]
    slo, shi = (int(x) for x in f[2].split(":"))
    dlo, dhi = (int(x) for x in f[3].split(":"))
    proto, pmask = (int(x, 16) for x in f[4].split("/"))
    if not (0 <= slo <= shi <= 0xFFFF and 0 <= dlo <= dhi <= 0xFFFF):
        raise ValueError(f"line {n}: port range out of order or out of 16 bits")
    if pmask not in (0, 0xFF):
        raise ValueError(f"line {n}: protocol mask 0x{pmask:02x} (only exact or any)")
    return src, dst, (slo, shi), (dlo, dhi), proto if pmask else None


def flows(rule, n):
    src, dst, (slo, shi), (dlo, dhi), proto = rule
    head = f"cookie={n},priority={65535 - n}"
    addrs = f",nw_src={src},nw_dst={dst}"
    full = (slo, shi) == (0, 0xFFFF) and (dlo, dhi) == (0, 0xFFFF)
    if proto is None:
        if not full:
            raise ValueError(f"line {n}: any protocol with port ranges: no one-table OpenFlow form")
        return [f"{head},ip{addrs},actions=output:2"]
    if proto in (6, 17, 132):
        kind = {6: "tcp", 17: "udp", 132: "sctp"}[proto]
        return [
            f"{head},{kind}{addrs}{s}{d},actions=output:2"
            for s in port_match("tp_src", slo, shi)
            for d in port_match("tp_dst", dlo, dhi)
        ]
    if slo == 0 and dlo == 0:
        return [f"{head},ip,nw_proto={proto}{addrs},actions=output:2"]
    return []  # ports that exclude 0 under a protocol without ports


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: classbench-openflow.py SET")
    out, rules = [], 0
    try:
        with open(sys.argv[1]) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if n > MAX_RULES:
                    raise ValueError(f"more than {MAX_RULES} rules: OpenFlow has 16-bit priorities")
                rules += 1
                out += flows(parse(line, n), n)
    except (OSError, ValueError) as e:
        sys.exit(f"classbench-openflow: {sys.argv[1]}: {e}")
    out.append("cookie=0,priority=0,actions=drop")
    sys.stdout.write("\n".join(out) + "\n")
    print(f"classbench-openflow: {rules} rules -> {len(out) - 1} flows (+1 drop)", file=sys.stderr)


if __name__ == "__main__":
    main()
