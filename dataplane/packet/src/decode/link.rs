//! Link layers: from a captured frame to the start of its IP header.
//!
//! Written by hand rather than with etherparse's link slicing because the
//! data plane needs what etherparse does not do: any number of 802.1Q /
//! 802.1ad tags (etherparse stops at three), MPLS label stacks, PPPoE
//! sessions, and the capture link types BSD NULL/LOOP and NFLOG. The IP
//! layer itself is decoded with etherparse (`ip.rs`).

use super::outcome::{Malformed, NonIp, L3};

/// Capture link types this decoder understands (pcap LINKTYPE_* values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkType {
    Ethernet,
    /// Linux "cooked" capture v1 (LINKTYPE_LINUX_SLL, 113).
    LinuxSll,
    /// Linux "cooked" capture v2 (LINKTYPE_LINUX_SLL2, 276).
    LinuxSll2,
    /// Raw IP, version from the first nibble (LINKTYPE_RAW 101, DLT 12/14).
    Raw,
    Ipv4,
    Ipv6,
    /// BSD loopback, address family in host byte order (0).
    Null,
    /// OpenBSD loopback, address family in network byte order (108).
    Loop,
    /// Linux netfilter log (239).
    Nflog,
    Other(u32),
}

impl LinkType {
    pub fn from_linktype(v: u32) -> Self {
        match v {
            1 => LinkType::Ethernet,
            113 => LinkType::LinuxSll,
            276 => LinkType::LinuxSll2,
            101 | 12 | 14 => LinkType::Raw,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            0 => LinkType::Null,
            108 => LinkType::Loop,
            239 => LinkType::Nflog,
            other => LinkType::Other(other),
        }
    }

    pub fn to_linktype(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::Raw => 101,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::Null => 0,
            LinkType::Loop => 108,
            LinkType::Nflog => 239,
            LinkType::Other(v) => v,
        }
    }
}

pub(crate) enum LinkResult {
    Ip(L3),
    NonIp(NonIp),
    Malformed(Malformed),
}

const ET_IPV4: u16 = 0x0800;
const ET_IPV6: u16 = 0x86dd;
const ET_VLAN: u16 = 0x8100;
const ET_QINQ: u16 = 0x88a8;
const ET_QINQ_OLD: u16 = 0x9100;
const ET_MPLS: u16 = 0x8847;
const ET_MPLS_MC: u16 = 0x8848;
const ET_PPPOE_SESSION: u16 = 0x8864;
const ET_ARP: u16 = 0x0806;

#[inline(always)]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Finds the IP header in `frame`.
pub(crate) fn locate_ip(link: LinkType, frame: &[u8]) -> LinkResult {
    match link {
        LinkType::Ethernet => match be16(frame, 12) {
            // The common frame, IP without a tag, without the tag walk.
            Some(ET_IPV4 | ET_IPV6) => ip_at(14),
            Some(et) => ether_payload(frame, 14, et, 0),
            None => LinkResult::Malformed(Malformed::LinkTruncated),
        },
        LinkType::LinuxSll => match be16(frame, 14) {
            Some(et) => ether_payload(frame, 16, et, 0),
            None => LinkResult::Malformed(Malformed::LinkTruncated),
        },
        LinkType::LinuxSll2 => match (be16(frame, 0), frame.len() >= 20) {
            (Some(et), true) => ether_payload(frame, 20, et, 0),
            _ => LinkResult::Malformed(Malformed::LinkTruncated),
        },
        LinkType::Raw => by_version(frame, 0),
        LinkType::Ipv4 | LinkType::Ipv6 => ip_at(0),
        LinkType::Null | LinkType::Loop => {
            let Some(b) = frame.get(..4) else {
                return LinkResult::Malformed(Malformed::LinkTruncated);
            };
            let af = if link == LinkType::Loop {
                u32::from_be_bytes([b[0], b[1], b[2], b[3]])
            } else {
                // Host order of the capturing machine: accept either.
                let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                if le < 256 {
                    le
                } else {
                    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
                }
            };
            match af {
                2 | 24 | 28 | 30 => ip_at(4),
                _ => LinkResult::NonIp(NonIp::OtherProtocol),
            }
        }
        LinkType::Nflog => nflog(frame),
        LinkType::Other(_) => LinkResult::NonIp(NonIp::UnsupportedLinkType),
    }
}

