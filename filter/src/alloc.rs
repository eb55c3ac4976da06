//! The table's memory: one zeroed block of atomic words, aligned to a cache
//! line, and for large tables to a 2 MiB huge page with the kernel advised
//! to back it with transparent huge pages.
//!
//! Why by hand: a `Box<[AtomicU64]>` is only 8-byte aligned and is zeroed
//! (so its pages are faulted in as 4 KiB pages) before it could be advised.
//! A lookup touches two random buckets; with 4 KiB pages a table beyond the
//! TLB's reach pays a page walk for most of them. Measured on the 2-core
//! Xeon VM (2026-11-23), a plain 8-byte-bucket probe of a 256 MiB table:
//! 16.4 → 25.5 M batched lookups/s with huge pages (see `bench/README.md`).
//! No crate offers "a zeroed, huge-page-advised slice of atomics"; the
//! unsafe part is this module only.

#[cfg(not(loom))]
mod imp {
    use std::alloc::{self, Layout};
    use std::ops::Deref;
    use std::ptr::NonNull;
    use std::sync::atomic::AtomicU64;

    /// 2 MiB: the x86-64 and AArch64 (4 KiB granule) huge-page size.
    const HUGE: usize = 2 << 20;

    /// An owned, zeroed `[AtomicU64]` with the alignment described above.
    pub(crate) struct Words {
        ptr: NonNull<AtomicU64>,
        len: usize,
        layout: Layout,
    }

    // SAFETY: `Words` owns its block exactly as a `Box<[AtomicU64]>` would,
    // and `AtomicU64` is `Send + Sync`.
    unsafe impl Send for Words {}
    // SAFETY: as above; shared access only hands out `&[AtomicU64]`.
    unsafe impl Sync for Words {}

    impl Words {
        /// `len` zeroed words (`len > 0`). Aborts like `Box` when memory runs out.
        pub(crate) fn zeroed(len: usize) -> Self {
            assert!(len > 0, "empty table");
            let bytes = len
                .checked_mul(8)
                .expect("table size overflows the address space");
            let align = if bytes >= HUGE { HUGE } else { 64 };
            let layout = Layout::from_size_align(bytes, align).expect("table layout");
            // SAFETY: `layout` has a non-zero size.
            let raw = unsafe { alloc::alloc(layout) };
            let Some(ptr) = NonNull::new(raw.cast::<AtomicU64>()) else {
                alloc::handle_alloc_error(layout)
            };
            #[cfg(target_os = "linux")]
            if align == HUGE {
                // glibc may hand back a block that was freed a moment ago
                // (a benchmark's previous filter, an `auto_grow` rebuild),
                // its pages already faulted in as 4 KiB pages; advice does
                // not turn those into huge pages. Dropping the block's
                // whole pages first makes the zeroing below fault fresh
                // ones, which the advice then backs with huge pages. (A
                // mapping of its own would do the same, but would hide the
                // table from the allocator that `stats`' memory accounting
                // and its test count.)
                let whole = bytes & !4095;
                // SAFETY: `raw..raw + whole` lies inside the block just
                // allocated and owned here (2 MiB-aligned start, length
                // rounded down to whole 4 KiB pages); nothing refers to it
                // yet, and its contents are about to be zeroed anyway, which
                // is what MADV_DONTNEED leaves in private anonymous memory.
                // Failure is harmless: the zeroing below still zeroes.
                let _ = unsafe {
                    rustix::mm::madvise(raw.cast(), whole, rustix::mm::Advice::LinuxDontNeed)
                };
                // SAFETY: the same block; MADV_HUGEPAGE is advice about its
                // backing and never changes its contents. Failure (THP
                // disabled) is harmless.
                let _ = unsafe {
                    rustix::mm::madvise(raw.cast(), bytes, rustix::mm::Advice::LinuxHugepage)
                };
            }
            // SAFETY: the block is `bytes` long and writable; zero bytes are a
            // valid `AtomicU64`. Zeroing after the advice is what faults the
            // pages in as huge pages.
            unsafe { std::ptr::write_bytes(raw, 0, bytes) };
            Self { ptr, len, layout }
        }
    }

    impl Deref for Words {
        type Target = [AtomicU64];
        #[inline(always)]
        fn deref(&self) -> &[AtomicU64] {
            // SAFETY: `ptr` points to `len` initialised (zeroed) atomics that
            // live as long as `self`; only shared references are created.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
    }

    impl Drop for Words {
        fn drop(&mut self) {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) }
        }
    }
}

/// Under loom the atomics are loom's own, which cannot be zero-initialised
/// by writing bytes; tables there are tiny, so a plain box does.
#[cfg(loom)]
mod imp {
    use crate::sync::AtomicU64;

    pub(crate) struct Words(Box<[AtomicU64]>);

    impl Words {
        pub(crate) fn zeroed(len: usize) -> Self {
            Words((0..len).map(|_| AtomicU64::new(0)).collect())
        }
    }

    impl std::ops::Deref for Words {
        type Target = [AtomicU64];
        fn deref(&self) -> &[AtomicU64] {
            &self.0
        }
    }
}

pub(crate) use imp::Words;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Words;
    use std::sync::atomic::Ordering;

    #[test]
    fn blocks_are_zeroed_and_aligned() {
        for len in [1, 8, 1000, (4 << 20) / 8 + 3] {
            let w = Words::zeroed(len);
            assert_eq!(w.len(), len);
            assert!(w.iter().all(|x| x.load(Ordering::Relaxed) == 0));
            let addr = w.as_ptr() as usize;
            assert_eq!(addr % 64, 0);
            if len * 8 >= 2 << 20 {
                assert_eq!(addr % (2 << 20), 0);
            }
            w[len - 1].store(7, Ordering::Relaxed);
        }
    }
}
