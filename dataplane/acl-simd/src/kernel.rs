//! The three versions of the kernel and the choice between them.

use crate::block::{Block, Key};

/// A version of the kernel this CPU runs. Made only by [`Kernel::best`]
/// and [`Kernel::available`], which ask the CPU first, or as
/// [`Kernel::PORTABLE`], which every CPU runs: holding one is the proof
/// that calling it is safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel(Level);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// The AVX-512 leaf kernel, and trees walked by the vector walk.
    #[cfg(target_arch = "x86_64")]
    Avx512Walk,
}

impl Default for Kernel {
    fn default() -> Self {
        Self::best()
    }
}

impl Kernel {
    /// Plain Rust: every CPU.
    pub const PORTABLE: Self = Self(Level::Portable);

    /// The fastest version this CPU runs: the widest, and with AVX-512
    /// the vector walk on Intel's CPUs only. Its gathers are what a level
    /// of the vector walk waits on; on Intel (a Xeon of Sapphire Rapids'
    /// family, `bench/results/classbench_vector_walk.csv`) the walk
    /// overtook the lanes walked one by one, while on AMD's Zen 4 the
    /// gathers LLVM once made of that walk ran it at half the rate
    /// (`bench/results/classbench_native_tried.csv`), and this walk was
    /// not measured there.
    pub fn best() -> Self {
        let all = Self::available();
        let best = *all.last().unwrap_or(&Self::PORTABLE);
        if best.walks() && !fast_gathers() {
            return all[all.len() - 2];
        }
        best
    }

    /// Every version this CPU runs, narrowest first.
    pub fn available() -> Vec<Self> {
        #[allow(unused_mut)]
        let mut v = vec![Self::PORTABLE];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                v.push(Self(Level::Avx2));
            }
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
            {
                v.push(Self(Level::Avx512));
                v.push(Self(Level::Avx512Walk));
            }
        }
        v
    }

    /// The version's name, as the benchmarks print it.
    pub fn name(self) -> &'static str {
        match self.0 {
            Level::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => "avx512",
            #[cfg(target_arch = "x86_64")]
            Level::Avx512Walk => "avx512-walk",
        }
    }

    /// Whether this version walks trees with vector instructions (see
    /// [`Kernel::walk`]): AVX-512 only (AVX2's eight-lane gathers walked
    /// slower than the engine's lane-by-lane walk).
    pub fn walks(self) -> bool {
        match self.0 {
            #[cfg(target_arch = "x86_64")]
            Level::Avx512Walk => true,
            _ => false,
        }
    }

    /// Bit `i` set when lane `i`'s rule of `b` matches `k`.
    #[inline(always)]
    pub fn matches<const N: usize>(self, b: &Block<N>, k: &Key<N>) -> u32 {
        match self.0 {
            Level::Portable => b.matches_portable(k),
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            // SAFETY: a `Kernel` of this level exists only where
            // `available` saw the CPU report AVX2.
            Level::Avx2 => unsafe { x86::avx2(b, k) },
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            // SAFETY: a `Kernel` of this level exists only where
            // `available` saw the CPU report AVX-512 F, VL and BW.
            Level::Avx512 | Level::Avx512Walk => unsafe { x86::avx512(b, k) },
        }
    }
}

