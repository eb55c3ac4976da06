//! The TCP door's authentication: a shared secret token.
//!
//! TCP has no peer credentials, so anyone who reaches the address — any
//! local user, or a web page in a browser on the host posting to
//! `http://127.0.0.1:PORT/` — could otherwise change rules. A TCP client
//! must first send `hello` with `params.token` equal to the token in the
//! token file (0600, generated on first start: 32 random bytes as hex);
//! until it has, every other request is refused and the connection closed.
//! Whoever can read the token file may use the TCP door; mutual TLS is not
//! offered (see `rules/PROTOCOL.md`).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The token's length in bytes before hex encoding.
const TOKEN_BYTES: usize = 32;

/// A control token (compared in constant time).
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// Why the token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("control.token_file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("control.token_file {}: readable by other users (mode {mode:o}): make it 0600", path.display())]
    TooOpen { path: PathBuf, mode: u32 },
    #[error("control.token_file {}: owned by uid {owner}, not by this user", path.display())]
    NotOwned { path: PathBuf, owner: u32 },
    #[error("control.token_file {}: a token is at least {} characters (found {found})", path.display(), 2 * TOKEN_BYTES)]
    TooShort { path: PathBuf, found: usize },
    #[error("no random bytes for a token: {0}")]
    Random(String),
}

impl Token {
    /// The token in `path`, created (0600, exclusively) if there is none.
    /// An existing file must be a regular file of this user that no one
    /// else can read.
    pub fn load_or_create(path: &Path) -> Result<Self, TokenError> {
        let io = |source| TokenError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::files::private_dir(dir).map_err(io)?;
        }
        match crate::files::create_new(path) {
            Ok(mut f) => {
                let mut raw = [0u8; TOKEN_BYTES];
                getrandom::fill(&mut raw).map_err(|e| TokenError::Random(e.to_string()))?;
                let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                f.write_all(format!("{hex}\n").as_bytes())
                    .and_then(|()| f.sync_all())
                    .map_err(io)?;
                return Ok(Self(hex));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        Self::read(path)
    }

    /// Reads an existing token file, with the same checks (the client's
    /// side: `cfdp ctl --tcp`).
    pub fn read(path: &Path) -> Result<Self, TokenError> {
        let io = |source| TokenError::Io {
            path: path.to_path_buf(),
            source,
        };
        use crate::files::SecretError;
        let raw = crate::files::read_secret(path, 4096).map_err(|e| match e {
            SecretError::Io(e) => io(e),
            SecretError::NotAFile => io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )),
            SecretError::NotOwned { owner } => TokenError::NotOwned {
                path: path.to_path_buf(),
                owner,
            },
            SecretError::TooOpen { mode } => TokenError::TooOpen {
                path: path.to_path_buf(),
                mode,
            },
        })?;
        let text = String::from_utf8_lossy(&raw);
        let t = text.trim();
        if t.len() < 2 * TOKEN_BYTES {
            return Err(TokenError::TooShort {
                path: path.to_path_buf(),
                found: t.len(),
            });
        }
        Ok(Self(t.to_string()))
    }

    /// The token's text (what a client presents).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token. Constant time in the token's
    /// length (written by hand: one XOR fold; `subtle` would be a
    /// dependency for six lines), so response times do not leak how many
    /// leading characters were right.
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for (i, x) in a.iter().enumerate() {
            diff |= x ^ b.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn created_private_then_read_back_and_checked() {
        let dir_tmp = tempfile::Builder::new()
            .prefix("cfdp-token-")
            .tempdir()
            .unwrap();
        let dir = dir_tmp.path();
        let path = dir.join("control.token");
        let t = Token::load_or_create(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(t.as_str().len(), 2 * TOKEN_BYTES);
        let again = Token::load_or_create(&path).unwrap();
        assert!(again.matches(t.as_str()));
        assert!(!again.matches(&t.as_str()[1..]));
        assert!(!again.matches(""));
        let mut wrong = t.as_str().to_string();
        wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
        assert!(!again.matches(&wrong));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Token::read(&path),
            Err(TokenError::TooOpen { .. })
        ));
    }
}
