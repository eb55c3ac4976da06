//! What the bench's parts share: the connection keys, a table sized to
//! its filter, an established connection, percentiles.

use std::net::{IpAddr, Ipv4Addr};

use cfdp_conntrack::state::tcp::{ACK, SYN};
use cfdp_conntrack::table::Options;
use cfdp_conntrack::{ConnTable, Timeouts};
use cfdp_rules::{Action, Allowing, FlowKey, HashSecret};

pub(crate) const TRACKED: Action = Action::Track(Allowing::Allow);

/// Connection `i`: a client of 10.0.0.0/8 (or, `spoofed`, of 100.64.0.0/10)
/// to 192.0.2.1:443.
pub(crate) fn conn(i: u32, spoofed: bool) -> FlowKey {
    let base = if spoofed { 0x6440_0000 } else { 0x0a00_0000 };
    let src = IpAddr::V4(Ipv4Addr::from(base + (i >> 4)));
    FlowKey::new(
        src,
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        6,
        1024 + (i & 15) as u16 * 4000,
        443,
    )
}

/// A table whose capacity is `pct` % of its filter's 4 × 2^`log2` slots.
pub(crate) fn table(log2: u32, bloom: bool, pct: usize) -> (ConnTable, usize) {
    let slots = 4usize << log2;
    let capacity = slots * pct / 100;
    let opts = Options {
        bloom,
        buckets_log2: Some(log2),
        ..Options::default()
    };
    let t = ConnTable::with_options(
        capacity,
        Timeouts::default(),
        HashSecret::from_seed(11),
        opts,
    )
    .expect("table");
    assert_eq!(
        t.filter_stats().buckets,
        1 << log2,
        "filter sized to the capacity"
    );
    (t, slots)
}

pub(crate) fn establish(t: &ConnTable, k: &FlowKey) {
    t.open(k, SYN, 1, TRACKED, 60, 0).expect("room");
    t.lookup(&k.reply(), SYN | ACK, 60, 0);
    t.lookup(k, ACK, 60, 0);
}

pub(crate) fn percentile(v: &[u64], p: f64) -> u64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}
