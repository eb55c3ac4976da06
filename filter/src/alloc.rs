//! The table's memory: one zeroed block of atomic words, aligned to a cache
//! line, and for large tables to a 2 MiB huge page with the kernel advised
//! to back it with transparent huge pages. Public as [`ZeroedSlice`] for
//! other tables of atomics (the connection table's slots: insert p99.9
//! ~5.2 → ~3.4 µs and lookups +10 % at 2^20 slots, `bench/README.md`).
//!
//! Why by hand: a `Box<[AtomicU64]>` is only 8-byte aligned and is zeroed
//! (so its pages are faulted in as 4 KiB pages) before it could be advised.
//! A lookup touches two random buckets; with 4 KiB pages a table beyond the
//! TLB's reach pays a page walk for most of them. Measured on the 2-core
//! Xeon VM (2026-11-23), a plain 8-byte-bucket probe of a 256 MiB table:
//! 16.4 → 25.5 M batched lookups/s with huge pages (see `bench/README.md`).
//! No crate offers "a zeroed, huge-page-advised slice of atomics"; the
//! unsafe part is this module only.

/// Types whose all-zero bytes are a valid value (and whose `Default` is
/// that value): what a [`ZeroedSlice`] may hold.
///
/// # Safety
/// An implementor promises that the all-zero bit pattern is a valid value
/// of the type, equal to its `Default`.
pub unsafe trait Zeroable: Default {}

// SAFETY: an atomic integer's zero bytes are the integer 0, its default.
// (Under loom the atomics are loom's: the slice is then built from
// `Default`, never from bytes.)
unsafe impl Zeroable for crate::sync::AtomicU64 {}
// SAFETY: an array of zeroable elements is zeroable element by element.
unsafe impl<T: Zeroable, const N: usize> Zeroable for [T; N] where [T; N]: Default {}

#[cfg(not(loom))]
mod imp {
    use super::Zeroable;
    use std::alloc::{self, Layout};
    use std::ops::Deref;
    use std::ptr::NonNull;

    /// 2 MiB: the x86-64 and AArch64 (4 KiB granule) huge-page size.
    const HUGE: usize = 2 << 20;

    /// An owned slice of `T`, zeroed at first, with the alignment
    /// described in the module docs.
    pub struct ZeroedSlice<T: Zeroable> {
        ptr: NonNull<T>,
        len: usize,
        layout: Layout,
    }

    // SAFETY: `ZeroedSlice` owns its block exactly as a `Box<[T]>` would.
    unsafe impl<T: Zeroable + Send> Send for ZeroedSlice<T> {}
    // SAFETY: as above; shared access only hands out `&[T]`.
    unsafe impl<T: Zeroable + Sync> Sync for ZeroedSlice<T> {}

    impl<T: Zeroable> ZeroedSlice<T> {
        /// `len` zeroed values (`len > 0`, `T` not zero-sized). Aborts like
        /// `Box` when memory runs out.
        pub fn zeroed(len: usize) -> Self {
            assert!(len > 0, "empty table");
            assert!(std::mem::size_of::<T>() > 0, "zero-sized values");
            let bytes = len
                .checked_mul(std::mem::size_of::<T>())
                .expect("table size overflows the address space");
            let align = if bytes >= HUGE { HUGE } else { 64 }.max(std::mem::align_of::<T>());
            let layout = Layout::from_size_align(bytes, align).expect("table layout");
            // SAFETY: `layout` has a non-zero size.
            let raw = unsafe { alloc::alloc(layout) };
            let Some(ptr) = NonNull::new(raw.cast::<T>()) else {
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
            // valid `T` (`Zeroable`). Zeroing after the advice is what faults
            // the pages in as huge pages.
            unsafe { std::ptr::write_bytes(raw, 0, bytes) };
            Self { ptr, len, layout }
        }
    }

    impl<T: Zeroable> Deref for ZeroedSlice<T> {
        type Target = [T];
        #[inline(always)]
        fn deref(&self) -> &[T] {
            // SAFETY: `ptr` points to `len` initialised (zeroed, `Zeroable`)
            // values that live as long as `self`; only shared references
            // are created.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T: Zeroable> Drop for ZeroedSlice<T> {
        fn drop(&mut self) {
            // SAFETY: allocated in `zeroed` with exactly this layout. `T`'s
            // values are not dropped: every `Zeroable` here is atomics,
            // which need no drop (a `T` that needed one would leak, not
            // misbehave).
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) }
        }
    }

    impl<T: Zeroable> std::fmt::Debug for ZeroedSlice<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("ZeroedSlice")
                .field("len", &self.len)
                .field("align", &self.layout.align())
                .finish()
        }
    }
}

/// Under loom the atomics are loom's own, which cannot be zero-initialised
/// by writing bytes; tables there are tiny, so a plain box of defaults
/// does.
#[cfg(loom)]
mod imp {
    use super::Zeroable;

    #[derive(Debug)]
    pub struct ZeroedSlice<T: Zeroable>(Box<[T]>);

    impl<T: Zeroable> ZeroedSlice<T> {
        pub fn zeroed(len: usize) -> Self {
            ZeroedSlice((0..len).map(|_| T::default()).collect())
        }
    }

    impl<T: Zeroable> std::ops::Deref for ZeroedSlice<T> {
        type Target = [T];
        fn deref(&self) -> &[T] {
            &self.0
        }
    }
}

pub use imp::ZeroedSlice;

/// The filter's bucket words.
pub(crate) type Words = ZeroedSlice<crate::sync::AtomicU64>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Words, ZeroedSlice};
    use std::sync::atomic::{AtomicU64, Ordering};

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
        // Arrays of words, as the connection table's slots: whole, and the
        // large one on a huge page's boundary.
        for len in [1, 3, (4 << 20) / 56 + 1] {
            let s = ZeroedSlice::<[AtomicU64; 7]>::zeroed(len);
            assert_eq!(s.len(), len);
            assert!(s.iter().flatten().all(|x| x.load(Ordering::Relaxed) == 0));
            let addr = s.as_ptr() as usize;
            assert_eq!(addr % 64, 0);
            if len * 56 >= 2 << 20 {
                assert_eq!(addr % (2 << 20), 0);
            }
            s[len - 1][6].store(7, Ordering::Relaxed);
        }
    }
}
