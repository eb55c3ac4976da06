//! The atomics the table is built from, switched to `loom`'s model-checked
//! versions under `--cfg loom` so the read-versus-relocate protocol can be
//! checked exhaustively on a tiny table (see `src/loom_tests.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: the data the filter keeps behind
/// mutexes is only changed by single, complete operations, so a panic
/// elsewhere cannot leave it half-updated.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    return m.lock().unwrap();
    #[cfg(not(loom))]
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Back-off inside a spin loop. Under loom a spin must yield, or the model
/// checker would explore an unbounded number of spins.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// A value on cache lines of its own (what a partition's writer changes
/// must not share a line with another partition's).
pub(crate) use crossbeam_utils::CachePadded;
