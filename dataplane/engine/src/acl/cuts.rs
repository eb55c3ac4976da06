//! The cuts ahead of the tuple space: which tables can hold a match for
//! a packet, from windows of its addresses and its protocol.

use super::word::{Packet, Word, CUT_BITS};

pub(super) const CUTS: usize = 1 << CUT_BITS;
/// Prefixes shorter than this are counted once as covering every index
/// (at most 2^8 indices a rule otherwise).
pub const WIDE_BELOW: u32 = CUT_BITS - 8;
/// A set of tables, by position in the probe order (see [`Cuts`]).
pub(super) type Mask = u32;

/// Which tables can match a packet, from a window of its address bits and
/// its protocol: bit `b` of `src` at index `i` is set when the table at
/// position `b` of the probe order holds a rule whose source prefix covers
/// window bits `i`, and likewise for `dst` and `proto`. A lookup probes
/// only the tables set in every array, in order, by walking the bits, so a
/// packet far from a table's rules costs a few loads for all tables
/// instead of a probe each (a cut on each field ahead of the tuple space,
/// in the spirit of CutTSS's field cuts); a miss stops at once. The bits
/// follow the tables' positions: a table that moves in the order moves its
/// bit in every mask ([`Cuts::remap`], a few bit operations a word).
///
/// An address family reads `N` windows of each address ([`Word::CUT_AT`]:
/// IPv4 its leading 12 bits, IPv6 bits 16–28 and 32–44), an array each; a
/// table passes when it passes all of them.
///
/// Kept exact under updates by each table's [`Cover`] counts. The fields
/// and windows are independent (a table passes when *some* rule covers the
/// source bits and *some* rule the destination's), which keeps an update
/// to a few hundred counter steps per array where a joint array would take
/// their product.
#[derive(Clone)]
pub(super) struct Cuts<const N: usize> {
    pub(super) src: [Cut<CUTS>; N],
    pub(super) dst: [Cut<CUTS>; N],
    pub(super) proto: Cut<256>,
}

impl<const N: usize> Default for Cuts<N> {
    fn default() -> Self {
        Self {
            src: std::array::from_fn(|_| Cut::default()),
            dst: std::array::from_fn(|_| Cut::default()),
            proto: Cut::default(),
        }
    }
}

/// One field's cut: a mask of tables per index, and the tables holding a
/// rule that covers every index (`wide`: a prefix shorter than
/// [`WIDE_BELOW`] bits, or any protocol), so that such a rule costs an
/// update one step instead of thousands.
#[derive(Clone)]
pub(super) struct Cut<const N: usize> {
    pub(super) masks: Box<[Mask; N]>,
    pub(super) wide: Mask,
}

impl<const N: usize> Default for Cut<N> {
    fn default() -> Self {
        Self {
            masks: Box::new([0; N]),
            wide: 0,
        }
    }
}

impl<const N: usize> Cut<N> {
    #[inline(always)]
    pub(super) fn get(&self, i: usize) -> Mask {
        self.masks[i] | self.wide
    }

    pub(super) fn remap(&mut self, f: impl Fn(Mask) -> Mask) {
        for m in self.masks.iter_mut() {
            *m = f(*m);
        }
        self.wide = f(self.wide);
    }
}

impl<const N: usize> Cuts<N> {
    /// Applies `f` to every mask.
    pub(super) fn remap(&mut self, f: impl Fn(Mask) -> Mask + Copy) {
        for c in self.src.iter_mut().chain(&mut self.dst) {
            c.remap(f);
        }
        self.proto.remap(f);
    }

    /// Heap bytes of the arrays.
    pub(super) fn bytes() -> usize {
        (2 * N * CUTS + 256) * std::mem::size_of::<Mask>()
    }

    /// Moves every mask's bit `from` to `to`, shifting the bits between.
    pub(super) fn relocate(&mut self, from: u32, to: u32) {
        let low_from: Mask = (1 << from) - 1;
        let low_to: Mask = (1 << to) - 1;
        self.remap(|m| {
            let b = (m >> from) & 1;
            let m = (m & low_from) | ((m >> 1) & !low_from);
            (m & low_to) | ((m & !low_to) << 1) | (b << to)
        });
    }

    /// Drops bit `at` (a removed table's, clear in every mask), shifting
    /// the bits above it down.
    pub(super) fn close(&mut self, at: u32) {
        let low: Mask = (1 << at) - 1;
        self.remap(|m| (m & low) | ((m >> 1) & !low));
    }

