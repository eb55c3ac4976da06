//! Connection states and what a packet does to them, with Linux's names
//! and default timeouts (`nf_conntrack_tcp_timeout_*`,
//! `nf_conntrack_udp_timeout[_stream]`, `nf_conntrack_icmp_timeout`).
//!
//! TCP follows the flags only: a connection opens on a SYN, is
//! established once the reply's SYN-ACK has been answered by an ACK, and
//! closes on a FIN each way or a RST. **Not checked**, unlike Linux:
//! sequence and acknowledgement numbers against the window (Linux marks
//! out-of-window segments invalid), window scaling, and which side a
//! RST comes from; a RST in either direction closes the connection.

use serde::{Deserialize, Serialize};

use crate::key::Dir;

/// TCP flag bits as the header carries them.
pub mod tcp {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const ACK: u8 = 0x10;
}

/// A connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// The opener's SYN seen, no answer yet (embryonic).
    TcpSynSent,
    /// The reply's SYN-ACK seen.
    TcpSynRecv,
    /// The handshake's last ACK seen.
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
    /// UDP: a reply seen (Linux's "stream" timeout, assured).
    UdpReplied,
    /// ICMP echo: a request, no reply yet.
    IcmpUnreplied,
    /// ICMP echo: a reply seen.
    IcmpReplied,
}

impl State {
    pub const ALL: [State; 12] = [
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
            State::UdpUnreplied => "UDP_UNREPLIED",
            State::UdpReplied => "UDP_REPLIED",
            State::IcmpUnreplied => "ICMP_UNREPLIED",
            State::IcmpReplied => "ICMP_REPLIED",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether no answer has been seen yet: such an entry may be dropped
    /// to make room for a new connection when the table is full (Linux's
    /// early drop of unassured entries); no other ever is.
    pub fn embryonic(self) -> bool {
        matches!(
            self,
            State::TcpSynSent | State::UdpUnreplied | State::IcmpUnreplied
        )
    }

    /// The state a connection opens in for its first packet, if that packet
    /// may open one: a TCP SYN without ACK or RST, any UDP datagram, an
    /// ICMP echo request (the caller says which; `icmp_echo`).
    pub fn open(proto: u8, tcp_flags: u8, icmp_echo: bool) -> Option<State> {
        match proto {
            cfdp_rules::flow::proto::TCP => {
                let syn_only = tcp_flags & (tcp::SYN | tcp::ACK | tcp::RST) == tcp::SYN;
                syn_only.then_some(State::TcpSynSent)
            }
            cfdp_rules::flow::proto::UDP => Some(State::UdpUnreplied),
            _ if icmp_echo => Some(State::IcmpUnreplied),
            _ => None,
        }
    }

    /// The state after a packet going `dir` with `tcp_flags` (0 for
    /// other protocols). `fin` holds which directions have sent a FIN
    /// (bit 0: original, bit 1: reply) and is updated with it.
    pub fn next(self, dir: Dir, tcp_flags: u8, fin: &mut u8) -> State {
        use State::*;
        let has = |f: u8| tcp_flags & f == f;
        match self {
            UdpUnreplied if dir == Dir::Reply => return UdpReplied,
            IcmpUnreplied if dir == Dir::Reply => return IcmpReplied,
            UdpUnreplied | UdpReplied | IcmpUnreplied | IcmpReplied => return self,
            _ => {}
        }
        if has(tcp::RST) {
            return TcpClose;
        }
        let me = 1u8 << dir.index();
        // A new SYN from the opener on a closed connection opens it again
        // (a port reused after TIME_WAIT), as Linux does.
        if matches!(self, TcpTimeWait | TcpClose)
            && dir == Dir::Orig
            && tcp_flags & (tcp::SYN | tcp::ACK) == tcp::SYN
        {
            *fin = 0;
            return TcpSynSent;
        }
        if has(tcp::FIN) {
            *fin |= me;
            return match self {
                TcpSynSent | TcpSynRecv | TcpEstablished if *fin != 3 => TcpFinWait,
                TcpTimeWait | TcpClose => self,
                _ if *fin == 3 => TcpLastAck,
                _ => self,
            };
        }
        match self {
            TcpSynSent if dir == Dir::Reply && has(tcp::SYN | tcp::ACK) => TcpSynRecv,
            TcpSynRecv if dir == Dir::Orig && has(tcp::ACK) && !has(tcp::SYN) => TcpEstablished,
            // The side that did not send the FIN acknowledges it.
            TcpFinWait if has(tcp::ACK) && *fin & me == 0 => TcpCloseWait,
            TcpLastAck if has(tcp::ACK) => TcpTimeWait,
            s => s,
        }
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
    pub udp_replied_s: u64,
    pub icmp_s: u64,
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
        }
    }
}

