//! `[conntrack]`: the table's size and, under `[conntrack.timeouts]`, how
//! long each state lasts (Linux's defaults; see [`Timeouts`]).

use cfdp_rules::HashSecret;
use serde::{Deserialize, Serialize};

use crate::state::Timeouts;
use crate::table::ConnTable;

/// The `[conntrack]` section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConntrackSection {
    /// Connections at most (Linux's `nf_conntrack_max` on a small host).
    /// The table is allocated for it at start: a 104-byte slot a
    /// connection plus a margin (1.4 slots a connection at the default,
    /// 1.1 at a million) and the filter's ~4 bytes an entry.
    pub capacity: usize,
    /// Count each connection's packets and bytes both ways and keep its
    /// opening time (`cfdp ctl conns` shows them): 40 bytes more a slot.
    /// Off by default, as Linux's `nf_conntrack_acct` is.
    pub accounting: bool,
    /// Linux's `nf_conntrack_tcp_be_liberal`: no segment is out of window
    /// (a RST before the other side's highest acknowledgement is still
    /// invalid, as in Linux 6.x; its documentation's "only out of window
    /// RST segments are invalid" is older than its code). Off by default,
    /// as in Linux.
    pub tcp_be_liberal: bool,
    /// Linux's `nf_conntrack_tcp_loose`: pick up a TCP connection from a
    /// segment other than a SYN — after a restart, a failover or a full
    /// table — tracked liberally (on by default, as in Linux).
    pub tcp_loose: bool,
    /// Linux's `nf_conntrack_checksum`: a packet whose TCP, UDP, ICMP or
    /// ICMPv6 checksum is wrong is invalid — it meets the rules alone and
    /// moves no connection (on by default, as in Linux; a replay of a
    /// capture taken on a host that offloads checksums to its NIC shows
    /// wrong ones on every packet it sent: turn it off for such
    /// captures).
    pub checksum: bool,
    pub timeouts: Timeouts,
}

impl Default for ConntrackSection {
    fn default() -> Self {
        Self {
            capacity: 65_536,
            accounting: false,
            tcp_be_liberal: false,
            tcp_loose: true,
            checksum: true,
            timeouts: Timeouts::default(),
        }
    }
}

/// A `[conntrack]` value refused: the key, the value, what it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadSetting {
    pub key: &'static str,
    pub value: u64,
    pub need: &'static str,
}

/// The most connections a table takes: the filter's entries index at most
/// [`crate::table::MAX_SLOTS`] slots, and 2^22 connections with their
/// margin are 4.4 M slots (246 MB).
pub const MAX_CAPACITY: usize = 1 << 22;

impl ConntrackSection {
    /// Every value checked: a capacity of 1..=[`MAX_CAPACITY`], timeouts
    /// of at least a second.
    pub fn check(&self) -> Result<(), BadSetting> {
        if !(1..=MAX_CAPACITY).contains(&self.capacity) {
            return Err(BadSetting {
                key: "capacity",
                value: self.capacity as u64,
                need: "1 to 4194304 connections",
            });
        }
        let t = &self.timeouts;
        for (key, value) in [
            ("timeouts.tcp_syn_sent_s", t.tcp_syn_sent_s),
            ("timeouts.tcp_syn_recv_s", t.tcp_syn_recv_s),
            ("timeouts.tcp_established_s", t.tcp_established_s),
            ("timeouts.tcp_fin_wait_s", t.tcp_fin_wait_s),
            ("timeouts.tcp_close_wait_s", t.tcp_close_wait_s),
            ("timeouts.tcp_last_ack_s", t.tcp_last_ack_s),
            ("timeouts.tcp_time_wait_s", t.tcp_time_wait_s),
            ("timeouts.tcp_close_s", t.tcp_close_s),
            ("timeouts.udp_unreplied_s", t.udp_unreplied_s),
            ("timeouts.udp_replied_s", t.udp_replied_s),
            ("timeouts.icmp_s", t.icmp_s),
            ("timeouts.gre_unreplied_s", t.gre_unreplied_s),
            ("timeouts.gre_replied_s", t.gre_replied_s),
            ("timeouts.generic_s", t.generic_s),
            ("timeouts.tcp_unacknowledged_s", t.tcp_unacknowledged_s),
        ] {
            if value == 0 {
                return Err(BadSetting {
                    key,
                    value,
                    need: "at least 1 second",
                });
            }
        }
        Ok(())
    }
}

impl ConntrackSection {
    /// The table this section describes, keyed by `secret` (checked first).
    pub fn table(&self, secret: HashSecret) -> Result<ConnTable, BadSetting> {
        self.check()?;
        let opts = crate::table::Options {
            accounting: self.accounting,
            tcp: crate::tcp::TcpSettings {
                be_liberal: self.tcp_be_liberal,
                loose: self.tcp_loose,
                ..crate::tcp::TcpSettings::default()
            },
            checksum: self.checksum,
            ..crate::table::Options::default()
        };
        ConnTable::with_options(self.capacity, self.timeouts.clone(), secret, opts).map_err(|_| {
            BadSetting {
                key: "capacity",
                value: self.capacity as u64,
                need: "a size the connection table's filter can take",
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_are_refused_by_name() {
        assert_eq!(ConntrackSection::default().check(), Ok(()));
        let mut s = ConntrackSection::default();
        s.timeouts.udp_replied_s = 0;
        assert_eq!(s.check().unwrap_err().key, "timeouts.udp_replied_s");
        let s = ConntrackSection {
            capacity: 0,
            ..ConntrackSection::default()
        };
        assert_eq!(s.check().unwrap_err().key, "capacity");
    }
}
