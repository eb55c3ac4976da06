//! An address as one machine word, and a packet's fields as the tuple
//! space and the cuts compare them.

use std::ops::BitAnd;

use cfdp_rules::FlowKey;

/// Leading address bits that index the cut arrays (see `cuts`).
pub const CUT_BITS: u32 = 12;

/// An address as one machine word: `u32` for IPv4, `u128` for IPv6. The
/// compiled layer keeps every field of a packet in this width (ports and
/// protocol too), so one tree walk compares one kind of number.
pub trait Word:
    Copy
    + Ord
    + BitAnd<Output = Self>
    + std::ops::BitOr<Output = Self>
    + std::ops::BitXor<Output = Self>
    + Default
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
    + cfdp_acl_simd::Addr
{
    /// The family: IPv6's word.
    const V6: bool;
    const MAX: Self;
    fn of(a: &[u8; 16]) -> Self;
    /// The address's bytes, as [`Self::of`] reads them (IPv4 in the first
    /// four, the rest zero).
    fn bytes(self) -> [u8; 16];
    fn from_u32(x: u32) -> Self;
    /// The next value, if any.
    fn inc(self) -> Option<Self>;
    /// The value before (`self` > 0).
    fn dec(self) -> Self;
    /// The first `len` bits.
    fn mask(len: u8) -> Self;
    /// Where the address's cut windows start (see `Cuts`, `cuts.rs`): the bit
    /// offsets of its [`CUT_BITS`]-bit indices, one cut array each.
    const CUT_AT: &'static [u32];
    /// 32 bits for the table hash.
    fn fold(self) -> u32;
    /// The low 32 bits (a port's or protocol's value).
    fn low(self) -> u32;
    /// Bits `at..at + CUT_BITS`: the index into a window's cut array.
    fn cut(self, at: u32) -> usize;
    /// The bits set (a mask's prefix length).
    fn ones(self) -> u32;
    /// The leaf each of `rows` reaches down a tree of this family's
    /// `steps` from its `start`, into `leaves`, by the vector walk of
    /// `kernel` (see [`cfdp_acl_simd::Kernel::walk`]); `false` where there
    /// is none for this family or kernel (IPv6 has none: the default).
    fn walk_rows(
        _kernel: cfdp_acl_simd::Kernel,
        _steps: &[cfdp_acl_simd::Step<Self>],
        _start: &cfdp_acl_simd::Start,
        _rows: &[[Self; 8]],
        _levels: u32,
        _leaves: &mut [u32],
    ) -> bool {
        false
    }
}

impl Word for u32 {
    #[inline(always)]
    fn walk_rows(
        kernel: cfdp_acl_simd::Kernel,
        steps: &[cfdp_acl_simd::Step<Self>],
        start: &cfdp_acl_simd::Start,
        rows: &[[Self; 8]],
        levels: u32,
        leaves: &mut [u32],
    ) -> bool {
        kernel.walk(steps, start, rows, levels, leaves)
    }
    const V6: bool = false;
    const MAX: Self = u32::MAX;
    const CUT_AT: &'static [u32] = &[0];
    #[inline(always)]
    fn from_u32(x: u32) -> Self {
        x
    }
    fn inc(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn dec(self) -> Self {
        self - 1
    }
    #[inline(always)]
    fn of(a: &[u8; 16]) -> Self {
        u32::from_be_bytes([a[0], a[1], a[2], a[3]])
    }
    fn bytes(self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&self.to_be_bytes());
        a
    }
    #[inline(always)]
    fn mask(len: u8) -> Self {
        u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }
    #[inline(always)]
    fn fold(self) -> u32 {
        self
    }
    #[inline(always)]
    fn low(self) -> u32 {
        self
    }
    #[inline(always)]
    fn cut(self, at: u32) -> usize {
        ((self << at) >> (32 - CUT_BITS)) as usize
    }
    fn ones(self) -> u32 {
        self.count_ones()
    }
}

impl Word for u128 {
    /// Bits 16–28, below a regional registry's block: they tell apart the
    /// allocations of different organisations (/19–/32); and bits 32–44,
    /// below an organisation's /32: its sites (/36–/48). The leading bits
    /// would not help: global unicast addresses share 2000::/3. A prefix
    /// that ends before a window is wide in it (every index).
    const CUT_AT: &'static [u32] = &[16, 32];
    const V6: bool = true;
    const MAX: Self = u128::MAX;
    #[inline(always)]
    fn from_u32(x: u32) -> Self {
        u128::from(x)
    }
    fn inc(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn dec(self) -> Self {
        self - 1
    }
    #[inline(always)]
    fn of(a: &[u8; 16]) -> Self {
        u128::from_be_bytes(*a)
    }
    fn bytes(self) -> [u8; 16] {
        self.to_be_bytes()
    }
    #[inline(always)]
    fn mask(len: u8) -> Self {
        u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
    }
    #[inline(always)]
    fn fold(self) -> u32 {
        let w = |i: u32| (self >> (32 * i)) as u32;
        w(3) ^ w(2).wrapping_mul(0xcc9e_2d51)
            ^ w(1).wrapping_mul(0x1b87_3593)
            ^ w(0).rotate_left(11)
    }
    #[inline(always)]
    fn low(self) -> u32 {
        self as u32
    }
    #[inline(always)]
    fn cut(self, at: u32) -> usize {
        ((self << at) >> (128 - CUT_BITS)) as usize
    }
    fn ones(self) -> u32 {
        self.count_ones()
    }
}

/// A packet's fields as the tables compare them.
#[derive(Clone, Copy, Default)]
pub(super) struct Packet<W> {
    pub(super) src: W,
    pub(super) dst: W,
    pub(super) proto: u16,
    pub(super) sport: u16,
    pub(super) dport: u16,
}

impl<W: Word> Packet<W> {
    #[inline(always)]
    pub(super) fn of(k: &FlowKey) -> Self {
        Self {
            src: W::of(&k.src),
            dst: W::of(&k.dst),
            proto: u16::from(k.proto),
            sport: k.sport,
            dport: k.dport,
        }
    }
}
