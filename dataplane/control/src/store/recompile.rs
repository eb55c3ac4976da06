//! The multi-field rules' background recompile: the compiled layer
//! (`cfdp_engine::acl::compiled`) is rebuilt on a thread of its own from
//! the published copy once enough rules changed since the last compile,
//! and installed with the next commit or between batches by one
//! [`Op::InstallAcl`], as the exact tables' fold lands its rebase.
//!
//! The control thread never waits for a build: it takes the input (a copy
//! of the rules, O(rules)) and later installs the result (O(rules):
//! the live layer is rebuilt from the rules the new tree does not hold).
//! Rules that changed while the build ran stay exact: `install` marks
//! them dead in the new tree and keeps them live.

use std::sync::Arc;
use std::time::Instant;

use cfdp_engine::acl::AclClassifier;
use cfdp_engine::Op;

use super::state::RuleStore;
use super::types::{CompileJob, CompileStats};

/// Rules changed since the last compile (inserted into the live layer,
/// patched into the compiled one, or dead there) before a recompile starts: at least this
/// many, and at least 1/[`RECOMPILE_FRACTION`] of the rules.
pub const RECOMPILE_AFTER: usize = 64;
pub const RECOMPILE_FRACTION: usize = 32;

impl RuleStore {
    /// Starts a recompile when the published copy's layers call for one
    /// and none runs. A set refused whole before (nothing compiled) is
    /// tried again only once its size moved by a quarter.
    pub(super) fn maybe_start_compile(&mut self) {
        if self.compile.is_some() {
            return;
        }
        let Some(input) = self.w.enter().and_then(|t| {
            let l = t.acl_layers();
            let rules = l.compiled - l.dead + l.live_v4 + l.live_v6;
            // Patched rules lengthen leaves: they count as changes too.
            // Rules the last compile left live (a family over the budget)
            // do not: a recompile would leave them again.
            let live = (l.live_v4 + l.live_v6).saturating_sub(l.left);
            let changed = live + l.dead + l.patched;
            let due = changed >= RECOMPILE_AFTER.max(rules / RECOMPILE_FRACTION);
            let refused_near = self
                .compile_refused_at
                .is_some_and(|n| rules.abs_diff(n) < n / 4 + RECOMPILE_AFTER);
            (due && !refused_near).then(|| t.acl_compile_input())
        }) else {
            return;
        };
        let rules = input.len();
        let spawned = std::thread::Builder::new()
            .name("cfdp-acl-compile".into())
            .spawn(move || {
                let t = Instant::now();
                let c = AclClassifier::build_layers(&input);
                (c, t.elapsed())
            });
        match spawned {
            Ok(handle) => {
                self.compiles.started += 1;
                self.compile = Some(CompileJob { handle, rules });
            }
            // No thread: the live layer keeps the rules (exact, slower);
            // the next commit tries again.
            Err(e) => eprintln!("cfdp: control: no thread for the rules' compile ({e})"),
        }
    }

    /// Appends the finished build's [`Op::InstallAcl`] (waiting for it
    /// when `wait`); true when one was appended. The caller publishes.
    pub(super) fn land_compile(&mut self, wait: bool) -> bool {
        if !self
            .compile
            .as_ref()
            .is_some_and(|j| wait || j.handle.is_finished())
        {
            return false;
        }
        let job = self.compile.take().expect("checked above");
        match job.handle.join() {
            Ok((Ok(c), took)) => {
                self.compiles.last_build_s = took.as_secs_f64();
                self.compiles.landed += 1;
                // A family refused whole or in part: its rules out of the
                // tree stay live, counted in the layers' `left`, so they
                // call for no recompile of their own.
                self.compile_refused_at = None;
                self.compiles.refused += u64::from(c.refused.is_some());
                self.w.append(Op::InstallAcl(Arc::new(c)));
                true
            }
            Ok((Err(_), took)) => {
                self.compiles.last_build_s = took.as_secs_f64();
                self.compiles.refused += 1;
                self.compile_refused_at = Some(job.rules);
                false
            }
            Err(_) => {
                eprintln!("cfdp: control: the rules' compile failed: the live layer keeps them");
                false
            }
        }
    }

    /// Between batches (the control thread's idle loop; with `wait`,
    /// waiting for a build in flight): installs a finished compile in both
    /// copies, then starts the next one if due. True when one landed.
    pub fn finish_compile(&mut self, wait: bool) -> bool {
        let landed = self.land_compile(wait);
        if landed {
            let t = Instant::now();
            self.settle();
            // Two publishes: the second copy installs it too.
            self.w.publish();
            self.w.publish();
            self.compiles.last_install_s = t.elapsed().as_secs_f64();
        }
        self.maybe_start_compile();
        landed
    }

    /// What the background compiles did.
    pub fn compile_stats(&self) -> CompileStats {
        self.compiles
    }
}