fn ip_at(offset: usize) -> LinkResult {
    LinkResult::Ip(L3 {
        offset,
        vlan_tags: 0,
        mpls: false,
        pppoe: false,
    })
}

/// IPv4 or IPv6 by the version nibble at `offset`.
fn by_version(frame: &[u8], offset: usize) -> LinkResult {
    match frame.get(offset).map(|b| b >> 4) {
        Some(4 | 6) => ip_at(offset),
        Some(_) => LinkResult::Malformed(Malformed::IpBadHeader),
        None => LinkResult::Malformed(Malformed::IpTruncated),
    }
}

/// Walks tags, MPLS and PPPoE from an EtherType at `off`.
fn ether_payload(frame: &[u8], mut off: usize, mut et: u16, mut tags: u16) -> LinkResult {
    let mut l3 = L3 {
        offset: 0,
        vlan_tags: 0,
        mpls: false,
        pppoe: false,
    };
    loop {
        match et {
            ET_IPV4 | ET_IPV6 => {
                l3.offset = off;
                l3.vlan_tags = tags;
                return LinkResult::Ip(l3);
            }
            ET_VLAN | ET_QINQ | ET_QINQ_OLD => match be16(frame, off + 2) {
                Some(next) => {
                    et = next;
                    off += 4;
                    tags = tags.saturating_add(1);
                }
                None => return LinkResult::Malformed(Malformed::LinkTruncated),
            },
            ET_MPLS | ET_MPLS_MC => {
                // Label stack entries of 4 bytes until bottom-of-stack; the
                // payload's protocol is not signalled: guess by IP version.
                loop {
                    let Some(&s) = frame.get(off + 2) else {
                        return LinkResult::Malformed(Malformed::LinkTruncated);
                    };
                    if frame.len() < off + 4 {
                        return LinkResult::Malformed(Malformed::LinkTruncated);
                    }
                    off += 4;
                    if s & 1 == 1 {
                        break;
                    }
                }
                l3.mpls = true;
                l3.vlan_tags = tags;
                return match frame.get(off).map(|b| b >> 4) {
                    Some(4 | 6) => {
                        l3.offset = off;
                        LinkResult::Ip(l3)
                    }
                    Some(_) => LinkResult::NonIp(NonIp::MplsNonIp),
                    None => LinkResult::Malformed(Malformed::LinkTruncated),
                };
            }
            ET_PPPOE_SESSION => {
                let Some(ppp) = be16(frame, off + 6) else {
                    return LinkResult::Malformed(Malformed::LinkTruncated);
                };
                off += 8;
                l3.pppoe = true;
                match ppp {
                    0x0021 => et = ET_IPV4,
                    0x0057 => et = ET_IPV6,
                    _ => return LinkResult::NonIp(NonIp::PppNonIp),
                }
            }
            ET_ARP => return LinkResult::NonIp(NonIp::Arp),
            x if x < 0x0600 => return LinkResult::NonIp(NonIp::Llc),
            _ => return LinkResult::NonIp(NonIp::OtherProtocol),
        }
    }
}

/// NFLOG: a 4-byte header, then TLVs (length and type in host byte order,
/// little-endian in practice); the packet is TLV type 9 (NFULA_PAYLOAD).
fn nflog(frame: &[u8]) -> LinkResult {
    let mut off = 4;
    if frame.len() < off {
        return LinkResult::Malformed(Malformed::LinkTruncated);
    }
    while off + 4 <= frame.len() {
        let len = usize::from(u16::from_le_bytes([frame[off], frame[off + 1]]));
        let ty = u16::from_le_bytes([frame[off + 2], frame[off + 3]]) & 0x7fff;
        if len < 4 {
            return LinkResult::Malformed(Malformed::LinkTruncated);
        }
        if ty == 9 {
            return by_version(frame, off + 4);
        }
        off += len.div_ceil(4) * 4;
    }
    LinkResult::NonIp(NonIp::OtherProtocol)
}
