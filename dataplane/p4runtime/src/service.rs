//! The P4Runtime service: each RPC checked (device, primary), translated
//! (`entry`) and handed to the control thread through its typed handle, so
//! that a Write takes the same path as a socket batch: the rule store's
//! checks, the journal, the batch's atomicity.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cfdp_control::api::{KeyedBatch, KeyedUpdate};
use cfdp_control::{ControlError, ControlHandle};
use cfdp_rules::{Atomicity, Code as RuleCode, UpdateResult};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

use crate::arbitration::{election, Arbiter};
use crate::entry::{self, EntryError};
use crate::metrics::P4Metrics;
use crate::pipeline;
use crate::proto::google::rpc;
use crate::proto::p4::config::v1::P4Info;
use crate::proto::p4::v1 as p4;

mod read;

pub use read::MAX_READ_ENTITIES;
use read::{entry_code, read_queries};

/// The P4Runtime version cfdp's messages follow.
pub const API_VERSION: &str = "1.4.1";

/// Rules read from the control thread at a time for a Read.
const READ_PAGE: u64 = 1000;
/// Entities in one ReadResponse at most: with the answer channel's two
/// places, what a Read in flight holds however large the set.
pub const READ_CHUNK: usize = 128;

/// The service's state, shared by every call.
pub struct Service {
    control: ControlHandle,
    metrics: P4Metrics,
    arbiter: Arc<Arbiter>,
    device_id: u64,
    p4info: P4Info,
    /// The cookie of the last accepted SetForwardingPipelineConfig.
    cookie: Mutex<Option<u64>>,
    next_conn: AtomicU64,
    /// `allowed_clients` (empty: every client may write).
    allowed: Vec<rustls_pki_types::DnsName<'static>>,
}

impl Service {
    pub fn new(
        control: ControlHandle,
        device_id: u64,
        max_controllers: usize,
        allowed: Vec<rustls_pki_types::DnsName<'static>>,
        metrics: P4Metrics,
    ) -> Self {
        Self {
            control,
            arbiter: Arc::new(Arbiter::new(device_id, max_controllers, metrics.clone())),
            metrics,
            device_id,
            p4info: pipeline::p4info(),
            cookie: Mutex::new(None),
            next_conn: AtomicU64::new(1),
            allowed,
        }
    }

    fn check_device(&self, id: u64) -> Result<(), Status> {
        if id == self.device_id {
            Ok(())
        } else {
            Err(Status::not_found(format!(
                "device {id}: this server is device {}",
                self.device_id
            )))
        }
    }

    /// Runs a blocking control-thread call off the async workers.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(ControlHandle) -> Result<T, ControlError> + Send + 'static,
    ) -> Result<T, Status> {
        let control = self.control.clone();
        tokio::task::spawn_blocking(move || f(control))
            .await
            .map_err(|e| Status::internal(format!("control call: {e}")))?
            .map_err(|e| control_status(&e))
    }
}

/// The status for a whole request the control thread refused.
fn control_status(e: &ControlError) -> Status {
    let msg = cfdp_control::api::error_chain(e);
    match e {
        ControlError::BadBatch(_) | ControlError::InvalidParams(_) => Status::invalid_argument(msg),
        ControlError::Refused(_) | ControlError::FleetOwned { .. } => {
            Status::failed_precondition(msg)
        }
        ControlError::NotFound(_) => Status::not_found(msg),
        ControlError::ShuttingDown | ControlError::Stopped | ControlError::Dropped => {
            Status::unavailable(msg)
        }
        _ => Status::internal(msg),
    }
}

fn rule_code(c: RuleCode) -> Code {
    match c {
        RuleCode::Ok => Code::Ok,
        RuleCode::AlreadyExists => Code::AlreadyExists,
        RuleCode::NotFound => Code::NotFound,
        RuleCode::InvalidArgument => Code::InvalidArgument,
        RuleCode::CapacityExhausted => Code::ResourceExhausted,
        RuleCode::Aborted => Code::Aborted,
    }
}

