//! Crafted packets for connection tracking's truth test: frames between an
//! inside host A and an outside host B (and a bystander C inside), IPv4
//! and IPv6, that a stateful firewall must judge as Linux's conntrack
//! does — handshakes with window scaling, blind resets in and out of the
//! window, injected data, ICMP errors to the right and the wrong host,
//! echo requests the wrong way, invalid flag combinations, mid-stream
//! pickup, simultaneous open, reuse after TIME_WAIT, other protocols.
//!
//! Every frame carries a serial number where a router keeps it (the IPv4
//! identification, the IPv6 flow label), so that the frames that come out
//! of cfdp and out of a Linux router can be compared as sets. No
//! expectations are written here: Linux is the truth
//! (`dataplane/cli/tests/linux_lab.rs` sends the frames through a router
//! namespace with nftables, and through `cfdp replay`).

use etherparse::{IpNumber, PacketBuilder, TcpHeader, TcpOptionElement};

/// MAC addresses: the hosts', and the router's port on each side.
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0x4f, 1, 2];
pub const MAC_C: [u8; 6] = [0x02, 0, 0, 0x4f, 1, 3];
pub const MAC_RA: [u8; 6] = [0x02, 0, 0, 0x4f, 1, 1];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0x4f, 2, 2];
pub const MAC_RB: [u8; 6] = [0x02, 0, 0, 0x4f, 2, 1];

