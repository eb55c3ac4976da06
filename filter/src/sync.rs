//! The atomics the table is built from, switched to `loom`'s model-checked
//! versions under `--cfg loom` so the read-versus-relocate protocol can be
//! checked exhaustively on a tiny table (see `src/loom_tests.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Back-off inside a spin loop. Under loom a spin must yield, or the model
/// checker would explore an unbounded number of spins.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
