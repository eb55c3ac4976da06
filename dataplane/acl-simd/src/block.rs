//! A leaf's rules as the kernel reads them, and a packet as it reads it.

/// Rules a [`Block`] holds.
pub const LANES: usize = 8;
/// The protocol a rule that takes any protocol is stored with (not a
/// byte: no packet's protocol equals it).
pub const PROTO_ANY: u32 = 0x100;

/// Eight rules, field by field (struct of arrays): 256 bytes, four cache
/// lines, each column 32 bytes and aligned for one vector load. A lane
/// with no rule never matches (its source mask is 0 and its source 1).
///
/// The ports are packed two to a lane, source in the high half and
/// destination in the low one, as ranges: `lo` the ranges' starts and
/// `span` their widths (`hi - lo`); a port `p` is in when `p - lo`
/// (16-bit, wrapping) is at most `span`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Block {
    pub(crate) src: [u32; LANES],
    pub(crate) src_mask: [u32; LANES],
    pub(crate) dst: [u32; LANES],
    pub(crate) dst_mask: [u32; LANES],
    pub(crate) ports_lo: [u32; LANES],
    pub(crate) ports_span: [u32; LANES],
    pub(crate) proto: [u32; LANES],
    /// The caller's number for each rule (its index in its own tables).
    pub idx: [u32; LANES],
}

/// One rule as a block lane holds it (addresses as value and mask, the
/// value already masked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub src: u32,
    pub src_mask: u32,
    pub dst: u32,
    pub dst_mask: u32,
    pub sport: (u16, u16),
    pub dport: (u16, u16),
    /// A protocol number, or [`PROTO_ANY`].
    pub proto: u32,
    pub idx: u32,
}

impl Rule {
    /// What the kernel computes for this rule, one field at a time (the
    /// specification the kernels are tested against).
    pub fn matches(&self, k: &Key) -> bool {
        let (sport, dport) = ((k.ports >> 16) as u16, k.ports as u16);
        k.src & self.src_mask == self.src
            && k.dst & self.dst_mask == self.dst
            && (self.sport.0..=self.sport.1).contains(&sport)
            && (self.dport.0..=self.dport.1).contains(&dport)
            && (self.proto == PROTO_ANY || self.proto == k.proto)
    }
}

impl Default for Block {
    fn default() -> Self {
        Self {
            src: [1; LANES],
            src_mask: [0; LANES],
            dst: [0; LANES],
            dst_mask: [0; LANES],
            ports_lo: [0; LANES],
            ports_span: [0; LANES],
            proto: [PROTO_ANY; LANES],
            idx: [u32::MAX; LANES],
        }
    }
}

impl Block {
    /// A block of up to [`LANES`] rules, lane `i` rule `i`; the lanes past
    /// them never match. `None` if there are more.
    pub fn of(rules: &[Rule]) -> Option<Self> {
        if rules.len() > LANES {
            return None;
        }
        let mut b = Self::default();
        for (i, r) in rules.iter().enumerate() {
            b.set(i, r);
        }
        Some(b)
    }

    fn set(&mut self, i: usize, r: &Rule) {
        // A range is stored as its start and width (see the type's docs);
        // an inverted range (lo > hi) matches no port, as `Rule::matches`
        // says: the lane is left never matching.
        if r.sport.0 > r.sport.1 || r.dport.0 > r.dport.1 {
            self.idx[i] = r.idx;
            return;
        }
        let pack = |s: u16, d: u16| (u32::from(s) << 16) | u32::from(d);
        self.src[i] = r.src & r.src_mask;
        self.src_mask[i] = r.src_mask;
        self.dst[i] = r.dst & r.dst_mask;
        self.dst_mask[i] = r.dst_mask;
        self.ports_lo[i] = pack(r.sport.0, r.dport.0);
        self.ports_span[i] = pack(r.sport.1 - r.sport.0, r.dport.1 - r.dport.0);
        self.proto[i] = r.proto;
        self.idx[i] = r.idx;
    }

    /// The portable kernel: bit `i` set when lane `i`'s rule matches.
    #[inline(always)]
    pub(crate) fn matches_portable(&self, k: &Key) -> u32 {
        let halves = |x: u32| ((x >> 16) as u16, x as u16);
        let (sport, dport) = halves(k.ports);
        let mut m = 0u32;
        for i in 0..LANES {
            let (slo, dlo) = halves(self.ports_lo[i]);
            let (sspan, dspan) = halves(self.ports_span[i]);
            // `&` rather than `&&`: every lane costs the same, no branch.
            let ok = (k.src & self.src_mask[i] == self.src[i])
                & (k.dst & self.dst_mask[i] == self.dst[i])
                & (sport.wrapping_sub(slo) <= sspan)
                & (dport.wrapping_sub(dlo) <= dspan)
                & ((self.proto[i] == k.proto) | (self.proto[i] == PROTO_ANY));
            m |= u32::from(ok) << i;
        }
        m
    }
}

/// A packet's fields as the kernel reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Key {
    pub src: u32,
    pub dst: u32,
    /// Source port in the high half, destination port in the low one.
    pub ports: u32,
    pub proto: u32,
}

impl Key {
    #[inline(always)]
    pub fn new(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self {
        Self {
            src,
            dst,
            ports: (u32::from(sport) << 16) | u32::from(dport),
            proto: u32::from(proto),
        }
    }
}
