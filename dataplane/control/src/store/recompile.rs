//! The multi-field rules' background recompile: the compiled layer
//! (`cfdp_engine::acl::compiled`) is rebuilt on a thread of its own from
//! the published copy once enough rules changed since the last compile,
//! and installed with the next commit or between batches by one
//! [`Op::InstallAcl`], as the exact tables' fold lands its rebase.
//!
//! The control thread never waits for a build: it takes the input (a copy
//! of the rules, O(rules)) and later installs the result (O(rules):
//! the live layer is rebuilt from the rules the new tree does not hold).
//! The builds run on one thread, started by the first and kept: a
//! thread's start cost the commit that started a build 25–50 µs (acl1_1k,
//! most of that insert's time).
//! Rules that changed while the build ran stay exact: `install` marks
//! them dead in the new tree and keeps them live.

use std::sync::Arc;
use std::time::Instant;

use cfdp_engine::acl::AclClassifier;
use cfdp_engine::Op;
use crossbeam::channel::{self, TryRecvError};

use super::state::RuleStore;
use super::types::{Built, CompileStats, Compiler};

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
        if self
            .compiler
            .as_ref()
            .is_some_and(|c| c.in_flight.is_some())
        {
            return;
        }
        let Some(t) = self.w.enter() else {
            return;
        };
        let l = t.acl_layers();
        let rules = l.compiled - l.dead + l.live_v4 + l.live_v6;
        // Patched rules lengthen leaves: they count as changes too. Rules
        // the last compile left live (a family over the budget) do not: a
        // recompile would leave them again.
        let live = (l.live_v4 + l.live_v6).saturating_sub(l.left);
        let changed = live + l.dead + l.patched;
        let due = changed >= RECOMPILE_AFTER.max(rules / RECOMPILE_FRACTION);
        let refused_near = self
            .compile_refused_at
            .is_some_and(|n| rules.abs_diff(n) < n / 4 + RECOMPILE_AFTER);
        if !due || refused_near {
            return;
        }
        let compiler = match &mut self.compiler {
            Some(c) => c,
            None => match start_compiler() {
                Ok(c) => self.compiler.insert(c),
                // No thread: the live layer keeps the rules (exact,
                // slower); the next commit tries again.
                Err(e) => {
                    eprintln!("cfdp: control: no thread for the rules' compile ({e})");
                    return;
                }
            },
        };
        // Into the last build's input buffer.
        let mut input = std::mem::take(&mut compiler.spare);
        t.acl_compile_input(&mut input);
        let rules = input.len();
        if compiler.jobs.send(input).is_ok() {
            compiler.in_flight = Some(rules);
            self.compiles.started += 1;
        } else {
            // The thread ended (a build panicked): the next commit starts
            // another.
            self.compiler = None;
        }
    }

    /// Appends the finished build's [`Op::InstallAcl`] (waiting for it
    /// when `wait`); true when one was appended. The caller publishes.
    pub(super) fn land_compile(&mut self, wait: bool) -> bool {
        let Some(c) = self.compiler.as_mut().filter(|c| c.in_flight.is_some()) else {
            return false;
        };
        let built = if wait {
            c.built.recv().ok()
        } else {
            match c.built.try_recv() {
                Ok(b) => Some(b),
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => None,
            }
        };
        let rules = c.in_flight.take().expect("checked above");
        match built {
            Some((Ok(c), took, spare)) => {
                self.keep_spare(spare);
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
            Some((Err(_), took, spare)) => {
                self.keep_spare(spare);
                self.compiles.last_build_s = took.as_secs_f64();
                self.compiles.refused += 1;
                self.compile_refused_at = Some(rules);
                false
            }
            None => {
                eprintln!("cfdp: control: the rules' compile failed: the live layer keeps them");
                self.compiler = None;
                false
            }
        }
    }

    /// Keeps a build's input buffer for the next input.
    fn keep_spare(&mut self, spare: Vec<cfdp_engine::acl::compiled::Input>) {
        if let Some(c) = &mut self.compiler {
            c.spare = spare;
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

/// Starts the compile thread: it builds each input it is sent and sends
/// the result back, until the store drops its end.
fn start_compiler() -> std::io::Result<Compiler> {
    // One build at a time: the store sends the next only after taking the
    // last one's result.
    let (jobs, inputs) = channel::bounded::<Vec<cfdp_engine::acl::compiled::Input>>(1);
    let (done, built) = channel::bounded::<Built>(1);
    std::thread::Builder::new()
        .name("cfdp-acl-compile".into())
        .spawn(move || {
            for input in inputs {
                let t = Instant::now();
                let c = AclClassifier::build_layers(&input);
                if done.send((c, t.elapsed(), input)).is_err() {
                    return;
                }
            }
        })?;
    Ok(Compiler {
        jobs,
        built,
        in_flight: None,
        spare: Vec::new(),
    })
}
