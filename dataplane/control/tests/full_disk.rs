//! The journal on a real full file system: a small tmpfs mounted by the
//! test (needs root, or at least CAP_SYS_ADMIN; skipped with a message
//! otherwise — CI runs as root). A batch whose record does not fit is
//! refused and leaves the journal exactly as it was; once space returns,
//! later batches (at the same generation) are journaled; a restore gives
//! exactly the acknowledged batches.

use std::path::Path;
use std::process::Command;

use cfdp_control::journal::{restore, Journal};
use cfdp_rules::{Action, FlowKey, Match, Rule, Update};

/// A tmpfs mounted on a fresh temporary directory: unmounted, then the
/// directory removed, when dropped.
struct Mount(tempfile::TempDir);

impl Mount {
    /// A `size`-byte tmpfs at a fresh directory, or why not.
    fn tmpfs(size: &str) -> Result<Mount, String> {
        let dir = tempfile::Builder::new()
            .prefix("cfdp-full-disk-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Mount(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

fn batch(g: u64) -> Vec<Update> {
    (0..20)
        .map(|i| {
            let n = (g * 100 + i) as u32;
            Update::Insert(Rule {
                id: n,
                matcher: Match::Flow(
                    cfdp_rules::ExactFlow::of_key(FlowKey::v4(
                        n.to_be_bytes(),
                        [192, 0, 2, 1],
                        6,
                        1,
                        2,
                    ))
                    .expect("a valid flow"),
                ),
                action: Action::Drop,
            })
        })
        .collect()
}

fn journal_len(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("journal.ndjson")).map_or(0, |m| m.len())
}

#[test]
fn a_full_disk_refuses_the_batch_and_leaves_the_journal_as_it_was() {
    let m = match Mount::tmpfs("256k") {
        Ok(m) => m,
        Err(e) => {
            eprintln!("skipped: cannot mount a tmpfs here ({e}); CI runs this as root");
            return;
        }
    };
    let dir = m.path().join("state");
    // Space to give back later.
    let filler = m.path().join("filler");
    std::fs::write(&filler, vec![1u8; 64 << 10]).unwrap();
    assert!(restore(&dir).unwrap().is_empty());
    let mut j = Journal::open(&dir, 0).unwrap();
    let mut acked = Vec::new();
    let mut g = 1;
    // Append until the disk is full.
    let err = loop {
        let before = journal_len(&dir);
        match j.append(g, &batch(g)) {
            Ok(()) => {
                acked.push(g);
                g += 1;
            }
            Err(e) => {
                assert_eq!(journal_len(&dir), before, "the failed record was cut back");
                break e;
            }
        }
        assert!(g < 10_000, "the tmpfs never filled");
    };
    // A full disk is told apart from a damaged record by its type.
    assert!(
        matches!(&err, cfdp_control::journal::JournalError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::StorageFull),
        "{err:?}"
    );
    assert!(acked.len() > 10);
    // Still full: refused again, journal unchanged.
    let before = journal_len(&dir);
    assert!(j.append(g, &batch(g)).is_err());
    assert_eq!(journal_len(&dir), before);
    // Space returns: the same generation is journaled now.
    std::fs::remove_file(&filler).unwrap();
    j.append(g, &batch(g)).unwrap();
    acked.push(g);
    drop(j);
    // A restart restores exactly the acknowledged batches.
    let r = restore(&dir).unwrap();
    assert!(r.dropped_tail.is_none(), "{:?}", r.dropped_tail);
    let gens: Vec<u64> = r.records.iter().map(|(g, _)| *g).collect();
    assert_eq!(gens, acked);
    assert!(r.records.iter().all(|(g, u)| *u == batch(*g)));
}
