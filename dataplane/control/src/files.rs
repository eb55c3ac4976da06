//! Files that hold the rule set or a secret: private to the user cfdp runs
//! as, and never opened through a link someone else planted.
//!
//! * The state directory is created 0700; journal, snapshot and token files
//!   are created 0600 whatever the umask.
//! * Temporary files (a snapshot or compacted journal before its rename)
//!   are created with `O_CREAT | O_EXCL | O_NOFOLLOW`: a file or symbolic
//!   link already at that name is an error, not something written through;
//!   a leftover of a crash is removed first (`remove_file` removes a link,
//!   never its target).

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Mode of every file cfdp creates in its state directory.
pub const FILE_MODE: u32 = 0o600;
/// Mode of the state directory (and its parents cfdp creates).
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` (and missing parents) with mode 0700; an existing
/// directory is kept as it is (the operator chose its mode).
pub fn private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens `path` for appending, creating it 0600 if it is missing; refuses
/// a symbolic link.
pub fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(FILE_MODE)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Creates a fresh temporary file at `path`, 0600: whatever is there
/// (a crash's leftover, or a link) is removed, then the file is created
/// exclusively without following links.
pub fn create_temp(path: &Path) -> io::Result<File> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    create_new(path)
}

/// Creates `path` exclusively, 0600, without following links.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Syncs `dir` itself, so a file created or renamed in it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn temporaries_replace_links_instead_of_writing_through_them() {
        let dir_tmp = tempfile::Builder::new()
            .prefix("cfdp-files-")
            .tempdir()
            .unwrap();
        let dir = dir_tmp.path();
        private_dir(&dir.join("state")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("state")), DIR_MODE);
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let tmp = dir.join("state/snapshot.bin.tmp");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        use std::io::Write;
        create_temp(&tmp).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&tmp).unwrap(), "new");
        assert_eq!(mode(&tmp), FILE_MODE);
        // A link where the journal goes is refused, not followed.
        let journal = dir.join("state/journal.ndjson");
        std::os::unix::fs::symlink(&victim, &journal).unwrap();
        assert!(open_append(&journal).is_err());
    }
}