/// Whether this CPU's gathers are fast enough for the vector walk: an
/// Intel CPU's (see [`Kernel::best`]).
fn fast_gathers() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // Leaf 0: the vendor's name in EBX, EDX, ECX.
        let id = std::arch::x86_64::__cpuid(0);
        let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        vendor == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use crate::block::{Block, Key, LANES, PROTO_ANY};
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_castsi256_ps, _mm256_cmpeq_epi32,
        _mm256_cmpeq_epi32_mask, _mm256_cvtepu16_epi32, _mm256_cvtepu8_epi32, _mm256_load_si256,
        _mm256_mask_cmpeq_epi32_mask, _mm256_movemask_ps, _mm256_or_si256, _mm256_set1_epi32,
        _mm256_setzero_si256, _mm256_sllv_epi32, _mm256_sub_epi16, _mm256_subs_epu16,
        _mm_loadl_epi64, _mm_loadu_si128,
    };

    /// One column of `b` as a vector.
    #[inline(always)]
    fn column(c: &[u32; 8]) -> __m256i {
        // SAFETY: `c` is 32 readable bytes, aligned to 32 (a `Block` is
        // aligned to 64 and its 32-byte columns come first, at multiples
        // of 32); AVX is enabled in every caller (both kernels enable it).
        unsafe { _mm256_load_si256(c.as_ptr().cast()) }
    }

    /// The masks of a column of shifts (see [`Block`]): all ones shifted
    /// left by each (a shift of 32 gives 0).
    #[inline(always)]
    fn masks(shift: &[u8; LANES]) -> __m256i {
        // SAFETY: `shift` is 8 readable bytes (unaligned 8-byte load); AVX2
        // is enabled in every caller.
        unsafe {
            let shift = _mm256_cvtepu8_epi32(_mm_loadl_epi64(shift.as_ptr().cast()));
            _mm256_sllv_epi32(_mm256_set1_epi32(-1), shift)
        }
    }

    /// The protocol column, widened to 32-bit lanes.
    #[inline(always)]
    fn protos(p: &[u16; LANES]) -> __m256i {
        // SAFETY: `p` is 16 readable bytes (unaligned load); AVX2 is
        // enabled in every caller.
        unsafe { _mm256_cvtepu16_epi32(_mm_loadu_si128(p.as_ptr().cast())) }
    }

    /// # Safety
    /// The CPU must run AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2<const N: usize>(b: &Block<N>, k: &Key<N>) -> u32 {
        let set = |x: u32| _mm256_set1_epi32(x as i32);
        // An address matches when every word does: (key & mask) == value.
        let mut all = _mm256_set1_epi32(-1);
        for w in 0..N {
            let src = _mm256_cmpeq_epi32(
                _mm256_and_si256(set(k.src[w]), masks(&b.src_shift[w])),
                column(&b.src[w]),
            );
            let dst = _mm256_cmpeq_epi32(
                _mm256_and_si256(set(k.dst[w]), masks(&b.dst_shift[w])),
                column(&b.dst[w]),
            );
            all = _mm256_and_si256(all, _mm256_and_si256(src, dst));
        }
        // Both ports in 16-bit lanes: (port - lo) saturating-minus span is
        // 0 in both halves exactly when both are in range.
        let off = _mm256_sub_epi16(set(k.ports), column(&b.ports_lo));
        let ports = _mm256_cmpeq_epi32(
            _mm256_subs_epu16(off, column(&b.ports_span)),
            _mm256_setzero_si256(),
        );
        let proto = protos(&b.proto);
        let proto = _mm256_or_si256(
            _mm256_cmpeq_epi32(set(k.proto), proto),
            _mm256_cmpeq_epi32(set(PROTO_ANY), proto),
        );
        let all = _mm256_and_si256(all, _mm256_and_si256(ports, proto));
        _mm256_movemask_ps(_mm256_castsi256_ps(all)) as u32
    }

    /// # Safety
    /// The CPU must run AVX-512 F, VL and BW.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw")]
    pub(super) unsafe fn avx512<const N: usize>(b: &Block<N>, k: &Key<N>) -> u32 {
        let set = |x: u32| _mm256_set1_epi32(x as i32);
        // Each compare writes a mask register and is masked by the one
        // before: no vector of results, no movemask.
        let off = _mm256_sub_epi16(set(k.ports), column(&b.ports_lo));
        let mut m = _mm256_cmpeq_epi32_mask(
            _mm256_subs_epu16(off, column(&b.ports_span)),
            _mm256_setzero_si256(),
        );
        for w in 0..N {
            m = _mm256_mask_cmpeq_epi32_mask(
                m,
                _mm256_and_si256(set(k.src[w]), masks(&b.src_shift[w])),
                column(&b.src[w]),
            );
            m = _mm256_mask_cmpeq_epi32_mask(
                m,
                _mm256_and_si256(set(k.dst[w]), masks(&b.dst_shift[w])),
                column(&b.dst[w]),
            );
        }
        let proto = protos(&b.proto);
        let p = _mm256_cmpeq_epi32_mask(set(k.proto), proto)
            | _mm256_cmpeq_epi32_mask(set(PROTO_ANY), proto);
        u32::from(m & p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Addr;
    use crate::block::{Rule, LANES, PROTO_ANY};
    use proptest::prelude::*;
    use std::fmt::Debug;
    use std::ops::{BitAnd, BitXor, Shl};

    /// An address word as the tests generate it.
    trait Gen: Addr + Debug + Arbitrary + Shl<u32, Output = Self> + BitXor<Output = Self> {
        const BITS: u32;
        const MAX: Self;
        const ZERO: Self;
        const ONE: Self;
    }
    impl Gen for u32 {
        const BITS: u32 = 32;
        const MAX: Self = u32::MAX;
        const ZERO: Self = 0;
        const ONE: Self = 1;
    }
    impl Gen for u128 {
        const BITS: u32 = 128;
        const MAX: Self = u128::MAX;
        const ZERO: Self = 0;
        const ONE: Self = 1;
    }

    /// A packet: addresses, ports, protocol.
    type Packet<A> = (A, A, u16, u16, u8);

    /// A rule near `p` often enough that all outcomes occur: prefixes of
    /// the packet's own addresses, ranges around its ports, its protocol.
    fn rule_near<A: Gen + BitAnd<Output = A>>(p: Packet<A>) -> impl Strategy<Value = Rule<A>> {
        // The packet's own address, another, or the packet's with one bit
        // flipped (a miss in any one word of an IPv6 address).
        let prefix = move |a: A| {
            (0..=A::BITS, 0u8..3, any::<A>(), 0..A::BITS).prop_map(move |(len, how, other, bit)| {
                let mask = if len == 0 {
                    A::ZERO
                } else {
                    A::MAX << (A::BITS - len)
                };
                let value = match how {
                    0 => a,
                    1 => other,
                    _ => a ^ (A::ONE << bit),
                };
                (value, mask)
            })
        };
        let range = move |x: u16| {
            (any::<u16>(), any::<u16>(), 0u8..4).prop_map(move |(a, b, how)| match how {
                0 => (x, x),
                1 => (x.saturating_sub(a % 64), x.saturating_add(b % 64)),
                2 => (0, u16::MAX),
                _ => (a.min(b), a.max(b)),
            })
        };
        (
            prefix(p.0),
            prefix(p.1),
            range(p.2),
            range(p.3),
            prop_oneof![Just(u32::from(p.4)), Just(PROTO_ANY), 0u32..256],
            any::<u32>(),
        )
            .prop_map(
                |((src, src_mask), (dst, dst_mask), sport, dport, proto, idx)| Rule {
                    src,
                    src_mask,
                    dst,
                    dst_mask,
                    sport,
                    dport,
                    proto,
                    idx,
                },
            )
    }

    /// Every version's bits for `rules` and `p` against the specification.
    fn check<A: Gen>(p: Packet<A>, rules: &[Rule<A>]) -> Result<(), TestCaseError> {
        let b = A::block(rules).unwrap();
        let k = A::key(p.0, p.1, p.2, p.3, u32::from(p.4));
        let want = rules.iter().enumerate().fold(0u32, |m, (i, r)| {
            m | u32::from(r.matches(p.0, p.1, p.2, p.3, u32::from(p.4))) << i
        });
        for kernel in Kernel::available() {
            prop_assert_eq!(A::matches(kernel, &b, &k), want, "{}", kernel.name());
        }
        // Each lane gives its rule back (addresses masked).
        for (i, r) in rules.iter().enumerate() {
            let back = A::rule(&b, i);
            let masked = Rule {
                src: r.src & r.src_mask,
                dst: r.dst & r.dst_mask,
                ..*r
            };
            prop_assert_eq!(back, masked);
        }
        Ok(())
    }

    fn packet_and_rules<A: Gen>() -> impl Strategy<Value = (Packet<A>, Vec<Rule<A>>)> {
        any::<Packet<A>>()
            .prop_flat_map(|p| (Just(p), proptest::collection::vec(rule_near(p), 0..=LANES)))
    }

    proptest! {
        /// Every version gives, lane by lane, what `Rule::matches` says,
        /// and the lanes past the rules never match: IPv4 ...
        #[test]
        fn every_kernel_gives_each_rules_own_answer_v4((p, rules) in packet_and_rules::<u32>()) {
            check(p, &rules)?;
        }

        /// ... and IPv6 (four words an address).
        #[test]
        fn every_kernel_gives_each_rules_own_answer_v6((p, rules) in packet_and_rules::<u128>()) {
            check(p, &rules)?;
        }
    }

    #[test]
    fn this_cpu_runs_what_it_reports() {
        let names: Vec<_> = Kernel::available().into_iter().map(Kernel::name).collect();
        assert_eq!(names[0], "portable");
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl") {
            assert!(Kernel::best().name().starts_with("avx512"));
        }
        let r = Rule {
            src: 0u32,
            src_mask: 0,
            dst: 0,
            dst_mask: 0,
            sport: (0, 0),
            dport: (0, 0),
            proto: 0,
            idx: 0,
        };
        assert!(u32::block(&[r; LANES + 1]).is_none());
        // Only prefix masks fit a block (it keeps each word's shift): a
        // gap inside a word or across words is refused, a prefix kept.
        for (mask, fits) in [
            (0xffff_0000, true),
            (0xff00_ff00, false),
            (0x00ff_ffff, false),
        ] {
            let r = Rule {
                src_mask: mask,
                ..r
            };
            assert_eq!(u32::block(&[r]).is_some(), fits, "{mask:#x}");
        }
        let r6 = Rule {
            src: 0u128,
            src_mask: 0,
            dst: 0,
            dst_mask: u128::MAX << 96 | 0xff << 56,
            sport: (0, 0),
            dport: (0, 0),
            proto: 0,
            idx: 0,
        };
        assert!(u128::block(&[r6]).is_none(), "ones after a partial word");
        let r6 = Rule {
            dst_mask: u128::MAX << 60,
            ..r6
        };
        assert!(u128::block(&[r6]).is_some());
        assert!(u32::block(&[Rule {
            proto: PROTO_ANY + 1,
            ..r
        }])
        .is_none());
        assert_eq!(std::mem::size_of::<<u32 as Addr>::Block>(), 192);
        assert_eq!(std::mem::size_of::<<u128 as Addr>::Block>(), 448);
    }
}
