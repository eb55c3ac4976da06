//! Connection states and what a packet does to them, with Linux's names
//! and default timeouts (`nf_conntrack_tcp_timeout_*`,
//! `nf_conntrack_udp_timeout[_stream]`, `nf_conntrack_icmp_timeout`,
//! `nf_conntrack_gre_timeout[_stream]`, `nf_conntrack_generic_timeout`).
//!
//! TCP's states move as Linux's `tcp_conntracks` table and its window
//! checks say ([`crate::tcp`]); UDP, ICMP echo and other protocols here:
//! UDP is replied once an answer came and a stream once it is still
//! carrying traffic two seconds after it opened (Linux's 30 s timeout
//! until then, 120 s after); ICMP echo is replied once the echo reply came;
//! GRE is replied once traffic came back and a stream (assured) from the
//! packet after (Linux's `nf_conntrack_proto_gre` refreshes with 30 s
//! until it has seen a reply, with 180 s after — and a connection has
//! seen a reply only after its first reply's refresh); any other protocol
//! is one state with the generic timeout.

use serde::{Deserialize, Serialize};

use crate::key::Dir;

/// TCP flag bits as the header carries them.
pub mod tcp {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// GRE's protocol number: tracked with states of its own, as Linux does.
pub const GRE: u8 = 47;

/// How long a UDP connection must live, with an answer, before it is a
/// stream (Linux's `stream_ts`, two seconds after it opened).
pub const UDP_STREAM_AFTER_NS: u64 = 2_000_000_000;

/// A connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// The opener's SYN seen, no answer yet (embryonic).
    TcpSynSent,
    /// The reply's SYN-ACK seen.
    TcpSynRecv,
    /// The handshake's last ACK seen (or picked up mid-stream).
    TcpEstablished,
    /// One side sent a FIN.
    TcpFinWait,
    /// The other side acknowledged it and has not closed yet.
    TcpCloseWait,
    /// Both sides sent a FIN; the last one awaits its ACK.
    TcpLastAck,
    /// Both FINs acknowledged.
    TcpTimeWait,
    /// A RST was seen.
    TcpClose,
    /// UDP: packets one way only (embryonic).
    UdpUnreplied,
    /// UDP: an answer seen, less than two seconds after the opening
    /// (Linux's 30 s timeout still; not assured).
    UdpReplied,
    /// ICMP echo: a request, no reply yet.
    IcmpUnreplied,
    /// ICMP echo: a reply seen.
    IcmpReplied,
    /// TCP: the answer to the opener's SYN was a SYN (simultaneous open).
    TcpSynSent2,
    /// UDP: answered, and still carrying traffic two seconds after it
    /// opened (Linux's stream timeout; assured).
    UdpStream,
    /// Any other protocol, tracked by its addresses (Linux's generic
    /// tracker).
    Generic,
    /// GRE: packets one way only (Linux's `GRE_CT_UNREPLIED` timeout).
    /// Keyed by the addresses, as Linux keys GRE version 0; Linux keys
    /// PPTP's enhanced GRE (version 1) by its call IDs too, cfdp does not.
    GreUnreplied,
    /// GRE: the first answer seen — Linux refreshed it with the one-way
    /// timeout still (it marks the connection answered after the refresh).
    GreReplied,
    /// GRE: a packet after an answer (Linux's `GRE_CT_REPLIED`, the
    /// stream timeout; assured).
    GreStream,
}

impl State {
    /// Every state, by [`Self::index`] (in the order saved tables number
    /// them: a new state goes at the end).
    pub const ALL: [State; 18] = [
        State::TcpSynSent,
        State::TcpSynRecv,
        State::TcpEstablished,
        State::TcpFinWait,
        State::TcpCloseWait,
        State::TcpLastAck,
        State::TcpTimeWait,
        State::TcpClose,
        State::UdpUnreplied,
        State::UdpReplied,
        State::IcmpUnreplied,
        State::IcmpReplied,
        State::TcpSynSent2,
        State::UdpStream,
        State::Generic,
        State::GreUnreplied,
        State::GreReplied,
        State::GreStream,
    ];

