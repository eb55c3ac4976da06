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
    /// A password or private key file that is not this user's private
    /// regular file (or is a link).
    #[error("cluster.{field} {}: {source}", path.display())]
    Secret {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: cfdp_control::files::SecretError,
    },
    /// A user and password towards a plain `http://` endpoint: the
    /// password would travel in clear.
    #[error(
        "cluster.user is set, but endpoint {endpoint} is plain http: the password would \
         travel in clear (use https:// with cluster.ca_file)"
    )]
    PasswordInClear { endpoint: String },
    #[error("cluster.password_file {}: empty", path.display())]
    EmptyPassword { path: PathBuf },
}

impl EtcdSecurity {
    /// Whether anything is set (otherwise plain, unauthenticated etcd).
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }

    /// Refuses what would send a secret in clear: a user (and so its
    /// password) towards any endpoint that is not `https://`.
    pub fn check_endpoints(&self, endpoints: &[String]) -> Result<(), SecurityError> {
        if self.user.is_none() {
            return Ok(());
        }
        match endpoints.iter().find(|e| !e.starts_with("https://")) {
            Some(e) => Err(SecurityError::PasswordInClear {
                endpoint: e.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Reads the files this names.
    pub fn load(&self) -> Result<Loaded, SecurityError> {
        let ca_pem = match &self.ca_file {
            Some(p) => Some(read_file("ca_file", p)?),
            None => None,
        };
        let identity = match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => Some((read_file("cert_file", c)?, secret("key_file", k)?)),
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

/// A secret's file (`cfdp_control::files::read_secret`: this user's
/// private regular file, not a link), at most 1 MiB.
fn secret(field: &'static str, path: &Path) -> Result<Vec<u8>, SecurityError> {
    cfdp_control::files::read_secret(path, 1 << 20).map_err(|source| SecurityError::Secret {
        field,
        path: path.to_path_buf(),
        source,
    })
}

/// The password in `path` (first line).
fn password(path: &Path) -> Result<String, SecurityError> {
    let text = String::from_utf8_lossy(&secret("password_file", path)?).into_owned();
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
            Err(SecurityError::Secret {
                field: "password_file",
                source: cfdp_control::files::SecretError::TooOpen { mode: 0o644 },
                ..
            })
        ));
        // A link to the password file is refused, even to a private one.
        let link = dir.join("pw-link");
        std::os::unix::fs::symlink(&pw, &link).unwrap();
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
        let linked = EtcdSecurity {
            password_file: Some(link),
            ..s.clone()
        };
        assert!(matches!(
            linked.load(),
            Err(SecurityError::Secret {
                field: "password_file",
                ..
            })
        ));
        // A user's password never goes to a plain endpoint.
        let plain = ["http://127.0.0.1:2379".to_string()];
        assert!(matches!(
            s.check_endpoints(&plain),
            Err(SecurityError::PasswordInClear { .. })
        ));
        assert!(s
            .check_endpoints(&["https://127.0.0.1:2379".to_string()])
            .is_ok());
        assert!(EtcdSecurity::default().check_endpoints(&plain).is_ok());
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
