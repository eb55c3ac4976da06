//! The budget of request bytes being parsed at once over all connections.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// The bytes of request lines being parsed at once, over all connections:
/// a line waits until its share is free (a line longer than the whole
/// budget waits until it is alone). Parsing builds typed rules, and on
/// slow paths JSON trees, of several times a line's size; without a budget
/// 64 connections each sending a 16 MiB line could take gigabytes at once.
pub struct ParseBudget {
    total: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

impl ParseBudget {
    pub fn new(total: usize) -> Arc<Self> {
        Arc::new(Self {
            total: total.max(1),
            used: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    /// Waits for `n` bytes of the budget (at most all of it); they come
    /// back when the guard drops.
    pub fn take(&self, n: usize) -> ParseShare<'_> {
        let n = n.min(self.total);
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        while *used + n > self.total {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *used += n;
        ParseShare { budget: self, n }
    }

    /// Bytes taken now.
    pub fn used(&self) -> usize {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A share of the [`ParseBudget`].
pub struct ParseShare<'a> {
    budget: &'a ParseBudget,
    n: usize,
}

impl Drop for ParseShare<'_> {
    fn drop(&mut self) {
        let mut used = self
            .budget
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *used -= self.n;
        self.budget.freed.notify_all();
    }
}
