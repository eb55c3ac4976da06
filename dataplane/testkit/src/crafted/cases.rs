//! The lab's cases, IPv4 then IPv6: every kind the conntrack issue names,
//! the plain traffic around them, and fragments.

use super::lab::{conv, Host, Lab};
use super::wire::{Crafted, ACK, FIN, PSH, RST, SYN};

/// The lab's cases, IPv4 then IPv6: every kind the conntrack issue names
/// and the plain traffic around them.
pub fn lab_cases() -> Vec<Crafted> {
    let mut lab = Lab {
        frames: Vec::new(),
        serial: 0,
        v6: false,
        case: "",
        differs: None,
        delay_ms: 0,
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
    fragment_cases(l, p);
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

    // Wrong checksums: invalid (Linux's nf_conntrack_checksum): the
    // receiver would refuse the segment, so it must not end or move the
    // connection.
    l.case = "the exact RST from outside with a wrong checksum, then the server's data";
    l.tcp(&t, true, RST | ACK, t.next[1], t.next[0], &[], 0);
    l.spoil_checksum();
    l.seg(&mut t, true, ACK | PSH, 30);
    l.case = "data from outside with a wrong checksum";
    l.seg(&mut t, true, ACK | PSH, 40);
    l.spoil_checksum();
    l.case = "a SYN from inside with a wrong checksum, then a SYN-ACK";
    let mut bad = conv(A, p + 21, 80, 4_000_000);
    l.seg(&mut bad, false, SYN, 0);
    l.spoil_checksum();
    l.seg(&mut bad, true, SYN | ACK, 0);

    if !l.v6 {
        // IPv4 only: the wait is real time in the router (the table's
        // unit test has the timeout one tick either side).
        l.case =
            "a RST from outside in the window but not exact, then the server's data 11 s later";
        // Linux keeps ESTABLISHED (a challenge ACK may follow) but gives
        // the entry CLOSE's 10 s: the data finds no connection.
        let mut late = conv(A, p + 22, 80, 5_000_000);
        l.handshake(&mut late);
        l.seg(&mut late, false, ACK | PSH, 10);
        let inexact = late.next[1].wrapping_add(100);
        l.tcp(&late, true, RST | ACK, inexact, late.next[0], &[], 0);
        l.delay_ms = 11_000;
        l.seg(&mut late, true, ACK | PSH, 10);
    }

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

    sctp_cases(l, p);

    l.case = "another protocol: out and back, and unasked";
    l.raw(A, B, 253);
    l.raw(B, A, 253);
    l.raw(B, A, 254);

    // GRE: Linux tracks it with timeouts of its own (not the generic 600
    // s), keyed by the addresses for version 0. The waits are real time in
    // the router, with the lab's GRE timeout ([`GRE_TIMEOUT_S`]) on both
    // sides; one case a family.
    l.case = "GRE from outside, unasked";
    l.gre(B, C);
    if l.v6 {
        // Linux marks a connection answered after its first answer's
        // refresh, which takes the one-way timeout.
        l.case = "GRE out and answered once, then past the one-way timeout: the answer \
                  had the one-way timeout, the late packet finds nothing";
        l.gre(A, B);
        l.gre(B, A);
        l.delay_ms = GRE_TIMEOUT_S * 1000 + 500;
        l.gre(B, A);
    } else {
        l.case = "GRE out, answered, once more, and one way, then past the one-way \
                  timeout: the first lives on (the stream timeout), the other's late \
                  answer finds nothing";
        l.gre(C, B);
        l.gre(A, B);
        l.gre(B, A);
        l.gre(A, B);
        l.delay_ms = GRE_TIMEOUT_S * 1000 + 500;
        l.gre(B, A);
        l.gre(B, C);
    }
}

/// SCTP: an association set up from inside (INIT, INIT ACK, COOKIE ECHO,
/// COOKIE ACK) and data both ways, then data from outside between the
/// same two hosts on other ports. Linux tracks SCTP by its ports and
/// verification tags (`nf_conntrack_proto_sctp`); cfdp tracks it as a
/// generic protocol, by the addresses — a known difference.
fn sctp_cases(l: &mut Lab, p: u16) {
    use Host::*;
    const INIT: u8 = 1;
    const INIT_ACK: u8 = 2;
    const COOKIE_ECHO: u8 = 10;
    const COOKIE_ACK: u8 = 11;
    const DATA: u8 = 0;
    // A chunk: type, flags, length (the value's padding not counted).
    let chunk = |kind: u8, flags: u8, value: &[u8]| {
        let mut c = vec![kind, flags];
        c.extend_from_slice(&(4 + value.len() as u16).to_be_bytes());
        c.extend_from_slice(value);
        c.resize(c.len().next_multiple_of(4), 0);
        c
    };
    // INIT and INIT ACK: initiate tag, a_rwnd, streams out and in, TSN.
    let init = |tag: u32, cookie: bool| {
        let mut v = tag.to_be_bytes().to_vec();
        v.extend_from_slice(&65_536u32.to_be_bytes());
        v.extend_from_slice(&[0, 1, 0, 1]);
        v.extend_from_slice(&tag.wrapping_add(7).to_be_bytes());
        if cookie {
            // A State Cookie parameter (type 7), which an INIT ACK carries.
            v.extend_from_slice(&[0, 7, 0, 8, 0xc0, 0x0c, 0x1e, 0x5a]);
        }
        v
    };
    let data = |tsn: u32| {
        let mut v = tsn.to_be_bytes().to_vec();
        v.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        v.extend_from_slice(b"lab!");
        chunk(DATA, 0x03, &v)
    };
    let (a, b) = (0x1a2b_3c4d_u32, 0x5e6f_7a8b_u32);
    let (ours, theirs) = ((p + 40, 2905), (2905, p + 40));
    l.case = "SCTP: an association set up from inside, and data both ways";
    l.sctp(A, B, ours, 0, &chunk(INIT, 0, &init(a, false)));
    l.sctp(B, A, theirs, a, &chunk(INIT_ACK, 0, &init(b, true)));
    l.sctp(
        A,
        B,
        ours,
        b,
        &chunk(COOKIE_ECHO, 0, &[0xc0, 0x0c, 0x1e, 0x5a]),
    );
    l.sctp(B, A, theirs, a, &chunk(COOKIE_ACK, 0, &[]));
    l.sctp(A, B, ours, b, &data(a.wrapping_add(7)));
    l.sctp(B, A, theirs, a, &data(b.wrapping_add(7)));
    l.case = "SCTP from outside between the same hosts on other ports";
    l.differs = Some(
        "cfdp tracks SCTP as a generic protocol, by the addresses: another port pair \
         between two hosts with an association passes; Linux keys SCTP by its ports \
         (and checks its verification tags) — SCTP's tracker is not built",
    );
    l.sctp(B, A, (2906, p + 41), a, &data(b.wrapping_add(8)));
    l.differs = None;
}

/// The lab's GRE timeout for a flow seen one way (`nf_conntrack_gre_timeout`
/// in the router, `gre_unreplied_s` in cfdp; 30 s by default in both), so
/// that its case waits seconds, not half a minute.
pub const GRE_TIMEOUT_S: u32 = 3;

/// Fragments: UDP both ways in order and out of order, unasked from
/// outside, a TCP segment whose header is whole in its first fragment,
/// and one whose header is split.
fn fragment_cases(l: &mut Lab, p: u16) {
    use Host::*;
    l.case = "a UDP datagram from inside in three fragments, its answer in three";
    l.udp_len(A, B, p + 30, 7000, 600);
    l.fragment_last(&[256, 256], &[0, 1, 2]);
    l.udp_len(B, A, 7000, p + 30, 600);
    l.fragment_last(&[256, 256], &[0, 1, 2]);

    l.case = "an answer's fragments out of order: last, middle, first";
    l.udp_len(A, B, p + 31, 7000, 40);
    l.udp_len(B, A, 7000, p + 31, 600);
    l.fragment_last(&[256, 256], &[2, 1, 0]);

    l.case = "an answer whose second fragment overlaps its first";
    l.udp_len(A, B, p + 34, 7000, 40);
    l.udp_len(B, A, 7000, p + 34, 600);
    l.fragment_last_ranges(&[(0, 256), (128, 256), (384, 224)]);

    l.case = "an answer with a wrong UDP checksum, then the right one";
    l.udp_len(A, B, p + 35, 7000, 40);
    l.udp_len(B, A, 7000, p + 35, 40);
    l.spoil_checksum();
    l.udp_len(B, A, 7000, p + 35, 41);

    l.case = "a fragmented UDP datagram from outside, unasked";
    l.udp_len(B, A, 7000, p + 32, 600);
    l.fragment_last(&[256, 256], &[0, 1, 2]);

    l.case = "a TCP segment from outside in fragments, its header whole in the first";
    let mut t = conv(A, p + 33, 80, 3_000_000);
    l.handshake(&mut t);
    l.seg(&mut t, true, ACK | PSH, 600);
    l.fragment_last(&[256, 256], &[0, 1, 2]);
    l.seg(&mut t, false, ACK, 0);

    l.case = "a TCP segment from outside whose header is split: 8 bytes in the first fragment";
    if !l.v6 {
        // Linux's IPv6 drops such a first fragment (RFC 8200: the first
        // fragment holds every header through the upper-layer one), as
        // cfdp does; its IPv4 reassembles the datagram first.
        l.differs = Some(
            "a first fragment without its whole TCP header is dropped and counted \
             (RFC 1858), never opened or matched from part of a header; Linux's IPv4 \
             reassembles the datagram first (the conntrack issue allows either)",
        );
    }
    l.seg(&mut t, true, ACK | PSH, 600);
    l.fragment_last(&[8, 248], &[0, 1, 2]);
    l.differs = None;
}

#[cfg(test)]
mod tests {
    use super::super::wire::{crc32c, serial_of};
    use super::*;

    /// CRC32c's check value (RFC 3720 B.4's "123456789"), and an SCTP
    /// packet's: the lab's sums are the ones Linux checks.
    #[test]
    fn crc32c_gives_the_check_values() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0; 32]), 0x8a91_36aa);
    }

    #[test]
    fn every_datagram_has_its_own_serial_and_decodes() {
        let f = lab_cases();
        assert!(f.len() >= 40, "{}", f.len());
        let serials: Vec<u32> = f.iter().map(|c| serial_of(&c.frame).unwrap()).collect();
        assert_eq!(serials, f.iter().map(|c| c.serial).collect::<Vec<_>>());
        // Fragments of one datagram share its serial; no two datagrams do.
        let mut datagrams: Vec<(u32, &str)> = f.iter().map(|c| (c.serial, c.case)).collect();
        datagrams.dedup();
        let mut unique: Vec<u32> = datagrams.iter().map(|d| d.0).collect();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), datagrams.len());
        assert!(f.len() > datagrams.len(), "no fragmented datagram");
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
