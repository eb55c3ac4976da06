//! The budget of request bytes being parsed at once over all connections.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// The bytes of request lines being parsed at once, over all connections:
/// a line waits until its share is free (a line longer than the whole
/// budget waits until it is alone). Parsing builds typed rules, and on
/// slow paths JSON trees, of several times a line's size; without a budget
/// 64 connections each sending a 16 MiB line could take gigabytes at once.
pub struct ParseBudget {
    total: usize,
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Default)]
struct State {
    used: usize,
    /// Lines waiting for their share (what a test orders itself by).
    waiting: usize,
}

impl ParseBudget {
    pub fn new(total: usize) -> Arc<Self> {
        Arc::new(Self {
            total: total.max(1),
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `n` bytes of the budget (at most all of it); they come
    /// back when the guard drops.
    pub fn take(&self, n: usize) -> ParseShare<'_> {
        let n = n.min(self.total);
        let mut s = self.lock();
        while s.used + n > self.total {
            s.waiting += 1;
            s = self.freed.wait(s).unwrap_or_else(PoisonError::into_inner);
            s.waiting -= 1;
        }
        s.used += n;
        ParseShare { budget: self, n }
    }

    /// Bytes taken now.
    pub fn used(&self) -> usize {
        self.lock().used
    }

    /// Lines waiting for their share now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }
}

/// A share of the [`ParseBudget`].
pub struct ParseShare<'a> {
    budget: &'a ParseBudget,
    n: usize,
}

impl Drop for ParseShare<'_> {
    fn drop(&mut self) {
        self.budget.lock().used -= self.n;
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line whose share is taken waits — the test orders itself on the
    /// waiter count, no sleeping — and goes on once the share is given
    /// back; a line longer than the whole budget takes all of it.
    #[test]
    fn lines_wait_for_their_share() {
        let b = ParseBudget::new(10);
        let first = b.take(8);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let share = b.take(5);
                tx.send(b.used()).unwrap();
                drop(share);
            });
            let start = std::time::Instant::now();
            while b.waiting() == 0 {
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(20),
                    "never waited"
                );
                std::thread::yield_now();
            }
            assert!(
                rx.try_recv().is_err(),
                "took its share while 8 of 10 were taken"
            );
            drop(first);
            assert_eq!(rx.recv().unwrap(), 5);
        });
        assert_eq!(b.used(), 0);
        let all = b.take(1 << 30);
        assert_eq!(b.used(), 10);
        drop(all);
    }
}
