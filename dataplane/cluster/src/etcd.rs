//! A blocking face on the `etcd-client` crate: one current-thread tokio
//! runtime per [`Etcd`], each call `block_on` — the node agent and `cfdp
//! ctl` are plain threads and processes, and nothing else in cfdp is async.

use std::time::Duration;

use crate::error::ClusterError;
use crate::security::EtcdSecurity;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream, Watcher,
};

/// A key's value and mod revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

impl Kv {
    /// The rule stored here: its JSON and the parsed rule, or what is
    /// wrong with it, naming the key.
    pub fn rule(&self) -> Result<(serde_json::Value, cfdp_rules::Rule), ClusterError> {
        let v: serde_json::Value =
            serde_json::from_slice(&self.value).map_err(|source| ClusterError::NotJson {
                key: self.key.clone(),
                source,
            })?;
        let r = cfdp_rules::parse_rule(&v, None).map_err(|source| ClusterError::BadRule {
            key: self.key.clone(),
            source,
        })?;
        Ok((v, r))
    }
}

/// One connection to an etcd cluster.
pub struct Etcd {
    rt: tokio::runtime::Runtime,
    client: Client,
}

/// Largest watch message accepted: a node catching up gets past revisions
/// in few, large messages (16 MB for 100 k updates); one larger than this
/// fails the watch, and the node resyncs by paged reads instead. (It was
/// 1 GiB: whoever could write the fleet's keys could make every node take
/// that much memory.)
const MAX_MESSAGE: usize = 64 << 20;

/// Keys per page of a prefix read.
const PAGE: i64 = 5_000;

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(b) = end.pop() {
        if b < 0xff {
            end.push(b + 1);
            return end;
        }
    }
    vec![0] // every key
}

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

fn err(what: &str, source: etcd_client::Error) -> ClusterError {
    ClusterError::Etcd {
        what: what.to_string(),
        source,
    }
}

