//! How a node and `cfdp ctl --etcd` prove who they are to etcd, and make
//! sure the etcd they talk to is the fleet's.
//!
//! Whoever can write under the fleet's prefix sets every node's rules, so
//! a production fleet runs etcd with TLS and client certificates
//! (`--client-cert-auth`) and with etcd's own authentication on: a user
//! whose role grants read-write on the fleet's prefix only. cfdp takes
//! both: [`EtcdSecurity`] names the CA that etcd's server certificate must
//! chain to (the endpoints are then `https://`), the client certificate and
//! key, and the user with a password file. Plain `http://` without a user
//! stays possible for a lab, as etcd itself allows it.

use std::path::{Path, PathBuf};

/// TLS and authentication towards etcd (`[cluster]` `ca_file`,
/// `cert_file`, `key_file`, `user`, `password_file`; `cfdp ctl --etcd-*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    /// The CA certificate (PEM) etcd's server certificate must chain to.
    pub ca_file: Option<PathBuf>,
    /// This client's certificate and key (PEM), for etcd's
    /// `--client-cert-auth`; both or neither.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The etcd user (etcd's auth enabled).
    pub user: Option<String>,
    /// The file holding the user's password: this user's, not readable by
    /// others (mode 0600 or stricter).
    pub password_file: Option<PathBuf>,
}

/// What [`EtcdSecurity`] names, read from its files.
#[derive(Clone, Default)]
pub struct Loaded {
    pub ca_pem: Option<Vec<u8>>,
    /// Certificate and key PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// User and password.
    pub user: Option<(String, String)>,
}

/// Why the TLS or authentication settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("cluster.{field} {}: {source}", path.display())]
    Read {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cluster.cert_file and cluster.key_file go together: one is missing")]
    HalfIdentity,
    #[error("cluster.user needs cluster.password_file, and the other way round")]
    HalfUser,
    #[error("cluster.password_file {}: readable by other users (mode {mode:o}): make it 0600", path.display())]
    PasswordFileOpen { path: PathBuf, mode: u32 },
    #[error("cluster.password_file {}: empty", path.display())]
    EmptyPassword { path: PathBuf },
}

impl EtcdSecurity {
    /// Whether anything is set (otherwise plain, unauthenticated etcd).
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }

    /// Reads the files this names.
    pub fn load(&self) -> Result<Loaded, SecurityError> {
        let ca_pem = match &self.ca_file {
            Some(p) => Some(read_file("ca_file", p)?),
            None => None,
        };
        let identity = match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => Some((read_file("cert_file", c)?, read_file("key_file", k)?)),
            (None, None) => None,
            _ => return Err(SecurityError::HalfIdentity),
        };
        let user = match (&self.user, &self.password_file) {
            (Some(u), Some(p)) => Some((u.clone(), password(p)?)),
            (None, None) => None,
            _ => return Err(SecurityError::HalfUser),
        };
        Ok(Loaded {
            ca_pem,
            identity,
            user,
        })
    }
}

/// The contents of the file `field` names.
fn read_file(field: &'static str, path: &Path) -> Result<Vec<u8>, SecurityError> {
    std::fs::read(path).map_err(|source| SecurityError::Read {
        field,
        path: path.to_path_buf(),
        source,
    })
}

/// The password in `path` (first line), refused when others can read it.
fn password(path: &Path) -> Result<String, SecurityError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|source| SecurityError::Read {
        field: "password_file",
        path: path.to_path_buf(),
        source,
    })?;
    if meta.mode() & 0o077 != 0 {
        return Err(SecurityError::PasswordFileOpen {
            path: path.to_path_buf(),
            mode: meta.mode() & 0o777,
        });
    }
    let text = String::from_utf8_lossy(&read_file("password_file", path)?).into_owned();
    let pw = text.lines().next().unwrap_or("").to_string();
    if pw.is_empty() {
        return Err(SecurityError::EmptyPassword {
            path: path.to_path_buf(),
        });
    }
    Ok(pw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn halves_and_open_password_files_are_refused() {
        let dir_tmp = tempfile::Builder::new()
            .prefix("cfdp-etcd-sec-")
            .tempdir()
            .unwrap();
        let dir = dir_tmp.path();
        let pw = dir.join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).unwrap();
        let s = EtcdSecurity {
            user: Some("node".into()),
            password_file: Some(pw.clone()),
            ..EtcdSecurity::default()
        };
        assert!(matches!(
            s.load(),
            Err(SecurityError::PasswordFileOpen { .. })
        ));
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
        let l = s.load().unwrap();
        assert_eq!(l.user, Some(("node".into(), "s3cret".into())));
        let half = EtcdSecurity {
            cert_file: Some(pw.clone()),
            ..EtcdSecurity::default()
        };
        assert!(matches!(half.load(), Err(SecurityError::HalfIdentity)));
        assert!(EtcdSecurity::default().is_plain());
    }
}
