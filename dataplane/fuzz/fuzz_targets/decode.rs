//! Any bytes as a frame of any link type: decode must not panic, and an IP
//! result must be self-consistent; nor must reading the transport facts
//! connection tracking asks for, which agree with the decoded protocol,
//! nor the checksum check; a fragment's place lies in the frame.
#![no_main]
use cfdp_packet::decode::{
    decode, decode_fast, transport, transport_checksum_ok, Decoded, Frag, LinkType, Transport,
};
use libfuzzer_sys::fuzz_target;

const LINKS: [u32; 10] = [1, 113, 276, 101, 228, 229, 0, 108, 239, 147];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let link = LinkType::from_linktype(LINKS[sel as usize % LINKS.len()]);
    let full = decode(link, frame);
    // The worker's fast path gives what decode gives, or nothing.
    if let Some(key) = decode_fast(link, frame) {
        match full {
            Decoded::Ip(p) => {
                assert_eq!(p.key, key);
                assert_eq!(p.frag, Frag::None);
                assert_eq!(p.anomaly, None);
            }
            other => panic!("fast path {key:?}, decode {other:?}"),
        }
    }
    let _ = transport_checksum_ok(link, frame);
    let facts = transport(link, frame);
    if let Transport::Tcp { .. } = facts {
        assert!(
            matches!(full, Decoded::Ip(p) if p.key.proto == 6),
            "{facts:?} {full:?}"
        );
    }
    if let Decoded::Ip(p) = full {
        assert!(p.l3.offset < frame.len());
        match p.frag {
            Frag::First { len, .. } => assert!(len as usize <= frame.len()),
            Frag::Later { off, len, .. } => {
                assert!(
                    off % 8 == 0 && off > 0 && len as usize <= frame.len(),
                    "{p:?}"
                )
            }
            _ => {}
        }
        if !matches!(p.key.proto, 6 | 17) {
            assert_eq!((p.key.sport, p.key.dport), (0, 0));
        }
    }
});
