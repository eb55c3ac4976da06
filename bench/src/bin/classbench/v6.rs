//! ClassBench sets moved into IPv6 (`--v6 BITS`): rules, trace keys and
//! the files `dpdk-test-acl` reads.

use cfdp_bench::arg;
use cfdp_rules::{AclMatch, AclRule, FlowKey, IpPrefix};

/// `--v6 AT`'s bit offset, or exit when it is not one.
pub(crate) fn v6_arg() -> Option<u32> {
    arg("--v6").map(|at| match at.parse::<u32>() {
        Ok(a) if a <= 96 => a,
        _ => {
            eprintln!("classbench: --v6 {at}: a bit offset 0..=96");
            std::process::exit(2)
        }
    })
}

/// The set and its trace moved into IPv6 (`--v6 AT`, see [`v6_addr`]).
pub(crate) fn to_v6(rules: &mut [AclRule], keys: &mut [FlowKey], at: u32) {
    for r in rules {
        let m = r.matcher;
        r.matcher = AclMatch::new(
            v6_prefix(&m.src(), at),
            v6_prefix(&m.dst(), at),
            m.proto(),
            m.sport(),
            m.dport(),
        )
        .expect("a valid match stays valid in the other family");
    }
    for k in keys {
        *k = FlowKey {
            v6: true,
            src: v6_addr(&k.src, at),
            dst: v6_addr(&k.dst, at),
            ..*k
        };
    }
}

/// An IPv4 address (the first 4 of `a`'s bytes) as IPv6: 2001:db8::/32's
/// leading `at` bits, then the IPv4 address's 32 bits (`--v6 AT`: the set
/// moved into IPv6 with the same verdicts, its prefixes diverging from bit
/// `at` on).
pub(crate) fn v6_addr(a: &[u8; 16], at: u32) -> [u8; 16] {
    let base: u128 = 0x2001_0db8 << 96;
    let v4 = u32::from_be_bytes([a[0], a[1], a[2], a[3]]);
    let lead = base & u128::MAX.checked_shl(128 - at).unwrap_or(0);
    (lead | (u128::from(v4) << (96 - at))).to_be_bytes()
}

/// `--v6 AT --write-v6 DIR`: DIR/rules and DIR/trace, the moved set (in
/// its line order: priority) and trace as `dpdk-test-acl --ipv6` reads
/// them: addresses as eight groups of four hex digits, a rule line
/// `@SRC/LEN DST/LEN SPLO : SPHI DPLO : DPHI PROTO/MASK`, a trace line
/// `SRC DST SPORT DPORT PROTO`.
pub(crate) fn write_v6_for_dpdk(dir: &str, rules: &[AclRule], keys: &[FlowKey]) {
    let hex = |a: &[u8; 16]| {
        a.chunks(2)
            .map(|g| format!("{:02x}{:02x}", g[0], g[1]))
            .collect::<Vec<_>>()
            .join(":")
    };
    let write = |name: &str, text: String| {
        let path = format!("{dir}/{name}");
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("classbench: {path}: {e}");
            std::process::exit(2)
        }
    };
    let mut order: Vec<&AclRule> = rules.iter().collect();
    order.sort_by_key(|r| r.id);
    let mut text = String::new();
    for r in order {
        let m = &r.matcher;
        let (proto, mask) = m.proto().map_or((0, 0), |p| (p, 0xff));
        text += &format!(
            "@{}/{}\t{}/{}\t{} : {}\t{} : {}\t0x{proto:02x}/0x{mask:02x}\n",
            hex(m.src().addr()),
            m.src().len(),
            hex(m.dst().addr()),
            m.dst().len(),
            m.sport().lo(),
            m.sport().hi(),
            m.dport().lo(),
            m.dport().hi(),
        );
    }
    write("rules", text);
    let mut text = String::new();
    for k in keys {
        text += &format!(
            "{}\t{}\t{}\t{}\t{}\n",
            hex(&k.src),
            hex(&k.dst),
            k.sport,
            k.dport,
            k.proto
        );
    }
    write("trace", text);
}

/// An IPv4 prefix as IPv6 (see [`v6_addr`]); `/0` stays "any" (`::/0`).
pub(crate) fn v6_prefix(p: &IpPrefix, at: u32) -> IpPrefix {
    if p.len() == 0 {
        return IpPrefix::any(true);
    }
    IpPrefix::new(true, v6_addr(p.addr(), at), p.len() + at as u8)
        .expect("an IPv4 prefix moved below `at` bits keeps its host bits clear")
}
