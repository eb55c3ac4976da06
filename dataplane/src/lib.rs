//! # cfdp-dataplane — where packets enter
//!
//! Packet decoding (`decode`), the fragment table (`frag`), the published
//! rule tables (`tables`), rule matching through the concurrent filters
//! (`matcher`), the burst-processing worker (`worker`), the pcap replay
//! backend (`capture`, `replay`), run statistics (`stats`), and the control
//! plane that changes rules while packets flow (`control`). The `cfdp`
//! binary is in `main.rs`; `cfdp run` is `run.rs`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod capture;
pub mod control;
pub mod decode;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod frag;
pub mod gen;
pub mod matcher;
pub mod replay;
pub mod run;
pub mod stats;
pub mod tables;
pub mod worker;
