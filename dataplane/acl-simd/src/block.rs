//! A leaf's rules as the kernel reads them, and a packet as it reads it,
//! for either address family: `N` 32-bit words an address (1 for IPv4,
//! 4 for IPv6; word 0 the most significant).

use std::ops::BitAnd;

/// Rules a [`Block`] holds.
pub const LANES: usize = 8;
/// The protocol a rule that takes any protocol is stored with (not a
/// byte: no packet's protocol equals it).
pub const PROTO_ANY: u32 = 0x100;

/// Eight rules, field by field (struct of arrays): 192 bytes (three cache
/// lines) for IPv4, 448 (seven) for IPv6. The columns a packet is compared
/// with first — the addresses, the ports — are 32 bytes each and aligned
/// for one vector load; the masks' shifts (a byte a word), the protocols
/// (two bytes) and the rules' numbers share the last line. A lane with no
/// rule never matches (its source mask is 0, a shift of 32, and its
/// source 1).
///
/// An address is kept masked, with its mask per word as the shift that
/// makes it: 32 less the bits of word `w` the rule's prefix covers (all
/// ones shifted left by that; a shift of 32 gives 0), so a block holds
/// prefix masks only (every rule's), three bytes a word less than the
/// masks themselves: acl1_10k's leaves, whose first rule usually matches, read
/// three lines a packet instead of four.
///
/// The ports are packed two to a lane, source in the high half and
/// destination in the low one, as ranges: `lo` the ranges' starts and
/// `span` their widths (`hi - lo`); a port `p` is in when `p - lo`
/// (16-bit, wrapping) is at most `span`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Block<const N: usize> {
    pub(crate) src: [[u32; LANES]; N],
    pub(crate) dst: [[u32; LANES]; N],
    pub(crate) ports_lo: [u32; LANES],
    pub(crate) ports_span: [u32; LANES],
    pub(crate) src_shift: [[u8; LANES]; N],
    pub(crate) dst_shift: [[u8; LANES]; N],
    /// A protocol number, or [`PROTO_ANY`].
    pub(crate) proto: [u16; LANES],
    /// The caller's number for each rule (its index in its own tables).
    pub idx: [u32; LANES],
}

/// A word's mask from its shift (see [`Block`]; 0..=32).
#[inline(always)]
pub(crate) fn word_mask(shift: u8) -> u32 {
    u32::MAX.checked_shl(u32::from(shift)).unwrap_or(0)
}

/// A mask's shift in each word (see [`Block`]), if it is a prefix mask
/// (ones, then zeros, across the words).
fn prefix_shifts<const N: usize>(mask: [u32; N]) -> Option<[u8; N]> {
    let mut shifts = [0u8; N];
    let mut ended = false;
    for (sh, &m) in shifts.iter_mut().zip(&mask) {
        let ones = m.leading_ones();
        if m != 0 && (ended || m.trailing_zeros() + ones < 32) {
            return None;
        }
        ended |= ones < 32;
        *sh = (32 - ones) as u8;
    }
    Some(shifts)
}

/// A packet's fields as the kernel reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key<const N: usize> {
    pub(crate) src: [u32; N],
    pub(crate) dst: [u32; N],
    /// Source port in the high half, destination port in the low one.
    pub(crate) ports: u32,
    pub(crate) proto: u32,
}

/// One rule as a block lane holds it, in its family's address word `A`
/// (`u32`, `u128`): addresses as value and mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule<A> {
    pub src: A,
    pub src_mask: A,
    pub dst: A,
    pub dst_mask: A,
    pub sport: (u16, u16),
    pub dport: (u16, u16),
    /// A protocol number, or [`PROTO_ANY`].
    pub proto: u32,
    pub idx: u32,
}

impl<A: Copy + Eq + BitAnd<Output = A>> Rule<A> {
    /// What the kernel computes for this rule, one field at a time (the
    /// specification the kernels are tested against).
    pub fn matches(&self, src: A, dst: A, sport: u16, dport: u16, proto: u32) -> bool {
        src & self.src_mask == self.src & self.src_mask
            && dst & self.dst_mask == self.dst & self.dst_mask
            && (self.sport.0..=self.sport.1).contains(&sport)
            && (self.dport.0..=self.dport.1).contains(&dport)
            && (self.proto == PROTO_ANY || self.proto == proto)
    }
}

/// An address's words, most significant first.
pub(crate) trait Words<const N: usize>: Copy {
    fn words(self) -> [u32; N];
    fn join(w: [u32; N]) -> Self;
}

impl Words<1> for u32 {
    fn words(self) -> [u32; 1] {
        [self]
    }
    fn join(w: [u32; 1]) -> Self {
        w[0]
    }
}