impl Etcd {
    /// Connects to `endpoints` (`http://host:port`, or `https://` with a
    /// CA in `security`), authenticating as `security` says.
    pub fn connect(endpoints: &[String], security: &EtcdSecurity) -> Result<Self, ClusterError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ClusterError::Runtime)?;
        security.check_endpoints(endpoints)?;
        let loaded = security.load()?;
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT);
        if loaded.ca_pem.is_some() || loaded.identity.is_some() {
            let mut tls = etcd_client::TlsOptions::new();
            if let Some(ca) = &loaded.ca_pem {
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &loaded.identity {
                tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(tls);
        }
        if let Some((user, password)) = loaded.user {
            opts = opts.with_user(user, password);
        }
        let client = rt
            .block_on(Client::connect(endpoints, Some(opts)))
            .map_err(|e| err(&format!("connect to {}", endpoints.join(",")), e))?;
        let mut e = Etcd { rt, client };
        // Connecting is lazy: ask something now, so a wrong address (or
        // certificate, or password) is reported here. The member's status
        // needs no key permission: a user granted only the fleet's prefix
        // may ask it.
        e.rt.block_on(e.client.status())
            .map_err(|err_| err(&format!("connect to {}", endpoints.join(",")), err_))?;
        Ok(e)
    }

    /// Every key under `prefix`, with the store's revision at the read:
    /// read in pages of `PAGE` keys, all at that one revision (a rule set
    /// of 100 k rules is ~20 MB, over gRPC's 4 MiB message limit).
    pub fn get_prefix(&mut self, prefix: &str) -> Result<(i64, Vec<Kv>), ClusterError> {
        let end = prefix_end(prefix.as_bytes());
        let mut out = Vec::new();
        let mut from = prefix.as_bytes().to_vec();
        let mut rev = 0;
        loop {
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if rev != 0 {
                opts = opts.with_revision(rev);
            }
            let r = self
                .rt
                .block_on(self.client.get(from.clone(), Some(opts)))
                .map_err(|e| err(&format!("get {prefix}*"), e))?;
            if rev == 0 {
                rev = r.header().map_or(0, etcd_client::ResponseHeader::revision);
            }
            out.extend(r.kvs().iter().map(kv));
            match r.kvs().last() {
                Some(last) if r.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok((rev, out)),
            }
        }
    }

    /// The given keys (missing ones are left out), read in transactions of
    /// at most `per_txn` gets.
    pub fn get_many(&mut self, keys: &[String], per_txn: usize) -> Result<Vec<Kv>, ClusterError> {
        let mut out = Vec::new();
        for chunk in keys.chunks(per_txn.max(1)) {
            let ops: Vec<TxnOp> = chunk.iter().map(|k| TxnOp::get(k.as_str(), None)).collect();
            let r = self
                .rt
                .block_on(self.client.txn(Txn::new().and_then(ops)))
                .map_err(|e| err("read", e))?;
            for op in r.op_responses() {
                if let TxnOpResponse::Get(g) = op {
                    out.extend(g.kvs().iter().map(kv));
                }
            }
        }
        Ok(out)
    }

    /// One transaction: if every `guards` key still has its mod revision
    /// (0: absent), the puts and deletes; returns the transaction's
    /// revision, or `None` when a guard failed (nothing written).
    pub fn txn(
        &mut self,
        guards: &[(String, i64)],
        puts: &[(String, String)],
        deletes: &[String],
    ) -> Result<Option<i64>, ClusterError> {
        let compares: Vec<Compare> = guards
            .iter()
            .map(|(k, rev)| Compare::mod_revision(k.as_str(), CompareOp::Equal, *rev))
            .collect();
        let mut ops: Vec<TxnOp> = Vec::with_capacity(puts.len() + deletes.len());
        ops.extend(deletes.iter().map(|k| TxnOp::delete(k.as_str(), None)));
        ops.extend(
            puts.iter()
                .map(|(k, v)| TxnOp::put(k.as_str(), v.as_str(), None)),
        );
        let r = self
            .rt
            .block_on(self.client.txn(Txn::new().when(compares).and_then(ops)))
            .map_err(|e| err("transaction", e))?;
        Ok(r.succeeded()
            .then(|| r.header().map_or(0, etcd_client::ResponseHeader::revision)))
    }

    /// Compacts the store's history up to `revision` (what an operator's
    /// `--auto-compaction-retention` does); watches from before it are
    /// canceled.
    pub fn compact(&mut self, revision: i64) -> Result<(), ClusterError> {
        self.rt
            .block_on(self.client.compact(revision, None))
            .map(|_| ())
            .map_err(|e| err("compact", e))
    }

    /// Puts `key` (under `lease` when not 0).
    pub fn put(&mut self, key: &str, value: &str, lease: i64) -> Result<(), ClusterError> {
        let opts = (lease != 0).then(|| PutOptions::new().with_lease(lease));
        self.rt
            .block_on(self.client.put(key, value, opts))
            .map(|_| ())
            .map_err(|e| err(&format!("put {key}"), e))
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &str) -> Result<(), ClusterError> {
        self.rt
            .block_on(self.client.delete(key, None))
            .map(|_| ())
            .map_err(|e| err(&format!("delete {key}"), e))
    }

    /// A lease of `ttl_s` seconds and its keeper.
    pub fn lease(&mut self, ttl_s: i64) -> Result<Lease, ClusterError> {
        let id = self
            .rt
            .block_on(self.client.lease_grant(ttl_s, None))
            .map_err(|e| err("lease", e))?
            .id();
        let (keeper, stream) = self
            .rt
            .block_on(self.client.lease_keep_alive(id))
            .map_err(|e| err("lease keep-alive", e))?;
        Ok(Lease { id, keeper, stream })
    }

    /// Renews `lease` (its TTL starts again).
    pub fn keep_alive(&mut self, lease: &mut Lease) -> Result<(), ClusterError> {
        self.rt.block_on(async {
            lease
                .keeper
                .keep_alive()
                .await
                .map_err(|e| err("keep-alive", e))?;
            match tokio::time::timeout(REQUEST_TIMEOUT, lease.stream.message()).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => Ok(()),
                Ok(Ok(_)) => Err(ClusterError::Lease("the lease has expired")),
                Ok(Err(e)) => Err(err("keep-alive", e)),
                Err(_) => Err(ClusterError::Lease("no answer")),
            }
        })
    }

    /// Revokes `lease`: its keys go at once.
    pub fn revoke(&mut self, lease: Lease) {
        let _ = self.rt.block_on(self.client.lease_revoke(lease.id));
    }

    /// Watches every key under `prefix` from revision `from` on.
    pub fn watch(&mut self, prefix: &str, from: i64) -> Result<Watch, ClusterError> {
        // A node catching up gets past revisions in few, large messages
        // (16 MB for 100 k updates): over gRPC's 4 MiB default. Not etcd's
        // fragmenting: it would split one revision's events over messages.
        let mut client = self
            .client
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE);
        let (watcher, stream) = self
            .rt
            .block_on(client.watch(
                prefix,
                Some(WatchOptions::new().with_prefix().with_start_revision(from)),
            ))
            .map_err(|e| err(&format!("watch {prefix}*"), e))?;
        Ok(Watch {
            _watcher: watcher,
            stream,
        })
    }

    /// The next watch message within `wait`: `Ok(None)` when none came.
    pub fn next(
        &mut self,
        w: &mut Watch,
        wait: Duration,
    ) -> Result<Option<WatchBatch>, ClusterError> {
        let msg = self
            .rt
            .block_on(async { tokio::time::timeout(wait, w.stream.message()).await });
        let resp = match msg {
            Err(_) => return Ok(None),
            Ok(Err(e)) => return Err(err("watch", e)),
            Ok(Ok(None)) => return Err(ClusterError::WatchEnded),
            Ok(Ok(Some(r))) => r,
        };
        if resp.canceled() {
            return Ok(Some(WatchBatch::Canceled {
                compact_revision: resp.compact_revision(),
                reason: resp.cancel_reason().to_string(),
            }));
        }
        let events = resp
            .events()
            .iter()
            .filter_map(|e| {
                let kv = kv(e.kv()?);
                let put = e.event_type() == etcd_client::EventType::Put;
                Some(Event { put, kv })
            })
            .collect();
        Ok(Some(WatchBatch::Events(events)))
    }
}

/// A granted lease, kept alive by [`Etcd::keep_alive`].
pub struct Lease {
    pub id: i64,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

/// A watch on a prefix.
pub struct Watch {
    _watcher: Watcher,
    stream: WatchStream,
}

/// One change: a put (with the new value) or a delete of `kv.key`, at
/// revision `kv.mod_revision`.
#[derive(Clone, Debug)]
pub struct Event {
    pub put: bool,
    pub kv: Kv,
}

/// What a watch delivered.
pub enum WatchBatch {
    /// Events in revision order.
    Events(Vec<Event>),
    /// The watch ended (e.g. its start revision was compacted away).
    Canceled {
        compact_revision: i64,
        reason: String,
    },
}

fn kv(k: &etcd_client::KeyValue) -> Kv {
    Kv {
        key: String::from_utf8_lossy(k.key()).into_owned(),
        value: k.value().to_vec(),
        mod_revision: k.mod_revision(),
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end(b"/a/rules/"), b"/a/rules0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