/// One Write update as the control thread takes it, or why it cannot be.
fn keyed(u: &p4::Update) -> Result<KeyedUpdate, EntryError> {
    let e = match u.entity.as_ref().and_then(|e| e.entity.as_ref()) {
        Some(p4::entity::Entity::TableEntry(e)) => e,
        Some(p4::entity::Entity::DirectCounterEntry(_)) => {
            return Err(unimplemented(
                "entity",
                "direct counters are read-only in cfdp",
            ))
        }
        None => {
            return Err(unimplemented(
                "entity",
                "cfdp's pipeline has table entries and direct counters only",
            ))
        }
    };
    let m = entry::entry_match(e)?;
    match p4::update::Type::try_from(u.r#type) {
        Ok(p4::update::Type::Insert) => Ok(KeyedUpdate::Insert(m, entry::entry_action(e)?)),
        Ok(p4::update::Type::Modify) => Ok(KeyedUpdate::Modify(m, entry::entry_action(e)?)),
        Ok(p4::update::Type::Delete) => Ok(KeyedUpdate::Delete(m)),
        _ => Err(EntryError {
            code: entry::Code::InvalidArgument,
            field: "type".into(),
            message: format!("{}: not INSERT, MODIFY or DELETE", u.r#type),
        }),
    }
}

/// An update type's name in the metrics.
fn op_name(t: i32) -> &'static str {
    match p4::update::Type::try_from(t) {
        Ok(p4::update::Type::Insert) => "insert",
        Ok(p4::update::Type::Modify) => "modify",
        Ok(p4::update::Type::Delete) => "delete",
        _ => "unspecified",
    }
}

fn unimplemented(field: &str, message: &str) -> EntryError {
    EntryError {
        code: entry::Code::Unimplemented,
        field: field.into(),
        message: message.into(),
    }
}

/// A Write's failure: UNKNOWN with one p4.v1.Error per update, in order
/// (OK for the ones that took effect), as the specification asks.
fn write_errors(results: &[(Code, String)]) -> Status {
    let details = results
        .iter()
        .map(|(code, message)| prost_types::Any {
            type_url: "type.googleapis.com/p4.v1.Error".to_string(),
            value: p4::Error {
                canonical_code: *code as i32,
                message: message.clone(),
                space: String::new(),
                code: 0,
                details: None,
            }
            .encode_to_vec(),
        })
        .collect();
    let failed = results.iter().filter(|(c, _)| *c != Code::Ok).count();
    let message = format!("{failed} of {} updates failed", results.len());
    let status = rpc::Status {
        code: Code::Unknown as i32,
        message: message.clone(),
        details,
    };
    Status::with_details(Code::Unknown, message, status.encode_to_vec().into())
}

