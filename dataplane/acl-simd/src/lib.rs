//! The classifier's leaf kernel: a leaf's rules laid out column by column
//! ([`Block`]: eight rules, struct of arrays), and one packet checked
//! against all eight at once — eight masked compares on each address
//! word, eight range checks on both ports in 16-bit lanes, eight protocol
//! compares — giving a bit per matching rule, with no branch that depends
//! on the data. The caller takes the lowest set bit it still wants (the
//! rules are in rank order) instead of scanning rule by rule, where every
//! rule cost a branch the CPU could not predict.
//!
//! Both address families: an address is `N` 32-bit words a lane (1 for
//! IPv4, 4 for IPv6), the same code over `N` ([`Addr`] maps `u32` and
//! `u128` to theirs).
//!
//! Three versions give the same bits: AVX-512 (VL and BW: compares that
//! write mask registers), AVX2 (compares into vectors, then `movemask`),
//! and portable Rust for every other CPU. [`Kernel::best`] picks one at
//! run time (`is_x86_feature_detected!`); a [`Kernel`] can only name a
//! version the CPU runs, which is what makes calling it safe.
//!
//! With AVX-512 the crate also walks a burst's IPv4 lanes down the tree
//! ([`Kernel::walk`], `walk.rs`): sixteen lanes a level with two gathers,
//! two groups of sixteen overlapped, chosen where the CPU's gathers are
//! fast ([`Kernel::best`]).
//!
//! This crate is apart from `cfdp-engine` (which forbids `unsafe`)
//! because vector loads take raw pointers and a function compiled for a
//! target feature is `unsafe` to call: the unsafe is here, small, and
//! argued at each use.

#![deny(unsafe_code)]

mod addr;
mod block;
mod kernel;
mod walk;

pub use addr::Addr;
pub use block::{Block, Key, Rule, LANES, PROTO_ANY};
pub use kernel::Kernel;
pub use walk::{
    walk_portable, Row, Start, Step, CELL_NODE_BITS, KID_BITS, LEAF_FIELD, RIGHT, WALK_LANES,
};
