//! File descriptors: every door is capped (`control.max_connections`, the
//! metrics endpoint's waiting heads, P4Runtime's connections), and the
//! caps together, plus a reserve for the journal, snapshots, captures and
//! the runtime itself, must fit the process's `RLIMIT_NOFILE`. Then a
//! flooded door runs out of its own slots, never of descriptors the Unix
//! socket or the journal need. Checked at start: the soft limit is raised
//! up to the hard one when it is short, and a hard limit below the need
//! stops `cfdp run` (exit 2).

use crate::error::RunError;
use cfdp_config::RunConfig;

/// Descriptors kept beyond the doors' caps: journal and snapshot (and
/// their temporaries), the state directory, capture input and outputs,
/// the runtime's own (epoll, eventfd, pipes), DPDK's.
pub const RESERVE: u64 = 128;

/// What the configured doors can hold at most, plus [`RESERVE`].
pub fn needed(cfg: &RunConfig) -> u64 {
    let c = &cfg.control;
    // A control connection is two descriptors (its reader and writer).
    let mut n = 2 * c.max_connections as u64 + 2; // and the two listeners
    if !c.metrics.is_empty() {
        n += (cfdp_control::metrics::WAITING + cfdp_control::metrics::QUEUE) as u64 + 1;
    }
    if !cfg.p4runtime.listen.is_empty() {
        n += cfdp_p4runtime::server::max_connections(cfg.p4runtime.max_controllers.max(1)) as u64
            + 1;
    }
    n + RESERVE
}

/// The soft limit to set for `needed` under (`soft`, `hard`): `None` when
/// `soft` is enough, `Err(hard)` when even `hard` is not.
pub fn plan(needed: u64, soft: u64, hard: u64) -> Result<Option<u64>, u64> {
    if needed <= soft {
        Ok(None)
    } else if needed <= hard {
        Ok(Some(needed))
    } else {
        Err(hard)
    }
}

/// Makes the descriptor limit fit the configuration (see the module docs).
pub fn ensure(cfg: &RunConfig) -> Result<(), RunError> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let need = needed(cfg);
    let l = getrlimit(Resource::Nofile);
    let (soft, hard) = (l.current.unwrap_or(u64::MAX), l.maximum.unwrap_or(u64::MAX));
    match plan(need, soft, hard) {
        Ok(None) => Ok(()),
        Ok(Some(raised)) => {
            setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(raised),
                    maximum: l.maximum,
                },
            )
            .map_err(|e| RunError::io("raising RLIMIT_NOFILE")(e.into()))?;
            eprintln!(
                "cfdp: file descriptor limit raised from {soft} to {raised} for the doors' caps"
            );
            Ok(())
        }
        Err(hard) => Err(RunError::Descriptors { needed: need, hard }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_doors_fit_a_common_limit() {
        let cfg = RunConfig::default();
        assert!(needed(&cfg) <= 1024, "{}", needed(&cfg));
        let mut open = cfg.clone();
        open.control.metrics = "127.0.0.1:9187".into();
        open.p4runtime.listen = "127.0.0.1:9559".into();
        assert!(needed(&open) > needed(&cfg));
        assert!(needed(&open) <= 1024, "{}", needed(&open));
    }

    #[test]
    fn a_short_soft_limit_is_raised_and_a_short_hard_one_refused() {
        assert_eq!(plan(500, 1024, 4096), Ok(None));
        assert_eq!(plan(2000, 1024, 4096), Ok(Some(2000)));
        assert_eq!(plan(5000, 1024, 4096), Err(4096));
    }
}
