//! Who may write: P4Runtime's primary election. Every controller opens a
//! stream and sends an arbitration update with an election id; the
//! highest id is the primary and the only client whose writes are taken.
//! Each client hears, on its stream, whether it is primary (status OK) or
//! not (ALREADY_EXISTS, with the primary's id), and again whenever the
//! primary changes (a higher id arrives, the primary leaves).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc::Sender;
use tonic::{Code, Status};

use crate::metrics::P4Metrics;
use crate::proto::google::rpc;
use crate::proto::p4::v1 as p4;

/// An election id as the spec carries it.
pub fn election(id: Option<&p4::Uint128>) -> u128 {
    id.map_or(0, |u| (u128::from(u.high) << 64) | u128::from(u.low))
}

fn uint128(e: u128) -> p4::Uint128 {
    p4::Uint128 {
        high: (e >> 64) as u64,
        low: e as u64,
    }
}

/// A stream's answers. Bounded ([`OUTBOX`]): a client that does not read
/// its stream loses its place instead of growing the queue.
pub type Outbox = Sender<Result<p4::StreamMessageResponse, Status>>;

/// Answers a stream may leave unread before it is dropped.
pub const OUTBOX: usize = 8;

struct Client {
    election: u128,
    /// Whether its certificate may write (`allowed_clients`): only such a
    /// client can be primary.
    writer: bool,
    /// The only strong sender of its stream: removing the client ends the
    /// stream.
    outbox: Outbox,
}

/// The clients of one device and their elections.
pub struct Arbiter {
    device_id: u64,
    max_clients: usize,
    clients: Mutex<HashMap<u64, Client>>,
    metrics: P4Metrics,
}