    /// Linux's name for it (`conntrack -L` prints these).
    pub fn name(self) -> &'static str {
        match self {
            State::TcpSynSent => "SYN_SENT",
            State::TcpSynRecv => "SYN_RECV",
            State::TcpEstablished => "ESTABLISHED",
            State::TcpFinWait => "FIN_WAIT",
            State::TcpCloseWait => "CLOSE_WAIT",
            State::TcpLastAck => "LAST_ACK",
            State::TcpTimeWait => "TIME_WAIT",
            State::TcpClose => "CLOSE",
            State::TcpSynSent2 => "SYN_SENT2",
            State::UdpUnreplied => "UDP_UNREPLIED",
            State::UdpReplied => "UDP_REPLIED",
            State::UdpStream => "UDP_STREAM",
            State::IcmpUnreplied => "ICMP_UNREPLIED",
            State::IcmpReplied => "ICMP_REPLIED",
            State::Generic => "GENERIC",
            State::GreUnreplied => "GRE_UNREPLIED",
            State::GreReplied => "GRE_REPLIED",
            State::GreStream => "GRE_STREAM",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn is_tcp(self) -> bool {
        matches!(
            self,
            State::TcpSynSent
                | State::TcpSynRecv
                | State::TcpEstablished
                | State::TcpFinWait
                | State::TcpCloseWait
                | State::TcpLastAck
                | State::TcpTimeWait
                | State::TcpClose
                | State::TcpSynSent2
        )
    }

    /// A TCP connection on its way out: Linux's early drop takes these
    /// even when assured (`tcp_can_early_drop`).
    pub fn closing(self) -> bool {
        matches!(
            self,
            State::TcpFinWait
                | State::TcpCloseWait
                | State::TcpLastAck
                | State::TcpTimeWait
                | State::TcpClose
        )
    }

    /// Whether no answer has been seen yet.
    pub fn embryonic(self) -> bool {
        matches!(
            self,
            State::TcpSynSent
                | State::TcpSynSent2
                | State::UdpUnreplied
                | State::IcmpUnreplied
                | State::GreUnreplied
        )
    }

    /// The state a connection of protocol `proto` other than TCP opens
    /// in, if its first packet may open one: any UDP datagram, an ICMP or
    /// ICMPv6 echo request (`icmp_echo`), any packet of another protocol
    /// (Linux's generic tracking; GRE its own). TCP opens through
    /// [`crate::tcp::open`].
    pub fn open(proto: u8, icmp_echo: bool) -> Option<State> {
        match proto {
            cfdp_rules::flow::proto::TCP => None,
            cfdp_rules::flow::proto::UDP => Some(State::UdpUnreplied),
            1 | 58 => icmp_echo.then_some(State::IcmpUnreplied),
            GRE => Some(State::GreUnreplied),
            _ => Some(State::Generic),
        }
    }

    /// The state of a connection other than TCP after a packet going
    /// `dir`, `age_ns` after the connection opened. (TCP moves through
    /// [`crate::tcp::packet`]; a TCP state is returned as it is.)
    pub fn next(self, dir: Dir, age_ns: u64) -> State {
        use State::*;
        match self {
            UdpUnreplied if dir == Dir::Reply => UdpReplied,
            UdpReplied if age_ns > UDP_STREAM_AFTER_NS => UdpStream,
            IcmpUnreplied if dir == Dir::Reply => IcmpReplied,
            GreUnreplied if dir == Dir::Reply => GreReplied,
            GreReplied => GreStream,
            s => s,
        }
    }

    /// Whether reaching this state makes a connection assured (never
    /// early-dropped): a UDP or GRE stream (TCP says so itself).
    pub fn assures(self) -> bool {
        matches!(self, State::UdpStream | State::GreStream)
    }
}

/// How long a connection lives in each state after its last packet, in
/// seconds: the `[conntrack]` section of the configuration, with Linux's
/// defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    pub tcp_syn_sent_s: u64,
    pub tcp_syn_recv_s: u64,
    pub tcp_established_s: u64,
    pub tcp_fin_wait_s: u64,
    pub tcp_close_wait_s: u64,
    pub tcp_last_ack_s: u64,
    pub tcp_time_wait_s: u64,
    pub tcp_close_s: u64,
    pub udp_unreplied_s: u64,
    /// UDP's stream timeout (Linux's `nf_conntrack_udp_timeout_stream`):
    /// a connection answered and still carrying traffic two seconds after
    /// it opened. Before then an answered connection keeps
    /// `udp_unreplied_s`, as Linux's does.
    pub udp_replied_s: u64,
    pub icmp_s: u64,
    /// GRE one way only, and after its first answer (Linux's
    /// `nf_conntrack_gre_timeout`).
    pub gre_unreplied_s: u64,
    /// GRE from the packet after its first answer on (Linux's
    /// `nf_conntrack_gre_timeout_stream`).
    pub gre_replied_s: u64,
    /// Other protocols (Linux's `nf_conntrack_generic_timeout`).
    pub generic_s: u64,
    /// The cap on a TCP connection's timeout while data is unacknowledged,
    /// after three retransmissions, or picked up mid-stream without an
    /// answer (Linux's `nf_conntrack_tcp_timeout_unacknowledged` and
    /// `_max_retrans`, both 300 s).
    pub tcp_unacknowledged_s: u64,
}