impl Timeouts {
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
            State::UdpUnreplied => self.udp_unreplied_s,
            State::UdpReplied => self.udp_replied_s,
            State::IcmpUnreplied | State::IcmpReplied => self.icmp_s,
        };
        secs.saturating_mul(1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::tcp::{ACK, FIN, RST, SYN};
    use super::*;
    use Dir::{Orig, Reply};

    /// Walks `steps` from the state a SYN opens, returning each state.
    fn walk(steps: &[(Dir, u8)]) -> Vec<State> {
        let mut s = State::open(6, SYN, false).unwrap();
        let mut fin = 0;
        steps
            .iter()
            .map(|&(d, f)| {
                s = s.next(d, f, &mut fin);
                s
            })
            .collect()
    }

    #[test]
    fn a_tcp_connection_opens_and_closes_as_linux_names_it() {
        use State::*;
        assert_eq!(
            walk(&[
                (Orig, SYN),
                (Reply, SYN | ACK),
                (Orig, ACK),
                (Orig, ACK),
                (Orig, FIN | ACK),
                (Reply, ACK),
                (Reply, FIN | ACK),
                (Orig, ACK),
            ]),
            [
                TcpSynSent,
                TcpSynRecv,
                TcpEstablished,
                TcpEstablished,
                TcpFinWait,
                TcpCloseWait,
                TcpLastAck,
                TcpTimeWait
            ]
        );
        // The server closes first; a RST ends it at once; a new SYN
        // opens the pair again.
        assert_eq!(
            walk(&[
                (Reply, SYN | ACK),
                (Orig, ACK),
                (Reply, FIN | ACK),
                (Orig, ACK),
                (Orig, RST),
                (Reply, ACK),
                (Orig, SYN),
            ]),
            [
                TcpSynRecv,
                TcpEstablished,
                TcpFinWait,
                TcpCloseWait,
                TcpClose,
                TcpClose,
                TcpSynSent
            ]
        );
    }

    #[test]
    fn an_unanswered_or_reflected_syn_does_not_establish() {
        use State::*;
        // The opener's own ACK before any SYN-ACK; a SYN-ACK from the
        // opener's side; the reply's ACK: all leave it embryonic.
        assert_eq!(
            walk(&[(Orig, ACK), (Orig, SYN | ACK), (Reply, ACK)]),
            [TcpSynSent, TcpSynSent, TcpSynSent]
        );
        assert!(TcpSynSent.embryonic() && !TcpEstablished.embryonic());
        // Only a bare SYN opens a TCP connection.
        assert_eq!(State::open(6, SYN | ACK, false), None);
        assert_eq!(State::open(6, ACK, false), None);
        assert_eq!(State::open(6, SYN | RST, false), None);
        assert_eq!(State::open(1, 0, false), None);
        assert_eq!(State::open(1, 0, true), Some(IcmpUnreplied));
    }

    #[test]
    fn udp_and_icmp_are_replied_once_an_answer_comes() {
        use State::*;
        let mut fin = 0;
        let s = State::open(17, 0, false).unwrap();
        assert_eq!(s, UdpUnreplied);
        assert_eq!(s.next(Orig, 0, &mut fin), UdpUnreplied);
        assert_eq!(s.next(Reply, 0, &mut fin), UdpReplied);
        assert_eq!(IcmpUnreplied.next(Reply, 0, &mut fin), IcmpReplied);
        let t = Timeouts::default();
        assert_eq!(t.of(UdpUnreplied), 30_000_000_000);
        assert_eq!(t.of(UdpReplied), 120_000_000_000);
        assert_eq!(t.of(TcpEstablished), 432_000 * 1_000_000_000);
    }
}
