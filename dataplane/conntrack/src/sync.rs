//! The atomics and locks the table is built from, switched to `loom`'s
//! model-checked versions under `--cfg loom`, so that its lock-free read
//! path (a seqlock per slot) is checked against opens, removals and slot
//! reuse on a tiny table (`src/loom_tests.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// A value on cache lines of its own: a stripe's lock and what it
/// changes must not share a line with another stripe's.
pub(crate) use crossbeam_utils::CachePadded;

/// A lock (a stripe's). A worker that
/// panicked while holding one left it whole (each change is a few stores
/// whose readers check the slot's generation): keep serving.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A wait for another thread's short hold of a slot (its TCP lock).
#[cfg(not(loom))]
pub(crate) fn spin() {
    std::hint::spin_loop();
}

#[cfg(loom)]
pub(crate) fn spin() {
    loom::thread::yield_now();
}