impl Default for Timeouts {
    /// Linux's defaults (6.x): `sysctl net.netfilter`.
    fn default() -> Self {
        Self {
            tcp_syn_sent_s: 120,
            tcp_syn_recv_s: 60,
            tcp_established_s: 432_000,
            tcp_fin_wait_s: 120,
            tcp_close_wait_s: 60,
            tcp_last_ack_s: 30,
            tcp_time_wait_s: 120,
            tcp_close_s: 10,
            udp_unreplied_s: 30,
            udp_replied_s: 120,
            icmp_s: 30,
            gre_unreplied_s: 30,
            gre_replied_s: 180,
            generic_s: 600,
            tcp_unacknowledged_s: 300,
        }
    }
}

impl Timeouts {
    /// The timeout of `s` in nanoseconds when capped (unacknowledged
    /// data, retransmissions): the smaller of its own and the cap.
    pub fn capped(&self, s: State) -> u64 {
        self.of(s)
            .min(self.tcp_unacknowledged_s.saturating_mul(1_000_000_000))
    }

    /// The timeout of `s` in nanoseconds.
    pub fn of(&self, s: State) -> u64 {
        let secs = match s {
            State::TcpSynSent => self.tcp_syn_sent_s,
            State::TcpSynRecv => self.tcp_syn_recv_s,
            State::TcpEstablished => self.tcp_established_s,
            State::TcpFinWait => self.tcp_fin_wait_s,
            State::TcpCloseWait => self.tcp_close_wait_s,
            State::TcpLastAck => self.tcp_last_ack_s,
            State::TcpTimeWait => self.tcp_time_wait_s,
            State::TcpClose => self.tcp_close_s,
            State::TcpSynSent2 => self.tcp_syn_sent_s,
            State::UdpUnreplied | State::UdpReplied => self.udp_unreplied_s,
            State::UdpStream => self.udp_replied_s,
            State::IcmpUnreplied | State::IcmpReplied => self.icmp_s,
            State::Generic => self.generic_s,
            State::GreUnreplied | State::GreReplied => self.gre_unreplied_s,
            State::GreStream => self.gre_replied_s,
        };
        secs.saturating_mul(1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dir::{Orig, Reply};

    #[test]
    fn udp_is_a_stream_only_after_two_seconds_and_icmp_once_replied() {
        use State::*;
        let s = State::open(17, false).unwrap();
        assert_eq!(s, UdpUnreplied);
        assert_eq!(s.next(Orig, 5_000_000_000), UdpUnreplied);
        let r = s.next(Reply, 100);
        assert_eq!(r, UdpReplied);
        // One tick either side of the two seconds.
        assert_eq!(r.next(Orig, UDP_STREAM_AFTER_NS), UdpReplied);
        assert_eq!(r.next(Orig, UDP_STREAM_AFTER_NS + 1), UdpStream);
        assert_eq!(IcmpUnreplied.next(Reply, 0), IcmpReplied);
        assert_eq!(State::open(1, false), None);
        assert_eq!(State::open(58, true), Some(IcmpUnreplied));
        assert_eq!(State::open(50, false), Some(Generic));
        // GRE: replied once traffic came back, a stream (assured) from
        // the packet after, either way.
        let g = State::open(47, false).unwrap();
        assert_eq!((g, g.embryonic(), g.assures()), (GreUnreplied, true, false));
        assert_eq!(g.next(Orig, 10_000_000_000), GreUnreplied);
        let g = g.next(Reply, 0);
        assert_eq!((g, g.embryonic(), g.assures()), (GreReplied, false, false));
        for dir in [Orig, Reply] {
            let s = g.next(dir, 0);
            assert_eq!((s, s.assures()), (GreStream, true));
            assert_eq!(s.next(dir, 0), GreStream);
        }
        assert_eq!(State::open(6, false), None);
        let t = Timeouts::default();
        assert_eq!(t.of(UdpUnreplied), 30_000_000_000);
        assert_eq!(t.of(UdpReplied), 30_000_000_000);
        assert_eq!(t.of(UdpStream), 120_000_000_000);
        assert_eq!(t.of(Generic), 600_000_000_000);
        assert_eq!(t.of(GreUnreplied), 30_000_000_000);
        assert_eq!(t.of(GreReplied), 30_000_000_000);
        assert_eq!(t.of(GreStream), 180_000_000_000);
        assert_eq!(t.of(TcpEstablished), 432_000 * 1_000_000_000);
        assert_eq!(t.capped(TcpEstablished), 300_000_000_000);
        assert_eq!(t.capped(TcpSynSent), 120_000_000_000);
    }
}