    /// The tables that may hold a match for `p` (`W::CUT_AT` has `N`
    /// windows).
    #[inline(always)]
    pub(super) fn candidates<W: Word>(&self, p: &Packet<W>) -> Mask {
        let mut m = self.proto.get(usize::from(p.proto as u8));
        for (w, &at) in W::CUT_AT.iter().enumerate().take(N) {
            m &= self.src[w].get(p.src.cut(at)) & self.dst[w].get(p.dst.cut(at));
        }
        m
    }
}

/// One table's rules counted by the cut indices they cover: its position's
/// bit in [`Cuts`] is set exactly where its count is not zero. Read only by
/// updates.
#[derive(Clone)]
pub(super) struct Cover<const N: usize> {
    pub(super) src: [FieldCover<CUTS>; N],
    pub(super) dst: [FieldCover<CUTS>; N],
    pub(super) proto: FieldCover<256>,
}

impl<const N: usize> Default for Cover<N> {
    fn default() -> Self {
        Self {
            src: std::array::from_fn(|_| FieldCover::default()),
            dst: std::array::from_fn(|_| FieldCover::default()),
            proto: FieldCover::default(),
        }
    }
}

impl<const N: usize> Cover<N> {
    /// Heap bytes: the struct and the count pages in use.
    pub(super) fn bytes(&self) -> usize {
        let pages = self
            .src
            .iter()
            .chain(&self.dst)
            .map(FieldCover::pages)
            .sum::<usize>()
            + self.proto.pages();
        std::mem::size_of::<Self>() + pages * std::mem::size_of::<Page>()
    }
}

/// Counters a [`FieldCover`] page holds: a span [`Span::of_prefix`] gives
/// is at most this long and aligned to its length, so one rule's count
/// lands in one page.
const PAGE: usize = 256;
/// Pages a field's counters may take.
const PAGES: usize = CUTS / PAGE;
const _: () = assert!(CUTS.is_multiple_of(PAGE) && 1 << (CUT_BITS - WIDE_BELOW) <= PAGE);

/// One field's counts, by index, in pages allocated on the first rule
/// counted in them and freed with the last: a table of a few rules (the
/// live layer's after updates the tree refused) takes a page or two a
/// field where whole arrays took 33 KB a table in IPv4 and 66 KB in IPv6,
/// zeroed by the insert that opened the table. After its rules were
/// replaced, acl1_1k's classifier took 0.93 MB with whole arrays (0.27 MB
/// of it eight such tables' counts) and 0.70 MB with pages, and in IPv6
/// the store's insert p99 fell from 33 to 13 us
/// (`bench/results/classbench_cover_ab.csv`).
#[derive(Clone)]
pub(super) struct FieldCover<const N: usize> {
    pages: [Option<Box<Page>>; PAGES],
    pub(super) wide: u32,
}

#[derive(Clone)]
struct Page {
    counts: [u32; PAGE],
    /// Rules counted in this page: the page is freed when none is left.
    rules: u32,
}

impl<const N: usize> Default for FieldCover<N> {
    fn default() -> Self {
        const { assert!(N <= CUTS && N.is_multiple_of(PAGE)) };
        Self {
            pages: Default::default(),
            wide: 0,
        }
    }
}

impl<const N: usize> FieldCover<N> {
    /// Pages allocated.
    pub(super) fn pages(&self) -> usize {
        self.pages.iter().flatten().count()
    }

    /// Index `i`'s count.
    #[cfg(test)]
    pub(super) fn get(&self, i: usize) -> u32 {
        self.pages[i / PAGE]
            .as_ref()
            .map_or(0, |p| p.counts[i % PAGE])
    }
}

/// The indices of a field one rule covers.
pub(super) enum Span {
    /// Every index (see [`Cut`]).
    Wide,
    Some(std::ops::Range<usize>),
}

impl Span {
    /// A prefix's (`addr` under `mask`) in the window at bit `at`: one
    /// index for a prefix that reaches [`CUT_BITS`] into the window, the
    /// indices it leaves open for one that ends inside it, down to
    /// [`WIDE_BELOW`] bits into it, and wide below that (a prefix that ends
    /// before the window covers all of it).
    pub(super) fn of_prefix<W: Word>(addr: W, mask: W, at: u32) -> Self {
        let len = mask.ones();
        if len < at + WIDE_BELOW {
            return Span::Wide;
        }
        // `addr` has no host bits (an `IpPrefix` is valid by construction).
        let start = addr.cut(at);
        Span::Some(start..start + (1 << CUT_BITS.saturating_sub(len - at)))
    }

