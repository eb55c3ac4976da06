//! # cfdp-dataplane — where packets enter
//!
//! Packet decoding (`decode`), the fragment table (`frag`), rule matching
//! through the concurrent filters (`matcher`), the burst-processing worker
//! (`worker`), the pcap replay backend (`pcap`) and run statistics
//! (`stats`). The `cfdp` binary is in `main.rs`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod capture;
pub mod decode;
pub mod frag;
pub mod gen;
pub mod matcher;
pub mod replay;
pub mod run;
pub mod stats;
pub mod worker;
