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

/// Creates `dir` (and missing parents) with mode 0700. An existing one
/// must be a directory (not a link to one) of this user: another owner is
/// refused (`PermissionDenied`); group or other permissions are taken away
/// (the directory is set to 0700), and the mode it had is returned so the
/// caller can say so.
pub fn private_dir(dir: &Path) -> io::Result<Option<u32>> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)?;
            Ok(None)
        }
        Err(e) => Err(e),
        Ok(meta) => {
            if !meta.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a directory (a link to one is refused)",
                ));
            }
            let me = rustix::process::getuid().as_raw();
            if meta.uid() != me {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("owned by uid {}, not by this user (uid {me})", meta.uid()),
                ));
            }
            let mode = meta.mode() & 0o7777;
            if mode & 0o077 != 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
                return Ok(Some(mode));
            }
            Ok(None)
        }
    }
}

/// Why a file holding a secret (a token, a password, a private key) was
/// not read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error("owned by uid {owner}, not by this user")]
    NotOwned { owner: u32 },
    #[error("readable or writable by other users (mode {mode:o}): make it 0600")]
    TooOpen { mode: u32 },
}

/// Opens a file holding a secret: never through a link, a regular file
/// of this user that no one else can read or write, at most `limit`
/// bytes read. The checks are made on the open file, so the file cannot
/// be swapped between check and read.
pub fn read_secret(path: &Path, limit: u64) -> Result<Vec<u8>, SecretError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(SecretError::NotAFile);
    }
    let me = rustix::process::getuid().as_raw();
    if meta.uid() != me {
        return Err(SecretError::NotOwned { owner: meta.uid() });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(SecretError::TooOpen {
            mode: meta.mode() & 0o777,
        });
    }
    let mut out = Vec::new();
    f.take(limit).read_to_end(&mut out)?;
    Ok(out)
}

/// Opens `path` for reading without following a link (journal and
/// snapshots).
pub fn open_read(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
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
        assert_eq!(private_dir(&dir.join("state")).unwrap(), None);
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

    /// An existing state or token directory: a link is refused, an open
    /// mode is tightened (and reported), another owner is refused (root
    /// only: files of another uid).
    #[test]
    fn existing_directories_are_checked() {
        let t = tempfile::Builder::new()
            .prefix("cfdp-dirs-")
            .tempdir()
            .unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(private_dir(&open).unwrap(), Some(0o777));
        let mode = std::fs::metadata(&open).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, DIR_MODE);
        assert_eq!(private_dir(&open).unwrap(), None, "already private");
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        assert_eq!(
            private_dir(&link).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        if rustix::process::getuid().is_root() {
            let theirs = t.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            assert_eq!(
                private_dir(&theirs).unwrap_err().kind(),
                io::ErrorKind::PermissionDenied
            );
        }
    }

    #[test]
    fn secrets_are_read_only_from_private_regular_files() {
        let t = tempfile::Builder::new()
            .prefix("cfdp-secret-")
            .tempdir()
            .unwrap();
        let p = t.path().join("pw");
        std::fs::write(&p, "s3cret\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            read_secret(&p, 100),
            Err(SecretError::TooOpen { mode: 0o640 })
        ));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret(&p, 3).unwrap(), b"s3c");
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(matches!(read_secret(&link, 100), Err(SecretError::Io(_))));
        assert!(matches!(
            read_secret(t.path(), 100),
            Err(SecretError::NotAFile | SecretError::TooOpen { .. })
        ));
    }
}
