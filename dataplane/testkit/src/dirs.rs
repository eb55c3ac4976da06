//! Scratch directories for tests: a unique name under the system's
//! temporary directory (`tempfile`), removed when the test ends, also when
//! it panics. Named by hand with the process id before, such a directory
//! could be reused by a later run and was left behind by a failing one.

use std::ops::Deref;
use std::path::Path;

/// A test's scratch directory: derefs to its [`Path`] (`dir.join(..)`,
/// `&dir` where a `&Path` is wanted), removed on drop.
pub struct TestDir(tempfile::TempDir);

/// A new scratch directory whose name starts `cfdp-{name}-`.
pub fn test_dir(name: &str) -> TestDir {
    TestDir(
        tempfile::Builder::new()
            .prefix(&format!("cfdp-{name}-"))
            .tempdir()
            .expect("a scratch directory under the temporary directory"),
    )
}

impl Deref for TestDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// Formats as its path does (`{dir:?}` in a generated configuration).
impl std::fmt::Debug for TestDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.path().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_directory_is_unique_and_gone_after_its_test() {
        let (a, b) = (test_dir("x"), test_dir("x"));
        assert_ne!(a.to_path_buf(), b.to_path_buf());
        std::fs::write(a.join("f"), b"1").unwrap();
        assert_eq!(format!("{a:?}"), format!("{:?}", a.to_path_buf()));
        let kept = a.to_path_buf();
        drop(a);
        assert!(!kept.exists());
    }
}