pub const A4: [u8; 4] = [10, 79, 1, 2];
pub const C4: [u8; 4] = [10, 79, 1, 3];
pub const B4: [u8; 4] = [10, 79, 2, 2];
pub const A6: [u8; 16] = [0xfd, 0, 0, 0x79, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
pub const C6: [u8; 16] = [0xfd, 0, 0, 0x79, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
pub const B6: [u8; 16] = [0xfd, 0, 0, 0x79, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// The inside may open anything (stateful); the rest is dropped: what
/// `ct state established,related accept; iifname inside accept; policy
/// drop` says in nftables.
pub const LAB_RULES: &str = r#"{"rules": [
  {"id": 1, "priority": 10, "match": {"src_prefix": "10.79.1.0/24"}, "action": "allow", "track": true},
  {"id": 2, "priority": 10, "match": {"src_prefix": "fd00:79:1::/64"}, "action": "allow", "track": true},
  {"id": 9, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"},
  {"id": 10, "priority": 1, "match": {"src_prefix": "::/0"}, "action": "drop"}
]}"#;

/// Loads `ruleset` (nftables syntax) into network namespace `ns`, as
/// `ip netns exec NS nft -f -`: the Linux routers of the lab tests.
pub fn load_nftables(ns: &str, ruleset: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut nft = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("ip netns exec nft");
    nft.stdin
        .take()
        .expect("nft's stdin")
        .write_all(ruleset.as_bytes())
        .expect("write the ruleset");
    assert!(nft.wait().expect("nft").success(), "nft -f");
}

/// One crafted frame: which side sends it, its bytes, its serial and what
/// case it belongs to.
#[derive(Clone, Debug)]
pub struct Crafted {
    pub inside: bool,
    pub frame: Vec<u8>,
    pub serial: u32,
    pub case: &'static str,
}

/// The serial a frame carries (IPv4 identification, IPv6 flow label), if
/// it is an Ethernet IPv4 or IPv6 frame.
pub fn serial_of(frame: &[u8]) -> Option<u32> {
    match frame.get(12..14)? {
        [0x08, 0x00] => Some(u32::from(u16::from_be_bytes([
            *frame.get(18)?,
            *frame.get(19)?,
        ]))),
        [0x86, 0xdd] => {
            let b = frame.get(14..18)?;
            Some(u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]]))
        }
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Host {
    A,
    B,
    C,
}

struct Lab {
    frames: Vec<Crafted>,
    serial: u32,
    v6: bool,
    case: &'static str,
}

/// TCP flag bits.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// A TCP conversation between A (or C) and B: each side's next sequence
/// number.
struct Tcp {
    inner: Host,
    sport: u16,
    dport: u16,
    /// Next sequence number from the inside host, from B.
    next: [u32; 2],
    /// The window each side announces (unscaled), inside host first.
    win: [u16; 2],
    /// Whether SYNs carry options (MSS, SACK permitted, window scale 7).
    options: bool,
}

impl Lab {
    fn addr(&self, h: Host) -> Vec<u8> {
        match (h, self.v6) {
            (Host::A, false) => A4.to_vec(),
            (Host::B, false) => B4.to_vec(),
            (Host::C, false) => C4.to_vec(),
            (Host::A, true) => A6.to_vec(),
            (Host::B, true) => B6.to_vec(),
            (Host::C, true) => C6.to_vec(),
        }
    }

    /// A frame from `from` to `to` whose IP payload is `proto` and `l4`
    /// (checksums computed by etherparse).
    fn ip(&mut self, from: Host, to: Host, build: impl FnOnce(Builder) -> Vec<u8>) {
        self.serial += 1;
        let inside = !matches!(from, Host::B);
        let (smac, dmac) = match from {
            Host::A => (MAC_A, MAC_RA),
            Host::C => (MAC_C, MAC_RA),
            Host::B => (MAC_B, MAC_RB),
        };
        let eth = PacketBuilder::ethernet2(smac, dmac);
        let serial = self.serial;
        let b = if self.v6 {
            let mut h = etherparse::Ipv6Header {
                source: self.addr(from).try_into().unwrap(),
                destination: self.addr(to).try_into().unwrap(),
                hop_limit: 64,
                ..Default::default()
            };
            h.flow_label = etherparse::Ipv6FlowLabel::try_new(serial).unwrap();
            eth.ip(etherparse::IpHeaders::Ipv6(h, Default::default()))
        } else {
            let mut h = etherparse::Ipv4Header::new(
                0,
                64,
                IpNumber(0),
                self.addr(from).try_into().unwrap(),
                self.addr(to).try_into().unwrap(),
            )
            .unwrap();
            h.identification = serial as u16;
            eth.ip(etherparse::IpHeaders::Ipv4(h, Default::default()))
        };
        let frame = build(b);
        self.frames.push(Crafted {
            inside,
            frame,
            serial,
            case: self.case,
        });
    }

    #[allow(clippy::too_many_arguments)] // a segment's fields, as on the wire
    fn tcp(
        &mut self,
        t: &Tcp,
        from_b: bool,
        flags: u8,
        seq: u32,
        ack: u32,
        opts: &[TcpOptionElement],
        len: usize,
    ) {
        let (from, to, sp, dp) = if from_b {
            (Host::B, t.inner, t.dport, t.sport)
        } else {
            (t.inner, Host::B, t.sport, t.dport)
        };
        let mut h = TcpHeader::new(sp, dp, seq, t.win[usize::from(from_b)]);
        h.fin = flags & FIN != 0;
        h.syn = flags & SYN != 0;
        h.rst = flags & RST != 0;
        h.psh = flags & PSH != 0;
        h.ack = flags & ACK != 0;
        h.acknowledgment_number = if h.ack { ack } else { 0 };
        h.set_options(opts).unwrap();
        let payload = vec![0x61u8; len];
        self.ip(from, to, |b| {
            let mut out = Vec::new();
            b.tcp_header(h).write(&mut out, &payload).unwrap();
            out
        });
    }

    /// An in-window segment of `t` from one side: its numbers follow.
    fn seg(&mut self, t: &mut Tcp, from_b: bool, flags: u8, len: usize) {
        let s = usize::from(from_b);
        let (seq, ack) = (t.next[s], t.next[1 - s]);
        let opts: &[TcpOptionElement] = if flags & SYN != 0 && t.options {
            &[
                TcpOptionElement::MaximumSegmentSize(1460),
                TcpOptionElement::SelectiveAcknowledgementPermitted,
                TcpOptionElement::Noop,
                TcpOptionElement::WindowScale(7),
            ]
        } else {
            &[]
        };
        self.tcp(t, from_b, flags, seq, ack, opts, len);
        t.next[s] = seq
            .wrapping_add(len as u32)
            .wrapping_add(u32::from(flags & (SYN | FIN) != 0));
    }

    fn handshake(&mut self, t: &mut Tcp) {
        self.seg(t, false, SYN, 0);
        self.seg(t, true, SYN | ACK, 0);
        self.seg(t, false, ACK, 0);
    }

    fn udp(&mut self, from: Host, to: Host, sp: u16, dp: u16) {
        self.ip(from, to, |b| {
            let mut out = Vec::new();
            b.udp(sp, dp).write(&mut out, b"lab").unwrap();
            out
        });
    }

    fn echo(&mut self, from: Host, to: Host, request: bool, id: u16, seq: u16) {
        let v6 = self.v6;
        self.ip(from, to, |b| {
            let mut out = Vec::new();
            match (v6, request) {
                (false, true) => b.icmpv4_echo_request(id, seq).write(&mut out, b"ping"),
                (false, false) => b.icmpv4_echo_reply(id, seq).write(&mut out, b"ping"),
                (true, true) => b.icmpv6_echo_request(id, seq).write(&mut out, b"ping"),
                (true, false) => b.icmpv6_echo_reply(id, seq).write(&mut out, b"ping"),
            }
            .unwrap();
            out
        });
    }

    /// An ICMP (ICMPv6) message of type `kind` and code `code` whose
    /// bytes 4..8 are identifier `id` and sequence number 1: a query or
    /// its answer other than the echo builders'.
    fn icmp(&mut self, from: Host, to: Host, kind: u8, code: u8, id: u16) {
        let v6 = self.v6;
        let [a, b] = id.to_be_bytes();
        let bytes5to8 = [a, b, 0, 1];
        self.ip(from, to, |bld| {
            let mut out = Vec::new();
            if v6 {
                bld.icmpv6(etherparse::Icmpv6Type::Unknown {
                    type_u8: kind,
                    code_u8: code,
                    bytes5to8,
                })
                .write(&mut out, &[0; 12])
            } else {
                bld.icmpv4(etherparse::Icmpv4Type::Unknown {
                    type_u8: kind,
                    code_u8: code,
                    bytes5to8,
                })
                .write(&mut out, &[0; 12])
            }
            .unwrap();
            out
        });
    }

    /// A port unreachable that B sends to `to`, quoting a UDP datagram
    /// from `quoted_src` (port `sp`) to B (port `dp`).
    fn unreachable(&mut self, to: Host, quoted_src: Host, sp: u16, dp: u16) {
        let (src, dst) = (self.addr(quoted_src), self.addr(Host::B));
        let mut quote = Vec::new();
        if self.v6 {
            PacketBuilder::ipv6(src.try_into().unwrap(), dst.try_into().unwrap(), 63)
                .udp(sp, dp)
                .write(&mut quote, b"lab")
                .unwrap();
        } else {
            PacketBuilder::ipv4(src.try_into().unwrap(), dst.try_into().unwrap(), 63)
                .udp(sp, dp)
                .write(&mut quote, b"lab")
                .unwrap();
        }
        let v6 = self.v6;
        self.ip(Host::B, to, |b| {
            let mut out = Vec::new();
            if v6 {
                b.icmpv6(etherparse::Icmpv6Type::DestinationUnreachable(
                    etherparse::icmpv6::DestUnreachableCode::Port,
                ))
                .write(&mut out, &quote)
                .unwrap();
            } else {
                b.icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
                    etherparse::icmpv4::DestUnreachableHeader::Port,
                ))
                .write(&mut out, &quote)
                .unwrap();
            }
            out
        });
    }

    /// IPv6: a UDP datagram behind a destination options header (its
    /// checksum computed by hand: etherparse does not build the chain),
    /// then B's port unreachable quoting it, extension header included.
    fn udp_with_options_and_its_error(&mut self, sp: u16, dp: u16) {
        let (src, dst) = (self.addr(Host::A), self.addr(Host::B));
        let mut udp = Vec::new();
        udp.extend_from_slice(&sp.to_be_bytes());
        udp.extend_from_slice(&dp.to_be_bytes());
        udp.extend_from_slice(&11u16.to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(b"lab");
        let mut sum = 0u32;
        let mut add = |b: &[u8]| {
            for c in b.chunks(2) {
                sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
            }
        };
        add(&src);
        add(&dst);
        add(&[0, 0, 0, 11, 0, 0, 0, 17]);
        add(&udp);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let c = !(sum as u16);
        udp[6..8].copy_from_slice(&if c == 0 { 0xffff } else { c }.to_be_bytes());
        // Destination options: next header UDP, 8 bytes, a PadN of 4.
        let mut payload = vec![17, 0, 1, 4, 0, 0, 0, 0];
        payload.extend_from_slice(&udp);
        self.ip(Host::A, Host::B, |b| {
            let mut out = Vec::new();
            b.write(&mut out, IpNumber(60), &payload).unwrap();
            out
        });
        let quote = self.frames.last().expect("just sent").frame[14..].to_vec();
        self.ip(Host::B, Host::A, |b| {
            let mut out = Vec::new();
            b.icmpv6(etherparse::Icmpv6Type::DestinationUnreachable(
                etherparse::icmpv6::DestUnreachableCode::Port,
            ))
            .write(&mut out, &quote)
            .unwrap();
            out
        });
    }

    fn raw(&mut self, from: Host, to: Host, proto: u8) {
        self.ip(from, to, |b| {
            let mut out = Vec::new();
            b.write(&mut out, IpNumber(proto), b"opaque payload")
                .unwrap();
            out
        });
    }
}

