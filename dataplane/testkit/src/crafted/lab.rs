//! The lab's frame builder: hosts, TCP conversations, and the frames a
//! case sends.

use etherparse::{IpNumber, PacketBuilder, TcpHeader, TcpOptionElement};

use super::wire::{
    crc32c, split, split_ranges, Crafted, A4, A6, ACK, B4, B6, C4, C6, FIN, MAC_A, MAC_B, MAC_C,
    MAC_RA, MAC_RB, PSH, RST, SYN,
};

#[derive(Clone, Copy)]
pub(super) enum Host {
    A,
    B,
    C,
}

pub(super) struct Lab {
    pub(super) frames: Vec<Crafted>,
    pub(super) serial: u32,
    pub(super) v6: bool,
    pub(super) case: &'static str,
    pub(super) differs: Option<&'static str>,
    /// The wait before the next frame, in milliseconds.
    pub(super) delay_ms: u32,
}

/// A TCP conversation between A (or C) and B: each side's next sequence
/// number.
pub(super) struct Tcp {
    pub(super) inner: Host,
    pub(super) sport: u16,
    pub(super) dport: u16,
    /// Next sequence number from the inside host, from B.
    pub(super) next: [u32; 2],
    /// The window each side announces (unscaled), inside host first.
    pub(super) win: [u16; 2],
    /// Whether SYNs carry options (MSS, SACK permitted, window scale 7).
    pub(super) options: bool,
}

impl Lab {
    pub(super) fn addr(&self, h: Host) -> Vec<u8> {
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
    pub(super) fn ip(&mut self, from: Host, to: Host, build: impl FnOnce(Builder) -> Vec<u8>) {
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
            differs: self.differs,
            delay_ms: std::mem::take(&mut self.delay_ms),
        });
    }

    #[allow(clippy::too_many_arguments)] // a segment's fields, as on the wire
    pub(super) fn tcp(
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
    pub(super) fn seg(&mut self, t: &mut Tcp, from_b: bool, flags: u8, len: usize) {
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

    pub(super) fn handshake(&mut self, t: &mut Tcp) {
        self.seg(t, false, SYN, 0);
        self.seg(t, true, SYN | ACK, 0);
        self.seg(t, false, ACK, 0);
    }

    pub(super) fn udp(&mut self, from: Host, to: Host, sp: u16, dp: u16) {
        self.ip(from, to, |b| {
            let mut out = Vec::new();
            b.udp(sp, dp).write(&mut out, b"lab").unwrap();
            out
        });
    }

    pub(super) fn echo(&mut self, from: Host, to: Host, request: bool, id: u16, seq: u16) {
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
    pub(super) fn icmp(&mut self, from: Host, to: Host, kind: u8, code: u8, id: u16) {
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
    pub(super) fn unreachable(&mut self, to: Host, quoted_src: Host, sp: u16, dp: u16) {
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
    pub(super) fn udp_with_options_and_its_error(&mut self, sp: u16, dp: u16) {
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

    /// A GRE (version 0) packet carrying a few bytes of an IPv4 packet.
    pub(super) fn gre(&mut self, from: Host, to: Host) {
        let gre = [0, 0, 0x08, 0x00, 0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17];
        self.payload(from, to, 47, &gre);
    }

    /// An SCTP packet: its common header (ports, verification tag
    /// `vtag`) and `chunks`, with its CRC32c (Linux's conntrack checks it,
    /// as it checks TCP's and UDP's checksums).
    pub(super) fn sctp(
        &mut self,
        from: Host,
        to: Host,
        ports: (u16, u16),
        vtag: u32,
        chunks: &[u8],
    ) {
        let mut packet = Vec::with_capacity(12 + chunks.len());
        packet.extend_from_slice(&ports.0.to_be_bytes());
        packet.extend_from_slice(&ports.1.to_be_bytes());
        packet.extend_from_slice(&vtag.to_be_bytes());
        packet.extend_from_slice(&[0; 4]);
        packet.extend_from_slice(chunks);
        let sum = crc32c(&packet);
        packet[8..12].copy_from_slice(&sum.to_le_bytes());
        self.payload(from, to, 132, &packet);
    }

    pub(super) fn raw(&mut self, from: Host, to: Host, proto: u8) {
        self.payload(from, to, proto, b"opaque payload");
    }

    /// A frame whose IP payload is protocol `proto`'s `bytes`, as they are.
    fn payload(&mut self, from: Host, to: Host, proto: u8, bytes: &[u8]) {
        self.ip(from, to, |b| {
            let mut out = Vec::new();
            b.write(&mut out, IpNumber(proto), bytes).unwrap();
            out
        });
    }
}

pub(super) type Builder = etherparse::PacketBuilderStep<etherparse::IpHeaders>;

pub(super) fn conv(inner: Host, sport: u16, dport: u16, isn: u32) -> Tcp {
    Tcp {
        inner,
        sport,
        dport,
        next: [isn, isn.wrapping_mul(7).wrapping_add(0x1234_5678)],
        win: [29_200; 2],
        options: true,
    }
}

impl Lab {
    /// A UDP datagram with `len` bytes of payload.
    pub(super) fn udp_len(&mut self, from: Host, to: Host, sp: u16, dp: u16, len: usize) {
        self.ip(from, to, |b| {
            let mut out = Vec::new();
            b.udp(sp, dp).write(&mut out, &vec![0x5a; len]).unwrap();
            out
        });
    }

    /// Replaces the last frame with its fragments — pieces of `sizes`
    /// bytes of its IP payload (multiples of 8), then the rest — sent in
    /// `order` (indices of the pieces). They keep the frame's serial.
    pub(super) fn fragment_last(&mut self, sizes: &[usize], order: &[usize]) {
        let whole = self.frames.pop().expect("a frame to fragment");
        let pieces = split(&whole.frame, sizes, whole.serial);
        for &i in order {
            self.frames.push(super::Crafted {
                frame: pieces[i].clone(),
                ..whole.clone()
            });
        }
    }

    /// Makes the last frame's transport checksum wrong: its last byte (in
    /// its transport segment: the frames carry no padding) flipped.
    pub(super) fn spoil_checksum(&mut self) {
        let f = self.frames.last_mut().expect("a frame");
        let last = f.frame.len() - 1;
        f.frame[last] ^= 0x5a;
    }

    /// Replaces the last frame with fragments carrying the byte ranges
    /// `(offset, length)` of its IP payload, in that order (they may
    /// overlap).
    pub(super) fn fragment_last_ranges(&mut self, ranges: &[(usize, usize)]) {
        let whole = self.frames.pop().expect("a frame to fragment");
        for frame in split_ranges(&whole.frame, ranges, whole.serial) {
            self.frames.push(super::Crafted {
                frame,
                ..whole.clone()
            });
        }
    }
}