impl Words<4> for u128 {
    fn words(self) -> [u32; 4] {
        [
            (self >> 96) as u32,
            (self >> 64) as u32,
            (self >> 32) as u32,
            self as u32,
        ]
    }
    fn join(w: [u32; 4]) -> Self {
        w.iter().fold(0, |a, &x| (a << 32) | u128::from(x))
    }
}

impl<const N: usize> Default for Block<N> {
    fn default() -> Self {
        Self {
            src: [[1; LANES]; N],
            dst: [[0; LANES]; N],
            ports_lo: [0; LANES],
            ports_span: [0; LANES],
            src_shift: [[32; LANES]; N],
            dst_shift: [[32; LANES]; N],
            proto: [PROTO_ANY as u16; LANES],
            idx: [u32::MAX; LANES],
        }
    }
}

impl<const N: usize> Block<N> {
    /// A block of up to [`LANES`] rules, lane `i` rule `i`; the lanes past
    /// them never match. `None` if there are more, or a rule's mask is not
    /// a prefix's.
    pub(crate) fn of<A: Words<N> + BitAnd<Output = A>>(rules: &[Rule<A>]) -> Option<Self> {
        if rules.len() > LANES {
            return None;
        }
        let mut b = Self::default();
        for (i, r) in rules.iter().enumerate() {
            b.set(i, r)?;
        }
        Some(b)
    }

    fn set<A: Words<N> + BitAnd<Output = A>>(&mut self, i: usize, r: &Rule<A>) -> Option<()> {
        let (src_shift, dst_shift) = (
            prefix_shifts(r.src_mask.words())?,
            prefix_shifts(r.dst_mask.words())?,
        );
        // 0..=255 or PROTO_ANY (256): two bytes.
        let proto = u16::try_from(r.proto)
            .ok()
            .filter(|&p| u32::from(p) <= PROTO_ANY)?;
        self.idx[i] = r.idx;
        // A range is stored as its start and width (see the type's docs);
        // an inverted range (lo > hi) matches no port, as `Rule::matches`
        // says: the lane is left never matching.
        if r.sport.0 > r.sport.1 || r.dport.0 > r.dport.1 {
            return Some(());
        }
        let pack = |s: u16, d: u16| (u32::from(s) << 16) | u32::from(d);
        let col = |c: &mut [[u32; LANES]; N], a: A| {
            for (w, x) in c.iter_mut().zip(a.words()) {
                w[i] = x;
            }
        };
        col(&mut self.src, r.src & r.src_mask);
        col(&mut self.dst, r.dst & r.dst_mask);
        for w in 0..N {
            self.src_shift[w][i] = src_shift[w];
            self.dst_shift[w][i] = dst_shift[w];
        }
        self.ports_lo[i] = pack(r.sport.0, r.dport.0);
        self.ports_span[i] = pack(r.sport.1 - r.sport.0, r.dport.1 - r.dport.0);
        self.proto[i] = proto;
        Some(())
    }

    /// Lane `i`'s rule as it was put in (its addresses masked).
    pub(crate) fn rule<A: Words<N>>(&self, i: usize) -> Rule<A> {
        let word = |c: &[[u32; LANES]; N]| A::join(std::array::from_fn(|w| c[w][i]));
        let mask = |c: &[[u8; LANES]; N]| A::join(std::array::from_fn(|w| word_mask(c[w][i])));
        let halves = |x: u32| ((x >> 16) as u16, x as u16);
        let (slo, dlo) = halves(self.ports_lo[i]);
        let (sspan, dspan) = halves(self.ports_span[i]);
        Rule {
            src: word(&self.src),
            src_mask: mask(&self.src_shift),
            dst: word(&self.dst),
            dst_mask: mask(&self.dst_shift),
            sport: (slo, slo + sspan),
            dport: (dlo, dlo + dspan),
            proto: u32::from(self.proto[i]),
            idx: self.idx[i],
        }
    }

    /// The portable kernel: bit `i` set when lane `i`'s rule matches.
    #[inline(always)]
    pub(crate) fn matches_portable(&self, k: &Key<N>) -> u32 {
        let halves = |x: u32| ((x >> 16) as u16, x as u16);
        let (sport, dport) = halves(k.ports);
        let mut m = 0u32;
        for i in 0..LANES {
            let (slo, dlo) = halves(self.ports_lo[i]);
            let (sspan, dspan) = halves(self.ports_span[i]);
            // `&` rather than `&&`: every lane costs the same, no branch.
            let proto = u32::from(self.proto[i]);
            let mut ok = (sport.wrapping_sub(slo) <= sspan)
                & (dport.wrapping_sub(dlo) <= dspan)
                & ((proto == k.proto) | (proto == PROTO_ANY));
            for w in 0..N {
                ok &= (k.src[w] & word_mask(self.src_shift[w][i]) == self.src[w][i])
                    & (k.dst[w] & word_mask(self.dst_shift[w][i]) == self.dst[w][i]);
            }
            m |= u32::from(ok) << i;
        }
        m
    }
}
