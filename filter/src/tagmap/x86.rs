//! The AVX-512 pass of [`super::TagMap::probe16`]: sixteen lanes' hashes,
//! tags and bucket indices in vector registers, the two buckets' tag words
//! fetched by four gathers, the tags compared sixteen bits at a time.
//!
//! Why by hand: no crate offers a vectorised cuckoo probe over our layout,
//! and the portable `std::simd` is not stable. Measured in
//! `bench/README.md` ("Vector probes"), with `CFDP_SIMD=off` for the
//! scalar side.

use std::arch::x86_64::{
    __m512i, _mm512_and_si512, _mm512_castsi512_si256, _mm512_cmpeq_epi16_mask,
    _mm512_cvtepu32_epi64, _mm512_extracti64x4_epi64, _mm512_loadu_si512,
    _mm512_mask_i32gather_epi64, _mm512_max_epu32, _mm512_mullo_epi32, _mm512_mullo_epi64,
    _mm512_rol_epi32, _mm512_set1_epi32, _mm512_set1_epi64, _mm512_setzero_si512,
    _mm512_srli_epi32, _mm512_storeu_si512, _mm512_xor_si512,
};
use std::sync::atomic::{AtomicU8, Ordering};

use super::{Probe16, K1, K2, K3, KALT, LANE};

/// 0: not decided yet, 1: vector pass, 2: scalar.
static MODE: AtomicU8 = AtomicU8::new(0);

/// Whether the vector pass runs: the CPU has AVX-512 F, BW and DQ and the
/// environment does not say `CFDP_SIMD=off` (for side-by-side runs).
/// Decided once per process.
#[inline(always)]
pub(super) fn available() -> bool {
    match MODE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let on = std::env::var("CFDP_SIMD").map_or(true, |v| v != "off")
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512dq");
    MODE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    on
}

/// The vector pass; the caller checked [`available`].
#[inline]
pub(super) fn probe16(
    tags: &[u64],
    mask: u32,
    src: &[u32; 16],
    dst: &[u32; 16],
    masks: (u32, u32),
    active: u16,
) -> Probe16 {
    // Every gathered index is masked by `mask`: with this length each one
    // is inside `tags`.
    assert_eq!(tags.len(), mask as usize + 1, "a power-of-two bucket array");
    assert!(available(), "the CPU runs the vector pass");
    // SAFETY: `available()` found avx512f, avx512bw and avx512dq on this
    // CPU, the features `probe16_avx512` is compiled for.
    unsafe { probe16_avx512(tags, mask, src, dst, masks, active) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq")]
fn probe16_avx512(
    tags: &[u64],
    mask: u32,
    src: &[u32; 16],
    dst: &[u32; 16],
    masks: (u32, u32),
    active: u16,
) -> Probe16 {
    let set1 = |x: u32| _mm512_set1_epi32(x as i32);
    // SAFETY: each array is 64 bytes, the width of an unaligned load.
    let (s, d) = unsafe {
        (
            _mm512_loadu_si512(src.as_ptr().cast::<__m512i>()),
            _mm512_loadu_si512(dst.as_ptr().cast::<__m512i>()),
        )
    };
    let s = _mm512_and_si512(s, set1(masks.0));
    let d = _mm512_and_si512(d, set1(masks.1));
    // pair_hash, lane by lane.
    let mut h = _mm512_xor_si512(
        _mm512_mullo_epi32(s, set1(K1)),
        _mm512_mullo_epi32(_mm512_rol_epi32::<16>(d), set1(K2)),
    );
    h = _mm512_xor_si512(h, _mm512_srli_epi32::<15>(h));
    h = _mm512_mullo_epi32(h, set1(K3));
    h = _mm512_xor_si512(h, _mm512_srli_epi32::<13>(h));
    let mut out = Probe16::default();
    // SAFETY: `out.hash` is 64 bytes, the width of an unaligned store.
    unsafe { _mm512_storeu_si512(out.hash.as_mut_ptr().cast::<__m512i>(), h) };
    // tag_of and alt, lane by lane.
    let tag = _mm512_max_epu32(_mm512_srli_epi32::<16>(h), set1(1));
    let i1 = _mm512_and_si512(h, set1(mask));
    let i2 = _mm512_and_si512(
        _mm512_xor_si512(i1, _mm512_mullo_epi32(tag, set1(KALT))),
        set1(mask),
    );
    // Each half's tags repeated in the four 16-bit lanes of a word.
    let lane = _mm512_set1_epi64(LANE as i64);
    let t_lo = _mm512_mullo_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(tag)), lane);
    let t_hi = _mm512_mullo_epi64(
        _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64::<1>(tag)),
        lane,
    );
    let (k_lo, k_hi) = (active as u8, (active >> 8) as u8);
    let base = tags.as_ptr().cast::<i64>();
    let zero = _mm512_setzero_si512();
    let mut hits = [0u64; 2];
    for (m, idx) in hits.iter_mut().zip([i1, i2]) {
        // SAFETY: every index is below `mask + 1 == tags.len()` (masked
        // above; `probe16` checked the length), scaled by 8 bytes, so each
        // gathered word lies inside `tags`; inactive lanes load nothing.
        let (lo, hi) = unsafe {
            (
                _mm512_mask_i32gather_epi64::<8>(zero, k_lo, _mm512_castsi512_si256(idx), base),
                _mm512_mask_i32gather_epi64::<8>(
                    zero,
                    k_hi,
                    _mm512_extracti64x4_epi64::<1>(idx),
                    base,
                ),
            )
        };
        *m = u64::from(_mm512_cmpeq_epi16_mask(lo, t_lo))
            | (u64::from(_mm512_cmpeq_epi16_mask(hi, t_hi)) << 32);
    }
    out.first = hits[0];
    out.second = hits[1];
    out
}
