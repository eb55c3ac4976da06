//! Software prefetch of packet data: a worker hints every frame of a burst
//! into L1 before decoding, so their cache misses overlap instead of adding
//! up (DPDK l3fwd's pattern).

/// Hints the CPU to bring the cache line at `p` into L1. Never faults, so
/// any address is fine; a no-op where the target has no prefetch intrinsic.
#[inline(always)]
pub fn prefetch_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch is only a hint: it never faults and has no
        // architectural effect, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches the first line of every frame.
#[inline]
pub fn prefetch_frames<'a>(frames: impl IntoIterator<Item = &'a [u8]>) {
    for f in frames {
        prefetch_read(f.as_ptr());
    }
}
