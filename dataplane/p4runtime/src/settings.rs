//! `[p4runtime]` of cfdp's configuration: the P4Runtime listener. One
//! struct holds the keys, their defaults and their checks; the binary
//! composes it without re-declaring a field.

use std::net::SocketAddr;
use std::path::PathBuf;

use cfdp_control::settings::SettingError;
use serde::{Deserialize, Serialize};

use crate::server::{P4Options, TlsFiles};

/// `[p4runtime]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct P4RuntimeSection {
    /// `HOST:PORT`; empty: off.
    pub listen: String,
    /// A non-loopback `listen` is refused unless this is set (and TLS is
    /// given: a controller writes the whole rule set).
    pub allow_remote: bool,
    /// The device id controllers address.
    pub device_id: u64,
    /// Controllers connected at once (each holds a stream).
    pub max_controllers: usize,
    /// This server's certificate and key (PEM); empty: plain gRPC.
    pub tls_cert: String,
    pub tls_key: String,
    /// With it, clients must present a certificate this CA signed.
    pub tls_client_ca: String,
    /// The client certificates (by a DNS name in their subject alternative
    /// names) that may be primary and write; empty: every certificate the
    /// client CA signed. Others the CA signed may read.
    pub allowed_clients: Vec<String>,
    /// Serve without TLS (loopback only; every local user can then program
    /// the rule set). Off: a `listen` without TLS is refused.
    pub insecure_plaintext: bool,
}

impl Default for P4RuntimeSection {
    fn default() -> Self {
        Self {
            listen: String::new(),
            allow_remote: false,
            device_id: 1,
            max_controllers: 8,
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_ca: String::new(),
            allowed_clients: Vec::new(),
            insecure_plaintext: false,
        }
    }
}

fn bad(key: &'static str, value: impl std::fmt::Display, need: &'static str) -> SettingError {
    SettingError::new("p4runtime", key, value, need)
}