type Builder = etherparse::PacketBuilderStep<etherparse::IpHeaders>;

fn conv(inner: Host, sport: u16, dport: u16, isn: u32) -> Tcp {
    Tcp {
        inner,
        sport,
        dport,
        next: [isn, isn.wrapping_mul(7).wrapping_add(0x1234_5678)],
        win: [29_200; 2],
        options: true,
    }
}

/// The lab's cases, IPv4 then IPv6: every kind the conntrack issue names
/// and the plain traffic around them.
pub fn lab_cases() -> Vec<Crafted> {
    let mut lab = Lab {
        frames: Vec::new(),
        serial: 0,
        v6: false,
        case: "",
    };
    for v6 in [false, true] {
        lab.v6 = v6;
        let base = if v6 { 6000 } else { 4000 };
        cases(&mut lab, base);
    }
    lab.frames
}

fn cases(l: &mut Lab, p: u16) {
    window_cases(l, p);
    flag_and_state_cases(l, p);
    other_cases(l, p);
}

/// The window: a handshake, blind resets, injected data, unseen ACKs, the
/// exact RST.
fn window_cases(l: &mut Lab, p: u16) {
    use Host::*;
    l.case = "a handshake with window scaling and data each way";
    let mut t = conv(A, p + 1, 80, 1_000_000);
    l.handshake(&mut t);
    l.seg(&mut t, false, ACK | PSH, 300);
    l.seg(&mut t, true, ACK | PSH, 1200);
    l.seg(&mut t, false, ACK, 0);

    l.case = "a blind RST from outside, 2^30 out of the window, then the server's data";
    let far = t.next[1].wrapping_add(1 << 30);
    l.tcp(&t, true, RST, far, 0, &[], 0);
    l.seg(&mut t, true, ACK | PSH, 100);

    l.case = "data injected from outside far beyond the window";
    l.tcp(&t, true, ACK | PSH, far, t.next[0], &[], 100);

    l.case = "an out-of-window RST from inside (the rules let it out), then data";
    let far_in = t.next[0].wrapping_add(1 << 30);
    l.tcp(&t, false, RST, far_in, 0, &[], 0);
    l.seg(&mut t, true, ACK | PSH, 50);

    l.case = "an ACK from outside for data never sent";
    l.tcp(
        &t,
        true,
        ACK,
        t.next[1],
        t.next[0].wrapping_add(5_000_000),
        &[],
        0,
    );

    l.case = "zero-window ACKs from inside, then data from outside past the window they left";
    // No window scaling; the inside host announces 100 bytes. Its
    // zero-window ACKs must not move the server's upper bound (Linux
    // moves it only when ACK + window passes it), so that 150 bytes
    // starting one past it overshoot the inside host's largest window
    // (100) and are invalid.
    let mut zw = conv(A, p + 20, 80, 2_000_000);
    (zw.win, zw.options) = ([100, 29_200], false);
    l.handshake(&mut zw);
    l.seg(&mut zw, true, ACK | PSH, 50);
    zw.win[0] = 0;
    for _ in 0..3 {
        l.tcp(&zw, false, ACK, zw.next[0], zw.next[1], &[], 0);
    }
    let past = zw.next[1].wrapping_add(51);
    l.tcp(&zw, true, ACK | PSH, past, zw.next[0], &[], 150);

    l.case = "the exact RST from outside closes; the server's late data";
    let (s1, a1) = (t.next[1], t.next[0]);
    l.tcp(&t, true, RST | ACK, s1, a1, &[], 0);
    l.tcp(&t, true, ACK | PSH, s1, a1, &[], 20);
}

