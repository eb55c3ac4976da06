//! Crafted packets for connection tracking's truth test: frames between an
//! inside host A and an outside host B (and a bystander C inside), IPv4
//! and IPv6, that a stateful firewall must judge as Linux's conntrack
//! does — handshakes with window scaling, blind resets in and out of the
//! window, injected data, ICMP errors to the right and the wrong host,
//! echo requests the wrong way, invalid flag combinations, mid-stream
//! pickup, simultaneous open, reuse after TIME_WAIT, ICMP queries, other
//! protocols, fragments (in order, reversed, a TCP header split).
//!
//! Every frame carries a serial number where a router keeps it (the IPv4
//! identification, the IPv6 flow label), so that the frames that come out
//! of cfdp and out of a Linux router can be compared as sets — of
//! datagrams: fragments share their datagram's serial ([`delivered`]). No
//! verdicts are written here: Linux is the truth (a case where cfdp
//! answers otherwise by choice says so and why: `Crafted::differs`)
//! (`dataplane/cli/tests/linux_lab.rs` sends the frames through a router
//! namespace with nftables, and through `cfdp replay`).

mod cases;
mod lab;
mod wire;

pub use cases::{lab_cases, GRE_TIMEOUT_S};
pub use wire::{
    delivered, load_nftables, serial_of, Crafted, A4, A6, B4, B6, C4, C6, LAB_RULES, MAC_A, MAC_B,
    MAC_C, MAC_RA, MAC_RB,
};
pub use wire::{ACK, FIN, PSH, RST, SYN};