impl P4RuntimeSection {
    /// The listener's options, checked; `None` when `listen` is empty.
    pub fn options(&self) -> Result<Option<P4Options>, SettingError> {
        if self.listen.is_empty() {
            return Ok(None);
        }
        let listen: SocketAddr = self
            .listen
            .parse()
            .map_err(|_| bad("listen", &self.listen, "not an IP:port address"))?;
        if !listen.ip().is_loopback() && !self.allow_remote {
            return Err(bad(
                "listen",
                listen,
                "not a loopback address (set p4runtime.allow_remote = true to accept that, \
                 with tls_cert and tls_key: a controller writes the whole rule set)",
            ));
        }
        if self.max_controllers == 0 {
            return Err(bad("max_controllers", 0, "must be at least 1"));
        }
        let path = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        let tls = match (path(&self.tls_cert), path(&self.tls_key)) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca: path(&self.tls_client_ca),
            }),
            (None, None) if self.tls_client_ca.is_empty() => None,
            (None, None) => {
                return Err(bad(
                    "tls_client_ca",
                    &self.tls_client_ca,
                    "only with tls_cert and tls_key",
                ))
            }
            (Some(_), None) => return Err(bad("tls_key", "\"\"", "give it with tls_cert")),
            (None, Some(_)) => return Err(bad("tls_cert", "\"\"", "give it with tls_key")),
        };
        self.check_access(listen, tls.as_ref())?;
        let mut allowed_clients = Vec::with_capacity(self.allowed_clients.len());
        for name in &self.allowed_clients {
            let n = rustls_pki_types::DnsName::try_from(name.as_str())
                .map_err(|_| bad("allowed_clients", format!("{name:?}"), "not a DNS name"))?;
            allowed_clients.push(n.to_owned());
        }
        Ok(Some(P4Options {
            listen,
            device_id: self.device_id,
            max_controllers: self.max_controllers,
            tls,
            allowed_clients,
        }))
    }

    /// Who may connect: TLS unless `insecure_plaintext` (loopback only);
    /// a remote door, or a list of allowed clients, only with client
    /// certificates.
    fn check_access(&self, listen: SocketAddr, tls: Option<&TlsFiles>) -> Result<(), SettingError> {
        let client_ca = tls.is_some_and(|t| t.client_ca.is_some());
        match tls {
            None if !self.insecure_plaintext => {
                return Err(bad(
                    "tls_cert",
                    "\"\"",
                    "a P4Runtime door needs TLS (tls_cert, tls_key, and tls_client_ca so that \
                     only your controllers' certificates get in); insecure_plaintext = true \
                     serves without it on loopback, open to every local user",
                ))
            }
            None if !listen.ip().is_loopback() => {
                return Err(bad(
                    "insecure_plaintext",
                    true,
                    "loopback only: a remote door needs TLS and client certificates",
                ))
            }
            Some(_) if self.insecure_plaintext => {
                return Err(bad(
                    "insecure_plaintext",
                    true,
                    "set together with tls_cert: choose one",
                ))
            }
            _ => {}
        }
        if self.allow_remote && !client_ca {
            return Err(bad(
                "allow_remote",
                true,
                "needs tls_cert, tls_key and tls_client_ca: a controller writes the whole rule set",
            ));
        }
        if !self.allowed_clients.is_empty() && !client_ca {
            return Err(bad(
                "allowed_clients",
                format!("{:?}", self.allowed_clients),
                "needs tls_client_ca: clients are named by their certificates",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(listen: &str) -> P4RuntimeSection {
        P4RuntimeSection {
            listen: listen.into(),
            insecure_plaintext: true,
            ..P4RuntimeSection::default()
        }
    }

    fn tls(listen: &str) -> P4RuntimeSection {
        P4RuntimeSection {
            listen: listen.into(),
            tls_cert: "c.pem".into(),
            tls_key: "k.pem".into(),
            tls_client_ca: "ca.pem".into(),
            ..P4RuntimeSection::default()
        }
    }

    #[test]
    fn no_plaintext_unless_asked_and_then_only_on_loopback() {
        let plain = P4RuntimeSection {
            insecure_plaintext: false,
            ..on("127.0.0.1:9559")
        };
        assert_eq!(plain.options().unwrap_err().key, "tls_cert");
        let remote = P4RuntimeSection {
            allow_remote: true,
            ..on("192.0.2.1:9559")
        };
        assert_eq!(remote.options().unwrap_err().key, "insecure_plaintext");
        let no_ca = P4RuntimeSection {
            allow_remote: true,
            tls_client_ca: String::new(),
            ..tls("192.0.2.1:9559")
        };
        assert_eq!(no_ca.options().unwrap_err().key, "allow_remote");
        let remote_tls = P4RuntimeSection {
            allow_remote: true,
            allowed_clients: vec!["controller.example".into()],
            ..tls("192.0.2.1:9559")
        };
        let o = remote_tls.options().unwrap().unwrap();
        assert_eq!(o.allowed_clients.len(), 1);
        let bad_name = P4RuntimeSection {
            allowed_clients: vec!["not a name".into()],
            ..tls("127.0.0.1:9559")
        };
        assert_eq!(bad_name.options().unwrap_err().key, "allowed_clients");
        let names_without_ca = P4RuntimeSection {
            allowed_clients: vec!["c.example".into()],
            ..on("127.0.0.1:9559")
        };
        assert_eq!(
            names_without_ca.options().unwrap_err().key,
            "allowed_clients"
        );
    }

    #[test]
    fn off_when_listen_is_empty() {
        assert!(P4RuntimeSection::default().options().unwrap().is_none());
    }

    #[test]
    fn refusals_name_their_key() {
        assert_eq!(on("nowhere").options().unwrap_err().key, "listen");
        assert_eq!(on("192.0.2.1:9559").options().unwrap_err().key, "listen");
        let half = P4RuntimeSection {
            tls_cert: "c.pem".into(),
            ..on("127.0.0.1:9559")
        };
        assert_eq!(half.options().unwrap_err().key, "tls_key");
        let ca_alone = P4RuntimeSection {
            tls_client_ca: "ca.pem".into(),
            ..on("127.0.0.1:9559")
        };
        assert_eq!(ca_alone.options().unwrap_err().key, "tls_client_ca");
        let none = P4RuntimeSection {
            max_controllers: 0,
            ..on("127.0.0.1:9559")
        };
        assert_eq!(none.options().unwrap_err().key, "max_controllers");
    }

    #[test]
    fn loopback_plain_is_accepted() {
        let o = on("127.0.0.1:0").options().unwrap().unwrap();
        assert_eq!(o.device_id, 1);
        assert!(o.tls.is_none());
    }
}
