//! The table's memory: one zeroed block of atomic words, aligned to a cache
//! line, and for large tables (on Linux) a 2 MiB-aligned mapping of its own
//! with the kernel advised to back it with transparent huge pages.
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

    /// Where a block came from, for its release.
    enum Backing {
        /// The global allocator, with this layout.
        Heap(Layout),
        /// A private anonymous mapping of its own (Linux, large tables):
        /// `(base, len)` of the whole mapping.
        #[cfg(target_os = "linux")]
        Mapped(*mut std::ffi::c_void, usize),
    }

    /// An owned, zeroed `[AtomicU64]` with the alignment described above.
    pub(crate) struct Words {
        ptr: NonNull<AtomicU64>,
        len: usize,
        backing: Backing,
    }

    // SAFETY: `Words` owns its block exactly as a `Box<[AtomicU64]>` would
    // (the mapping's base pointer is only used to release it), and
    // `AtomicU64` is `Send + Sync`.
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
            #[cfg(target_os = "linux")]
            if bytes >= HUGE {
                if let Some(w) = Self::mapped(len, bytes) {
                    return w;
                }
            }
            let align = if bytes >= HUGE { HUGE } else { 64 };
            let layout = Layout::from_size_align(bytes, align).expect("table layout");
            // SAFETY: `layout` has a non-zero size.
            let raw = unsafe { alloc::alloc_zeroed(layout) };
            let Some(ptr) = NonNull::new(raw.cast::<AtomicU64>()) else {
                alloc::handle_alloc_error(layout)
            };
            Self {
                ptr,
                len,
                backing: Backing::Heap(layout),
            }
        }

        /// A large table in a mapping of its own, 2 MiB-aligned, advised for
        /// transparent huge pages and faulted in at once. Why not the global
        /// allocator: glibc serves a freed-then-reallocated block of this
        /// size from memory already faulted in as 4 KiB pages (a benchmark
        /// or an `auto_grow` rebuild that frees one table and makes the
        /// next), and advice does not turn those into huge pages; a fresh
        /// mapping's first touch does. `None` if the kernel refuses the
        /// mapping (then the global allocator serves it).
        #[cfg(target_os = "linux")]
        fn mapped(len: usize, bytes: usize) -> Option<Self> {
            use rustix::mm::{madvise, mmap_anonymous, Advice, MapFlags, ProtFlags};
            let span = bytes.checked_add(HUGE)?;
            // SAFETY: a new private anonymous mapping at an address of the
            // kernel's choosing: it aliases nothing.
            let base = unsafe {
                mmap_anonymous(
                    std::ptr::null_mut(),
                    span,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE,
                )
            }
            .ok()?;
            // The first 2 MiB boundary in the mapping; `span` leaves room
            // for `bytes` after it (the slack is never touched, so it costs
            // address space only).
            let skip = (base as usize).next_multiple_of(HUGE) - base as usize;
            // SAFETY: `skip < HUGE`, so the result is inside the mapping.
            let start = unsafe { base.cast::<u8>().add(skip) };
            // SAFETY: `start..start + bytes` lies in the mapping just made;
            // MADV_HUGEPAGE is advice about its backing and never changes
            // its contents. Failure (THP disabled) is harmless.
            let _ = unsafe { madvise(start.cast(), bytes, Advice::LinuxHugepage) };
            // The mapping reads as zeros already; one write per 4 KiB page
            // faults it in now (as huge pages where the kernel has them)
            // rather than on the packet path.
            for off in (0..bytes).step_by(4096) {
                // SAFETY: `off < bytes`, inside the writable mapping, and
                // nothing refers to it yet.
                unsafe { start.add(off).write_volatile(0) };
            }
            Some(Self {
                ptr: NonNull::new(start.cast::<AtomicU64>())?,
                len,
                backing: Backing::Mapped(base, span),
            })
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
            match self.backing {
                // SAFETY: allocated in `zeroed` with exactly this layout.
                Backing::Heap(layout) => unsafe {
                    alloc::dealloc(self.ptr.as_ptr().cast(), layout);
                },
                // SAFETY: the whole mapping made in `mapped`; `&mut self`
                // means no reference into it is left.
                #[cfg(target_os = "linux")]
                Backing::Mapped(base, span) => unsafe {
                    let _ = rustix::mm::munmap(base, span);
                },
            }
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