/// Flags and states: invalid combinations, pickup, simultaneous open,
/// answers in the wrong state, reuse after TIME_WAIT.
fn flag_and_state_cases(l: &mut Lab, p: u16) {
    use Host::*;
    l.case = "SYN+FIN from inside opens nothing; the answer is dropped";
    let mut sf = conv(A, p + 2, 80, 50_000);
    l.tcp(&sf, false, SYN | FIN, sf.next[0], 0, &[], 0);
    sf.next[0] += 2;
    l.seg(&mut sf, true, SYN | ACK, 0);

    l.case = "a bare FIN and a segment without flags from inside";
    let nf = conv(A, p + 3, 80, 70_000);
    l.tcp(&nf, false, FIN, nf.next[0], 0, &[], 0);
    l.tcp(&nf, false, 0, nf.next[0], 0, &[], 10);
    l.tcp(&nf, true, ACK, nf.next[1], nf.next[0], &[], 0);

    l.case = "mid-stream pickup: an inside ACK with no entry, then the answer";
    let mut pk = conv(A, p + 4, 443, 90_000);
    l.seg(&mut pk, false, ACK | PSH, 100);
    l.seg(&mut pk, true, ACK | PSH, 200);
    l.seg(&mut pk, false, ACK, 0);

    l.case = "a picked-up connection (liberal both ways): a RST from outside 2^30 out of the window, then data";
    let far = pk.next[1].wrapping_add(1 << 30);
    l.tcp(&pk, true, RST | ACK, far, pk.next[0], &[], 0);
    l.seg(&mut pk, true, ACK | PSH, 20);

    l.case = "an unsolicited ACK from outside";
    let mut un = conv(A, p + 5, 443, 110_000);
    l.seg(&mut un, true, ACK | PSH, 100);

    l.case = "simultaneous open, then data from outside";
    let mut so = conv(A, p + 6, 6000, 130_000);
    l.seg(&mut so, false, SYN, 0);
    // B's SYN crosses A's: its own sequence number, no ACK.
    l.tcp(&so, true, SYN, so.next[1], 0, &[], 0);
    so.next[1] = so.next[1].wrapping_add(1);
    l.tcp(
        &so,
        false,
        SYN | ACK,
        so.next[0].wrapping_sub(1),
        so.next[1],
        &[],
        0,
    );
    l.tcp(
        &so,
        true,
        SYN | ACK,
        so.next[1].wrapping_sub(1),
        so.next[0],
        &[],
        0,
    );
    l.seg(&mut so, true, ACK, 0);
    l.seg(&mut so, true, ACK | PSH, 10);

    l.case = "a reply SYN-ACK in ESTABLISHED, a reply FIN in SYN_SENT";
    let mut re = conv(A, p + 7, 80, 150_000);
    l.handshake(&mut re);
    l.tcp(
        &re,
        true,
        SYN | ACK,
        re.next[1].wrapping_sub(1),
        re.next[0],
        &[],
        0,
    );
    let mut fs = conv(A, p + 8, 80, 170_000);
    l.seg(&mut fs, false, SYN, 0);
    l.tcp(&fs, true, FIN | ACK, fs.next[1], fs.next[0], &[], 0);

    l.case = "a full close, then the port used again by a new SYN";
    let mut tw = conv(A, p + 9, 80, 190_000);
    l.handshake(&mut tw);
    l.seg(&mut tw, false, FIN | ACK, 0);
    l.seg(&mut tw, true, ACK, 0);
    l.seg(&mut tw, true, FIN | ACK, 0);
    l.seg(&mut tw, false, ACK, 0);
    let mut again = conv(A, p + 9, 80, 900_000);
    l.handshake(&mut again);
    l.seg(&mut again, true, ACK | PSH, 10);
}

