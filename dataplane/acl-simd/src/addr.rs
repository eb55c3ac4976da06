//! What the engine's code, generic over an address family, names: the
//! family's block and key types and the kernel's calls on them.

use std::fmt::Debug;
use std::ops::BitAnd;

use crate::block::{Block, Key, Rule, Words, LANES};
use crate::kernel::Kernel;

/// An address family's word as the kernel takes it: how many 32-bit
/// words it is, and its block and key types.
pub trait Addr: Copy + Eq + BitAnd<Output = Self> + 'static {
    /// [`Block`] with this family's words.
    type Block: Copy + Debug + Default + PartialEq + Send + Sync + 'static;
    /// [`Key`] with this family's words.
    type Key: Copy + Debug;
    /// A block of up to [`LANES`] rules, lane `i` rule `i`; `None` if
    /// there are more, or a rule's mask is not a prefix's (a block keeps
    /// each word's mask as a shift, see [`crate::Block`]).
    fn block(rules: &[Rule<Self>]) -> Option<Self::Block>;
    /// A packet's key.
    fn key(src: Self, dst: Self, sport: u16, dport: u16, proto: u32) -> Self::Key;
    /// The callers' numbers of a block's rules.
    fn idx(b: &Self::Block) -> &[u32; LANES];
    /// Lane `i`'s rule as it was put in (its addresses masked), for a lane
    /// that holds one.
    fn rule(b: &Self::Block, i: usize) -> Rule<Self>;
    /// Bit `i` set when lane `i`'s rule of `b` matches `k`, by the
    /// kernel's version `kernel`.
    fn matches(kernel: Kernel, b: &Self::Block, k: &Self::Key) -> u32;
}

macro_rules! addr {
    ($word:ty, $n:literal) => {
        impl Addr for $word {
            type Block = Block<$n>;
            type Key = Key<$n>;
            fn block(rules: &[Rule<Self>]) -> Option<Block<$n>> {
                Block::of(rules)
            }
            #[inline(always)]
            fn key(src: Self, dst: Self, sport: u16, dport: u16, proto: u32) -> Key<$n> {
                Key {
                    src: src.words(),
                    dst: dst.words(),
                    ports: (u32::from(sport) << 16) | u32::from(dport),
                    proto,
                }
            }
            #[inline(always)]
            fn idx(b: &Block<$n>) -> &[u32; LANES] {
                &b.idx
            }
            #[inline(always)]
            fn matches(kernel: Kernel, b: &Block<$n>, k: &Key<$n>) -> u32 {
                kernel.matches(b, k)
            }
            fn rule(b: &Block<$n>, i: usize) -> Rule<Self> {
                b.rule(i)
            }
        }
    };
}
addr!(u32, 1);
addr!(u128, 4);
