//! Software prefetch, used by the batched lookup to overlap the cache misses
//! of a whole group of keys (the DPDK bulk-lookup pattern).

/// Hints the CPU to bring the cache line at `p` into L1. Never faults, so
/// any address is fine; a no-op where the target has no prefetch intrinsic.
/// Public for the filter's callers that keep items beside it by value
/// (`cfdp-conntrack` prefetches the slots a batch's entries point at).
#[inline(always)]
pub fn read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch is only a hint: it never faults and has no
        // architectural effect, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