fn atomicity(a: i32) -> Result<Atomicity, Status> {
    use p4::write_request::Atomicity as A;
    match A::try_from(a) {
        Ok(A::ContinueOnError) => Ok(Atomicity::ContinueOnError),
        Ok(A::RollbackOnError) => Ok(Atomicity::RollbackOnError),
        Ok(A::DataplaneAtomic) => Ok(Atomicity::DataplaneAtomic),
        Err(_) => Err(Status::invalid_argument(format!(
            "atomicity: {a} is not one"
        ))),
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The RPCs' bodies; the trait implementation below counts each answer.
impl Service {
    async fn do_write(
        &self,
        request: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        self.may_write(&request)?;
        let w = request.into_inner();
        self.check_device(w.device_id)?;
        if !w.role.is_empty() || w.role_id != 0 {
            return Err(Status::unimplemented(
                "roles: cfdp has the default role only",
            ));
        }
        self.arbiter
            .check_primary(election(w.election_id.as_ref()))?;
        let atomicity = atomicity(w.atomicity)?;
        let translated: Vec<_> = w.updates.iter().map(keyed).collect();
        let bad = translated.iter().any(Result::is_err);
        let mut results: Vec<(Code, String)> = translated
            .iter()
            .map(|t| match t {
                Ok(_) => (Code::Ok, String::new()),
                Err(e) => (entry_code(e), e.to_string()),
            })
            .collect();
        if bad && atomicity.all_or_nothing() {
            for r in results.iter_mut().filter(|r| r.0 == Code::Ok) {
                *r = (Code::Aborted, cfdp_rules::decide::ABORTED.into());
            }
            for (u, (code, _)) in w.updates.iter().zip(&results) {
                self.metrics.update(op_name(u.r#type), *code);
            }
            return Err(write_errors(&results));
        }
        let (positions, updates): (Vec<usize>, Vec<KeyedUpdate>) = translated
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().ok().map(|u| (i, *u)))
            .unzip();
        if !updates.is_empty() {
            let batch = KeyedBatch { atomicity, updates };
            let report = self.call(move |c| c.apply_keyed(batch)).await?.report;
            for (&i, r) in positions.iter().zip(&report.results) {
                let UpdateResult { code, message } = r;
                results[i] = (rule_code(*code), message.clone());
            }
        }
        for (u, (code, _)) in w.updates.iter().zip(&results) {
            self.metrics.update(op_name(u.r#type), *code);
        }
        if results.iter().all(|r| r.0 == Code::Ok) {
            Ok(Response::new(p4::WriteResponse {}))
        } else {
            Err(write_errors(&results))
        }
    }

    async fn do_read(
        &self,
        request: Request<p4::ReadRequest>,
    ) -> Result<Response<BoxStream<p4::ReadResponse>>, Status> {
        let r = request.into_inner();
        self.check_device(r.device_id)?;
        let queries = read_queries(&r.entities)?;
        // The rule set is read a page at a time and answered as it goes, a
        // bounded channel ahead of the client: a read of a million rules
        // holds a few pages, not the whole set (it is not one snapshot: a
        // batch applied meanwhile may show in the later pages only, as with
        // the socket's `rules`).
        let (tx, rx) = mpsc::channel(2);
        let control = self.control.clone();
        tokio::spawn(async move {
            let mut offset = 0;
            loop {
                let c = control.clone();
                let page = tokio::task::spawn_blocking(move || c.rules(offset, READ_PAGE))
                    .await
                    .map_err(|e| Status::internal(format!("control call: {e}")))
                    .and_then(|r| r.map_err(|e| control_status(&e)));
                let page = match page {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                let last = (page.rules.len() as u64) < READ_PAGE;
                offset += page.rules.len() as u64;
                // Responses of at most READ_CHUNK entities, per query and
                // page: what a Read holds is one page of rules and two
                // chunks, however many queries the request holds.
                for q in &queries {
                    let mut answers = q.answers(&page.rules).peekable();
                    while answers.peek().is_some() {
                        let entities = answers.by_ref().take(READ_CHUNK).collect();
                        if tx.send(Ok(p4::ReadResponse { entities })).await.is_err() {
                            return; // the client went away
                        }
                    }
                }
                if last {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn do_set_forwarding_pipeline_config(
        &self,
        request: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        use p4::set_forwarding_pipeline_config_request::Action as A;
        self.may_write(&request)?;
        let r = request.into_inner();
        self.check_device(r.device_id)?;
        self.arbiter
            .check_primary(election(r.election_id.as_ref()))?;
        let action = A::try_from(r.action).unwrap_or(A::Unspecified);
        if action == A::Commit {
            return Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}));
        }
        if action == A::Unspecified {
            return Err(Status::invalid_argument("action: unspecified"));
        }
        let config = r.config.unwrap_or_default();
        crate::text::same_pipeline(config.p4info.as_ref(), &self.p4info)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if action != A::Verify {
            *self
                .cookie
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                config.cookie.map(|c| c.cookie);
        }
        Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}))
    }

    async fn do_get_forwarding_pipeline_config(
        &self,
        request: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        use p4::get_forwarding_pipeline_config_request::ResponseType as T;
        let r = request.into_inner();
        self.check_device(r.device_id)?;
        let cookie = self
            .cookie
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .map(|cookie| p4::forwarding_pipeline_config::Cookie { cookie });
        let kind = T::try_from(r.response_type).unwrap_or(T::All);
        let config = p4::ForwardingPipelineConfig {
            p4info: matches!(kind, T::All | T::P4infoAndCookie).then(|| self.p4info.clone()),
            p4_device_config: prost::bytes::Bytes::new(),
            cookie,
        };
        Ok(Response::new(p4::GetForwardingPipelineConfigResponse {
            config: Some(config),
        }))
    }

    async fn do_stream_channel(
        &self,
        request: Request<Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<BoxStream<p4::StreamMessageResponse>>, Status> {
        let writer = self.may_write(&request).is_ok();
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(crate::arbitration::OUTBOX);
        // The arbiter holds the only strong sender once the client is
        // registered: when it drops a client that does not read, the
        // stream ends. This task keeps a weak one for its own errors.
        let mut own = Some(tx);
        let weak = own.as_ref().expect("just made").downgrade();
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let arbiter = Arc::clone(&self.arbiter);
        tokio::spawn(async move {
            while let Some(m) = inbound.next().await {
                let Some(tx) = own.take().or_else(|| weak.upgrade()) else {
                    break; // dropped for not reading its answers
                };
                let outcome = match m.map(|m| m.update) {
                    Ok(Some(p4::stream_message_request::Update::Arbitration(a))) => {
                        arbiter.arbitrate(conn, &a, writer, &tx)
                    }
                    Ok(_) => Err(Status::unimplemented(
                        "stream: cfdp takes arbitration updates only (no packet I/O, no digests)",
                    )),
                    Err(e) => Err(e),
                };
                if let Err(e) = outcome {
                    let _ = tx.try_send(Err(e));
                    break;
                }
                drop(tx);
            }
            arbiter.leave(conn);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    /// Whether the client of `request` may write: its certificate names
    /// one of `allowed_clients` (any client when that list is empty).
    fn may_write<T>(&self, request: &Request<T>) -> Result<(), Status> {
        if self.allowed.is_empty() {
            return Ok(());
        }
        let denied = || {
            Status::permission_denied(
                "this client's certificate is not in p4runtime.allowed_clients: it may read, \
                 not write or be primary",
            )
        };
        let certs = request.peer_certs().ok_or_else(denied)?;
        let leaf = certs.first().ok_or_else(denied)?;
        let cert = webpki::EndEntityCert::try_from(leaf).map_err(|_| denied())?;
        let named = self.allowed.iter().any(|n| {
            cert.verify_is_valid_for_subject_name(&rustls_pki_types::ServerName::DnsName(n.clone()))
                .is_ok()
        });
        if named {
            Ok(())
        } else {
            Err(denied())
        }
    }

    async fn do_capabilities(
        &self,
        _request: Request<p4::CapabilitiesRequest>,
    ) -> Result<Response<p4::CapabilitiesResponse>, Status> {
        Ok(Response::new(p4::CapabilitiesResponse {
            p4runtime_api_version: API_VERSION.to_string(),
        }))
    }
}

/// Counts a call's answer by its code.
fn counted<T>(m: &P4Metrics, rpc: &'static str, r: Result<T, Status>) -> Result<T, Status> {
    m.call(rpc, r.as_ref().map_or_else(Status::code, |_| Code::Ok));
    r
}

#[tonic::async_trait]
impl p4::p4_runtime_server::P4Runtime for Service {
    async fn write(
        &self,
        request: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        counted(&self.metrics, "Write", self.do_write(request).await)
    }

    type ReadStream = BoxStream<p4::ReadResponse>;

    async fn read(
        &self,
        request: Request<p4::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        counted(&self.metrics, "Read", self.do_read(request).await)
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        let r = self.do_set_forwarding_pipeline_config(request).await;
        counted(&self.metrics, "SetForwardingPipelineConfig", r)
    }

    async fn get_forwarding_pipeline_config(
        &self,
        request: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        let r = self.do_get_forwarding_pipeline_config(request).await;
        counted(&self.metrics, "GetForwardingPipelineConfig", r)
    }

    type StreamChannelStream = BoxStream<p4::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        request: Request<Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        counted(
            &self.metrics,
            "StreamChannel",
            self.do_stream_channel(request).await,
        )
    }

    async fn capabilities(
        &self,
        request: Request<p4::CapabilitiesRequest>,
    ) -> Result<Response<p4::CapabilitiesResponse>, Status> {
        counted(
            &self.metrics,
            "Capabilities",
            self.do_capabilities(request).await,
        )
    }
}
