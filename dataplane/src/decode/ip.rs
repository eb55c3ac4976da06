//! The IP layer, decoded with etherparse's lax slicing (it tolerates a bad
//! IPv4 total length or IPv6 payload length by using the captured length,
//! as a capture tool does), and the transport ports.

use cfdp_rules::{proto, FlowKey};
use etherparse::err::ip::LaxHeaderSliceError;
use etherparse::{Ipv6ExtensionSlice, LaxIpSlice};

use super::{Decoded, Frag, IpPacket, Malformed, L3};

pub(crate) fn decode_ip(frame: &[u8], l3: L3) -> Decoded {
    let Some(slice) = frame.get(l3.offset..) else {
        return Decoded::Malformed(Malformed::IpTruncated);
    };
    let (ip, ext_err) = match LaxIpSlice::from_slice(slice) {
        Ok(ok) => ok,
        Err(LaxHeaderSliceError::Len(_)) => return Decoded::Malformed(Malformed::IpTruncated),
        Err(LaxHeaderSliceError::Content(_)) => return Decoded::Malformed(Malformed::IpBadHeader),
    };
    let mut anomaly = ext_err.map(|_| Malformed::IpExtTruncated);
    let (mut key, frag, payload) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            let id = u32::from(h.identification());
            let frag = if h.is_fragmenting_payload() {
                if h.fragments_offset().value() == 0 {
                    Frag::First { id }
                } else {
                    Frag::Later { id }
                }
            } else {
                Frag::None
            };
            let p = v4.payload();
            let key = FlowKey::v4(h.source(), h.destination(), p.ip_number.0, 0, 0);
            (key, frag, p.payload)
        }
        LaxIpSlice::Ipv6(v6) => {
            let h = v6.header();
            let mut frag = Frag::None;
            for ext in v6.extensions().clone().into_iter() {
                if let Ipv6ExtensionSlice::Fragment(f) = ext {
                    if f.is_fragmenting_payload() {
                        let id = f.identification();
                        frag = if f.fragment_offset().value() == 0 {
                            Frag::First { id }
                        } else {
                            Frag::Later { id }
                        };
                    }
                }
            }
            let p = v6.payload();
            let key = FlowKey::v6(h.source(), h.destination(), p.ip_number.0, 0, 0);
            (key, frag, p.payload)
        }
    };
    if (key.proto == proto::TCP || key.proto == proto::UDP) && !matches!(frag, Frag::Later { .. }) {
        // TCP and UDP both start with source and destination port; reading
        // them directly also serves first fragments, whose transport header
        // etherparse does not slice.
        match payload.get(..4) {
            Some(p) => {
                key.sport = u16::from_be_bytes([p[0], p[1]]);
                key.dport = u16::from_be_bytes([p[2], p[3]]);
            }
            None => anomaly = anomaly.or(Some(Malformed::TransportTruncated)),
        }
    }
    Decoded::Ip(IpPacket {
        key,
        frag,
        l3,
        anomaly,
    })
}
