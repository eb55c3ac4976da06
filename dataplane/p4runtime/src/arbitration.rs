//! Who may write: P4Runtime's primary election. Every controller opens a
//! stream and sends an arbitration update with an election id; the
//! highest id is the primary and the only client whose writes are taken.
//! Each client hears, on its stream, whether it is primary (status OK) or
//! not (ALREADY_EXISTS, with the primary's id), and again whenever the
//! primary changes (a higher id arrives, the primary leaves).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc::UnboundedSender;
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

type Outbox = UnboundedSender<Result<p4::StreamMessageResponse, Status>>;

struct Client {
    election: u128,
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

    /// The primary's election id, if any client is connected (0 cannot be
    /// primary).
    fn primary(clients: &HashMap<u64, Client>) -> Option<u128> {
        clients
            .values()
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
                outbox: outbox.clone(),
            },
        );
        self.metrics.set_controllers(clients.len());
        let after = Self::primary(&clients);
        // A new primary concerns everyone; otherwise only the asker.
        self.tell(&clients, if before == after { Some(conn) } else { None });
        Ok(())
    }

    /// Stream `conn` closed.
    pub fn leave(&self, conn: u64) {
        let mut clients = self.lock();
        let before = Self::primary(&clients);
        let removed = clients.remove(&conn).is_some();
        self.metrics.set_controllers(clients.len());
        if removed && before != Self::primary(&clients) {
            self.tell(&clients, None);
        }
    }

    /// Sends each client (`only`: that one) its arbitration status.
    fn tell(&self, clients: &HashMap<u64, Client>, only: Option<u64>) {
        let primary = Self::primary(clients);
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
                    message: "not primary: a client with a higher election id is".to_string(),
                    details: Vec::new(),
                }
            };
            let update = p4::MasterArbitrationUpdate {
                device_id: self.device_id,
                role: None,
                election_id: Some(uint128(primary.unwrap_or(c.election))),
                status: Some(status),
            };
            // A closed stream is removed by its own task.
            let _ = c.outbox.send(Ok(p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Arbitration(update)),
            }));
        }
    }
}