impl Arbiter {
    pub fn new(device_id: u64, max_clients: usize, metrics: P4Metrics) -> Self {
        Self {
            device_id,
            max_clients,
            clients: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Client>> {
        // A panic while holding it cannot leave the map half-changed (each
        // change is one insert or remove): keep serving.
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The primary's election id, if any client that may write is
    /// connected (0 cannot be primary).
    fn primary(clients: &HashMap<u64, Client>) -> Option<u128> {
        clients
            .values()
            .filter(|c| c.writer)
            .map(|c| c.election)
            .filter(|&e| e > 0)
            .max()
    }

    /// Whether `election` is the primary's: writes need it.
    pub fn check_primary(&self, election: u128) -> Result<(), Status> {
        match Self::primary(&self.lock()) {
            Some(p) if p == election => Ok(()),
            Some(_) => Err(Status::permission_denied(format!(
                "election id {election} is not the primary's: only the primary client may write"
            ))),
            None => Err(Status::permission_denied(
                "no primary: open a StreamChannel and send an arbitration update first",
            )),
        }
    }

    /// Stream `conn` asks for `update`'s election (its first or a later
    /// arbitration update). Every client hears the outcome when the
    /// primary changed; `conn` hears it in any case.
    pub fn arbitrate(
        &self,
        conn: u64,
        update: &p4::MasterArbitrationUpdate,
        writer: bool,
        outbox: &Outbox,
    ) -> Result<(), Status> {
        if update.device_id != self.device_id {
            return Err(Status::not_found(format!(
                "device {}: this server is device {}",
                update.device_id, self.device_id
            )));
        }
        if update
            .role
            .as_ref()
            .is_some_and(|r| !r.name.is_empty() || r.id != 0)
        {
            return Err(Status::unimplemented(
                "roles: cfdp has one, the default role (leave role unset)",
            ));
        }
        let e = election(update.election_id.as_ref());
        let mut clients = self.lock();
        if clients.iter().any(|(&c, x)| c != conn && x.election == e) {
            return Err(Status::invalid_argument(format!(
                "election id {e} is held by another client"
            )));
        }
        if !clients.contains_key(&conn) && clients.len() >= self.max_clients {
            return Err(Status::resource_exhausted(format!(
                "{} controllers are connected, the most this server takes",
                self.max_clients
            )));
        }
        let before = Self::primary(&clients);
        clients.insert(
            conn,
            Client {
                election: e,
                writer,
                outbox: outbox.clone(),
            },
        );
        self.metrics.set_controllers(clients.len());
        let after = Self::primary(&clients);
        // A new primary concerns everyone; otherwise only the asker.
        self.tell(
            &mut clients,
            if before == after { Some(conn) } else { None },
        );
        Ok(())
    }

    /// Stream `conn` closed.
    pub fn leave(&self, conn: u64) {
        let mut clients = self.lock();
        let before = Self::primary(&clients);
        let removed = clients.remove(&conn).is_some();
        self.metrics.set_controllers(clients.len());
        if removed && before != Self::primary(&clients) {
            self.tell(&mut clients, None);
        }
    }

    /// Sends each client (`only`: that one) its arbitration status. A
    /// client whose stream is full (it does not read) or closed is
    /// removed, which ends its stream; if it was the primary, everyone
    /// hears of the new one.
    fn tell(&self, clients: &mut HashMap<u64, Client>, only: Option<u64>) {
        loop {
            let before = Self::primary(clients);
            let gone = self.tell_once(clients, only);
            if gone.is_empty() {
                return;
            }
            for conn in gone {
                clients.remove(&conn);
            }
            self.metrics.set_controllers(clients.len());
            if before == Self::primary(clients) {
                return;
            }
        }
    }

    /// One round of [`Self::tell`]: the clients that could not take it.
    fn tell_once(&self, clients: &HashMap<u64, Client>, only: Option<u64>) -> Vec<u64> {
        let primary = Self::primary(clients);
        let mut gone = Vec::new();
        for (&conn, c) in clients {
            if only.is_some_and(|o| o != conn) {
                continue;
            }
            let status = if primary == Some(c.election) {
                rpc::Status {
                    code: Code::Ok as i32,
                    message: "primary".to_string(),
                    details: Vec::new(),
                }
            } else {
                rpc::Status {
                    code: Code::AlreadyExists as i32,
                    message: if c.writer {
                        "not primary: a client with a higher election id is"
                    } else {
                        "not primary: this client's certificate is not in allowed_clients (it may read)"
                    }
                    .to_string(),
                    details: Vec::new(),
                }
            };
            let update = p4::MasterArbitrationUpdate {
                device_id: self.device_id,
                role: None,
                election_id: Some(uint128(primary.unwrap_or(c.election))),
                status: Some(status),
            };
            let sent = c.outbox.try_send(Ok(p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Arbitration(update)),
            }));
            if sent.is_err() {
                gone.push(conn);
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(e: u64) -> p4::MasterArbitrationUpdate {
        p4::MasterArbitrationUpdate {
            device_id: 1,
            election_id: Some(uint128(u128::from(e))),
            ..Default::default()
        }
    }

    /// A client that sends arbitration updates and never reads its stream
    /// fills its bounded outbox, then loses its place (and its stream,
    /// whose last strong sender the arbiter held): the queue never grows
    /// past [`OUTBOX`].
    #[test]
    fn a_client_that_does_not_read_is_dropped() {
        let a = Arbiter::new(1, 8, P4Metrics::default());
        let (tx, rx) = tokio::sync::mpsc::channel(OUTBOX);
        for _ in 0..OUTBOX {
            a.arbitrate(1, &update(5), true, &tx).unwrap();
        }
        assert!(a.check_primary(5).is_ok());
        a.arbitrate(1, &update(5), true, &tx).unwrap();
        assert!(
            a.check_primary(5).is_err(),
            "dropped when its outbox was full"
        );
        assert_eq!(rx.len(), OUTBOX);
    }

    /// A client whose certificate may not write is never primary, however
    /// high its election id.
    #[test]
    fn only_writers_are_primary() {
        let a = Arbiter::new(1, 8, P4Metrics::default());
        let (tx, _rx) = tokio::sync::mpsc::channel(OUTBOX);
        a.arbitrate(1, &update(u64::MAX), false, &tx).unwrap();
        assert!(a.check_primary(u128::from(u64::MAX)).is_err());
        a.arbitrate(2, &update(3), true, &tx).unwrap();
        assert!(a.check_primary(3).is_ok());
    }
}