/// UDP, ICMP errors and echo, another protocol.
fn other_cases(l: &mut Lab, p: u16) {
    use Host::*;
    l.case = "UDP asked and answered, and from outside unasked";
    l.udp(A, B, p + 10, 53);
    l.udp(B, A, 53, p + 10);
    l.udp(B, A, 53, p + 11);

    l.case = "ICMP errors about a tracked flow: to its sender, to a bystander";
    l.udp(A, B, p + 12, 5353);
    l.unreachable(A, A, p + 12, 5353);
    l.unreachable(C, A, p + 12, 5353);
    l.unreachable(C, C, p + 12, 5353);

    l.case = "echo: request and reply; a request back with the same identifier";
    l.echo(A, B, true, p, 1);
    l.echo(B, A, false, p, 1);
    l.echo(B, A, true, p, 2);

    // Linux tracks every ICMP query by its type pair, code and identifier.
    let (request, reply) = if l.v6 { (139, 140) } else { (13, 14) };
    l.case = "a timestamp (ICMPv6: node information) query and its reply; one from outside unasked";
    l.icmp(A, B, request, 0, p + 1);
    l.icmp(B, A, reply, 0, p + 1);
    l.icmp(B, A, request, 0, p + 2);

    l.case = "an echo reply whose code is not its request's, then the right one";
    l.echo(A, B, true, p + 3, 1);
    l.icmp(B, A, if l.v6 { 129 } else { 0 }, 1, p + 3);
    l.echo(B, A, false, p + 3, 1);

    if l.v6 {
        l.case = "a datagram with a destination options header, and its ICMPv6 error";
        l.udp_with_options_and_its_error(p + 13, 5353);
    }

    l.case = "another protocol: out and back, and unasked";
    l.raw(A, B, 253);
    l.raw(B, A, 253);
    l.raw(B, A, 254);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_has_its_own_serial_and_decodes() {
        let f = lab_cases();
        assert!(f.len() >= 40, "{}", f.len());
        let mut serials: Vec<u32> = f.iter().map(|c| serial_of(&c.frame).unwrap()).collect();
        assert_eq!(serials, f.iter().map(|c| c.serial).collect::<Vec<_>>());
        serials.dedup();
        assert_eq!(serials.len(), f.len());
        for c in &f {
            assert!(
                etherparse::SlicedPacket::from_ethernet(&c.frame).is_ok(),
                "{}",
                c.case
            );
        }
        assert!(f.iter().any(|c| c.frame[12..14] == [0x86, 0xdd]));
    }
}
