//! The three versions of the kernel and the choice between them.

use crate::block::{Block, Key};

/// A version of the kernel this CPU runs. Made only by [`Kernel::best`],
/// [`Kernel::available`] or [`Kernel::PORTABLE`], each of which checks the
/// CPU first: holding one is the proof that calling it is safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel(Level);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Default for Kernel {
    fn default() -> Self {
        Self::best()
    }
}

impl Kernel {
    /// Plain Rust: every CPU.
    pub const PORTABLE: Self = Self(Level::Portable);

    /// The widest version this CPU runs.
    pub fn best() -> Self {
        *Self::available().last().unwrap_or(&Self::PORTABLE)
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
        }
    }

    /// Bit `i` set when lane `i`'s rule of `b` matches `k`.
    #[inline(always)]
    pub fn matches(self, b: &Block, k: &Key) -> u32 {
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
            Level::Avx512 => unsafe { x86::avx512(b, k) },
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use super::{Block, Key};
    use crate::block::PROTO_ANY;
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_castsi256_ps, _mm256_cmpeq_epi32,
        _mm256_cmpeq_epi32_mask, _mm256_load_si256, _mm256_mask_cmpeq_epi32_mask,
        _mm256_movemask_ps, _mm256_or_si256, _mm256_set1_epi32, _mm256_setzero_si256,
        _mm256_sub_epi16, _mm256_subs_epu16,
    };

    /// One column of `b` as a vector.
    #[inline(always)]
    fn column(c: &[u32; 8]) -> __m256i {
        // SAFETY: `c` is 32 readable bytes, aligned to 32 (a `Block` is
        // aligned to 64 and its columns are 32 bytes each); AVX is
        // enabled in every caller (both kernels enable it).
        unsafe { _mm256_load_si256(c.as_ptr().cast()) }
    }

    /// # Safety
    /// The CPU must run AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2(b: &Block, k: &Key) -> u32 {
        let set = |x: u32| _mm256_set1_epi32(x as i32);
        let src = _mm256_cmpeq_epi32(
            _mm256_and_si256(set(k.src), column(&b.src_mask)),
            column(&b.src),
        );
        let dst = _mm256_cmpeq_epi32(
            _mm256_and_si256(set(k.dst), column(&b.dst_mask)),
            column(&b.dst),
        );
        // Both ports in 16-bit lanes: (port - lo) saturating-minus span is
        // 0 in both halves exactly when both are in range.
        let off = _mm256_sub_epi16(set(k.ports), column(&b.ports_lo));
        let ports = _mm256_cmpeq_epi32(
            _mm256_subs_epu16(off, column(&b.ports_span)),
            _mm256_setzero_si256(),
        );
        let proto = column(&b.proto);
        let proto = _mm256_or_si256(
            _mm256_cmpeq_epi32(set(k.proto), proto),
            _mm256_cmpeq_epi32(set(PROTO_ANY), proto),
        );
        let all = _mm256_and_si256(_mm256_and_si256(src, dst), _mm256_and_si256(ports, proto));
        _mm256_movemask_ps(_mm256_castsi256_ps(all)) as u32
    }

    /// # Safety
    /// The CPU must run AVX-512 F, VL and BW.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw")]
    pub(super) unsafe fn avx512(b: &Block, k: &Key) -> u32 {
        let set = |x: u32| _mm256_set1_epi32(x as i32);
        // Each compare writes a mask register and is masked by the one
        // before: no vector of results, no movemask.
        let m = _mm256_cmpeq_epi32_mask(
            _mm256_and_si256(set(k.src), column(&b.src_mask)),
            column(&b.src),
        );
        let m = _mm256_mask_cmpeq_epi32_mask(
            m,
            _mm256_and_si256(set(k.dst), column(&b.dst_mask)),
            column(&b.dst),
        );
        let off = _mm256_sub_epi16(set(k.ports), column(&b.ports_lo));
        let m = _mm256_mask_cmpeq_epi32_mask(
            m,
            _mm256_subs_epu16(off, column(&b.ports_span)),
            _mm256_setzero_si256(),
        );
        let proto = column(&b.proto);
        let p = _mm256_cmpeq_epi32_mask(set(k.proto), proto)
            | _mm256_cmpeq_epi32_mask(set(PROTO_ANY), proto);
        u32::from(m & p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{Rule, LANES, PROTO_ANY};
    use proptest::prelude::*;

    /// A rule near `k` often enough that all outcomes occur: prefixes of
    /// the key's own addresses, ranges around its ports, its protocol.
    fn rule_near(k: Key) -> impl Strategy<Value = Rule> {
        let prefix = move |a: u32| {
            (0u32..=32, any::<bool>(), any::<u32>()).prop_map(move |(len, own, other)| {
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                ((if own { a } else { other }) & mask, mask)
            })
        };
        let range = move |p: u16| {
            (any::<u16>(), any::<u16>(), 0u8..4).prop_map(move |(a, b, how)| match how {
                0 => (p, p),
                1 => (p.saturating_sub(a % 64), p.saturating_add(b % 64)),
                2 => (0, u16::MAX),
                _ => (a.min(b), a.max(b)),
            })
        };
        (
            prefix(k.src),
            prefix(k.dst),
            range((k.ports >> 16) as u16),
            range(k.ports as u16),
            prop_oneof![Just(k.proto), Just(PROTO_ANY), 0u32..256],
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

    fn key() -> impl Strategy<Value = Key> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
        )
            .prop_map(|(s, d, sp, dp, p)| Key::new(s, d, sp, dp, p))
    }

    proptest! {
        /// Every version gives, lane by lane, what `Rule::matches` says,
        /// and the lanes past the rules never match.
        #[test]
        fn every_kernel_gives_each_rules_own_answer(
            (k, rules) in key().prop_flat_map(|k| {
                (Just(k), proptest::collection::vec(rule_near(k), 0..=LANES))
            }),
        ) {
            let b = Block::of(&rules).unwrap();
            let want = rules
                .iter()
                .enumerate()
                .fold(0u32, |m, (i, r)| m | u32::from(r.matches(&k)) << i);
            for kernel in Kernel::available() {
                prop_assert_eq!(kernel.matches(&b, &k), want, "{}", kernel.name());
            }
        }
    }

    #[test]
    fn this_cpu_runs_what_it_reports() {
        let names: Vec<_> = Kernel::available().into_iter().map(Kernel::name).collect();
        assert_eq!(names[0], "portable");
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl") {
            assert_eq!(Kernel::best().name(), "avx512");
        }
        assert!(Block::of(
            &[Rule {
                src: 0,
                src_mask: 0,
                dst: 0,
                dst_mask: 0,
                sport: (0, 0),
                dport: (0, 0),
                proto: 0,
                idx: 0
            }; LANES + 1]
        )
        .is_none());
    }
}