    /// A protocol's (256: any).
    pub(super) fn of_proto(proto: u16) -> Self {
        if proto == 256 {
            Span::Wide
        } else {
            let p = usize::from(proto);
            Span::Some(p..p + 1)
        }
    }
}

/// Counts one rule in (`add`) or out of `cover` over `span`, setting or
/// clearing `bit` in `cut` where a count leaves or reaches zero.
pub(super) fn count<const N: usize>(
    cover: &mut FieldCover<N>,
    cut: &mut Cut<N>,
    span: Span,
    bit: Mask,
    add: bool,
) {
    match span {
        Span::Wide if add => {
            cover.wide += 1;
            cut.wide |= bit;
        }
        Span::Wide => {
            cover.wide -= 1;
            if cover.wide == 0 {
                cut.wide &= !bit;
            }
        }
        Span::Some(r) => {
            // One page for a prefix's span (see PAGE); any range is taken
            // page by page all the same.
            let mut at = r.start;
            while at < r.end {
                let (p, from) = (at / PAGE, at % PAGE);
                let to = (r.end - p * PAGE).min(PAGE);
                let masks = &mut cut.masks[p * PAGE + from..p * PAGE + to];
                if add {
                    let page = cover.pages[p].get_or_insert_with(|| {
                        Box::new(Page {
                            counts: [0; PAGE],
                            rules: 0,
                        })
                    });
                    page.rules += 1;
                    // Branch-free bodies: the loops vectorize.
                    for (n, m) in page.counts[from..to].iter_mut().zip(masks) {
                        *n += 1;
                        *m |= bit;
                    }
                } else {
                    let page = cover.pages[p]
                        .as_mut()
                        .expect("a rule counted out was counted in");
                    for (n, m) in page.counts[from..to].iter_mut().zip(masks) {
                        *n -= 1;
                        *m &= !(bit * Mask::from(*n == 0));
                    }
                    page.rules -= 1;
                    if page.rules == 0 {
                        cover.pages[p] = None;
                    }
                }
                at = p * PAGE + to;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(r: std::ops::Range<usize>) -> Span {
        Span::Some(r)
    }

    #[test]
    fn count_pages_come_with_the_first_rule_and_go_with_the_last() {
        let mut cover = FieldCover::<CUTS>::default();
        let mut cut = Cut::<CUTS>::default();
        count(&mut cover, &mut cut, span(0x100..0x200), 1, true);
        count(&mut cover, &mut cut, span(0x140..0x150), 1, true);
        count(&mut cover, &mut cut, span(5..6), 1, true);
        assert_eq!(cover.pages(), 2);
        assert_eq!(
            (cover.get(0x145), cover.get(0x1ff), cover.get(5)),
            (2, 1, 1)
        );
        assert_eq!((cut.get(0x145), cut.get(0x1ff), cut.get(0x200)), (1, 1, 0));

        count(&mut cover, &mut cut, span(0x100..0x200), 1, false);
        assert_eq!(cover.pages(), 2);
        assert_eq!((cut.get(0x145), cut.get(0x1ff), cut.get(0x100)), (1, 0, 0));
        count(&mut cover, &mut cut, span(0x140..0x150), 1, false);
        assert_eq!(cover.pages(), 1);
        count(&mut cover, &mut cut, span(5..6), 1, false);
        assert_eq!(cover.pages(), 0);
        assert!(cut.masks.iter().all(|&m| m == 0));

        // A range over page boundaries is counted in each page it meets.
        count(&mut cover, &mut cut, span(0xf0..0x210), 2, true);
        assert_eq!(cover.pages(), 3);
        assert!((0xf0..0x210).all(|i| cover.get(i) == 1 && cut.get(i) == 2));
        assert_eq!((cut.get(0xef), cut.get(0x210)), (0, 0));
        count(&mut cover, &mut cut, span(0xf0..0x210), 2, false);
        assert_eq!(cover.pages(), 0);
        assert!(cut.masks.iter().all(|&m| m == 0));
    }

    #[test]
    fn a_prefix_span_fits_one_page() {
        // Every prefix length that is not wide, at the window's start.
        for len in WIDE_BELOW..=32 {
            let mask = u32::mask(len as u8);
            let addr = 0xdead_beef & mask;
            if let Span::Some(r) = Span::of_prefix(addr, mask, 0) {
                assert_eq!(r.start / PAGE, (r.end - 1) / PAGE, "/{len}: {r:?}");
            } else {
                panic!("/{len} is wide");
            }
        }
    }
}
