//! # cfdp-packet — what a frame says
//!
//! Parsing apart from behaviour: [`decode()`] turns a frame of any supported
//! link type into its outer 5-tuple ([`cfdp_rules::FlowKey`]), a non-IP
//! kind or a malformation, without allocating and without panicking; the
//! fragment table ([`frag`]) gives later fragments the ports of their first
//! fragment; [`prefetch`] hints a frame's first cache line into L1 before a
//! burst is decoded (the l3fwd pattern). Nothing here knows about rules'
//! actions, tables or backends: the engine does.
//!
//! The fuzz target `decode` (in `dataplane/fuzz`) feeds [`decode()`] any bytes.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod decode;
pub mod frag;
pub mod prefetch;

pub use decode::{
    decode, decode_fast, transport, transport_checksum_ok, Decoded, Frag, IpPacket, LinkType,
    Malformed, NonIp, TcpSeg, Transport, L3,
};
