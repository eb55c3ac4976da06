//! P4Runtime against a running `cfdp run`: a Rust gRPC client (always),
//! and the P4 community's p4runtime-shell from Python (when it is
//! installed; `REQUIRE_P4RUNTIME=1` makes its absence a failure, as CI
//! sets it after installing it into a venv named by `P4RUNTIME_PYTHON`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use cfdp_config::RunConfig;
use cfdp_control::client::{Client, Target};
use cfdp_p4runtime::pipeline;
use cfdp_p4runtime::proto::google::rpc;
use cfdp_p4runtime::proto::p4::v1 as p4;
use cfdp_p4runtime::P4RuntimeSection;
use cfdp_testkit::captures as gen;
use p4::p4_runtime_client::P4RuntimeClient;
use prost::Message;
use serde_json::{json, Value};
use tokio_stream::StreamExt;
use tonic::Code;

use cfdp_testkit::dirs::test_dir as tmpdir;

/// `cfdp run` over the pair capture (UDP 10.9.0.1:1000 → 10.9.0.2:2000
/// and 10.9.0.3 → 10.9.0.4) in a loop, with P4Runtime on `port` (both
/// TCP doors on port 0: the node reports the ports it bound, see
/// `cfdp_testkit::child`).
struct Node {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
    metrics: u16,
    port: u16,
}

impl Node {
    fn start(dir: &Path) -> Node {
        Self::start_with(dir, |_| {})
    }

    /// As `start`, the `[p4runtime]` section then set by `p4` (a section
    /// that names a certificate serves TLS, any other plaintext).
    fn start_with(dir: &Path, p4: impl FnOnce(&mut P4RuntimeSection)) -> Node {
        let cap = dir.join("pairs.pcap");
        if !cap.exists() {
            gen::write_pcap(&cap, &gen::pairs(64)).unwrap();
        }
        let socket = dir.join("ctl.sock");
        let cfg = dir.join("cfdp.toml");
        let mut c = cfdp_testkit::node::looping(&cap, 20_000, &socket, &dir.join("state"));
        c.dataplane.workers = 1;
        c.control.metrics = "127.0.0.1:0".into();
        c.p4runtime.listen = "127.0.0.1:0".into();
        c.p4runtime.device_id = 7;
        p4(&mut c.p4runtime);
        c.p4runtime.insecure_plaintext = c.p4runtime.tls_cert.is_empty();
        cfdp_testkit::node::write(&cfg, &c);
        let child = Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("stderr")).unwrap(),
            ))
            .spawn()
            .unwrap();
        let mut n = Node {
            child,
            dir: dir.to_path_buf(),
            socket,
            metrics: 0,
            port: 0,
        };
        cfdp_testkit::child::wait_for_socket(&n.socket, &n.dir.join("stderr"), &mut n.child);
        // `cfdp run` binds P4Runtime before its control socket answers:
        // a script that waits for the socket finds every door open.
        let stderr = n.dir.join("stderr");
        let reported = |n: &mut Node, prefix| {
            cfdp_testkit::child::reported_addr(&stderr, prefix, &mut n.child).port()
        };
        n.port = reported(&mut n, "cfdp: P4Runtime on ");
        n.metrics = reported(&mut n, "cfdp: metrics on ");
        if let Err(e) = std::net::TcpStream::connect(("127.0.0.1", n.port)) {
            panic!("the control socket answers but P4Runtime refuses: {e}");
        }
        n
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// The node's Prometheus export.
    fn scrape(&self) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// The rule set as `cfdp ctl rules` prints it.
    fn ctl_rules(&self) -> Vec<Value> {
        let mut c = Client::connect(&Target::Unix(&self.socket)).unwrap();
        let r = c.call("rules", json!({})).unwrap();
        r["result"]["rules"].as_array().unwrap().clone()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const DEVICE: u64 = 7;

fn uint128(low: u64) -> Option<p4::Uint128> {
    Some(p4::Uint128 { high: 0, low })
}

fn ternary(field_id: u32, value: &[u8], mask: &[u8]) -> p4::FieldMatch {
    p4::FieldMatch {
        field_id,
        field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
            p4::field_match::Ternary {
                value: value.to_vec().into(),
                mask: mask.to_vec().into(),
            },
        )),
    }
}

fn range(field_id: u32, lo: u16, hi: u16) -> p4::FieldMatch {
    p4::FieldMatch {
        field_id,
        field_match_type: Some(p4::field_match::FieldMatchType::Range(
            p4::field_match::Range {
                low: lo.to_be_bytes().to_vec().into(),
                high: hi.to_be_bytes().to_vec().into(),
            },
        )),
    }
}

fn acl_entry(fields: Vec<p4::FieldMatch>, priority: i32, action_id: u32) -> p4::TableEntry {
    p4::TableEntry {
        table_id: pipeline::ACL,
        r#match: fields,
        priority,
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id,
                params: vec![],
            })),
        }),
        ..Default::default()
    }
}

fn write(election: u64, atomicity: i32, updates: Vec<(i32, p4::TableEntry)>) -> p4::WriteRequest {
    p4::WriteRequest {
        device_id: DEVICE,
        election_id: uint128(election),
        atomicity,
        updates: updates
            .into_iter()
            .map(|(t, e)| p4::Update {
                r#type: t,
                entity: Some(p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(e)),
                }),
            })
            .collect(),
        ..Default::default()
    }
}

/// The per-update errors of a failed Write (code, message).
fn update_errors(s: &tonic::Status) -> Vec<(Code, String)> {
    assert_eq!(s.code(), Code::Unknown, "{s:?}");
    let status = rpc::Status::decode(s.details()).expect("google.rpc.Status details");
    status
        .details
        .iter()
        .map(|any| {
            assert_eq!(any.type_url, "type.googleapis.com/p4.v1.Error");
            let e = p4::Error::decode(any.value.as_slice()).unwrap();
            (Code::from(e.canonical_code), e.message)
        })
        .collect()
}

type Stream = (
    tokio::sync::mpsc::Sender<p4::StreamMessageRequest>,
    tonic::Streaming<p4::StreamMessageResponse>,
);

/// Opens a stream channel and asks for `election`; returns the stream and
/// the first arbitration answer's status code.
async fn arbitrate(
    c: &mut P4RuntimeClient<tonic::transport::Channel>,
    election: u64,
) -> (Stream, i32) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::Arbitration(
            p4::MasterArbitrationUpdate {
                device_id: DEVICE,
                election_id: uint128(election),
                ..Default::default()
            },
        )),
    })
    .await
    .unwrap();
    let mut inbound = c
        .stream_channel(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let code = next_arbitration(&mut inbound).await;
    ((tx, inbound), code)
}

async fn next_arbitration(s: &mut tonic::Streaming<p4::StreamMessageResponse>) -> i32 {
    match s.next().await {
        Some(Ok(p4::StreamMessageResponse {
            update: Some(p4::stream_message_response::Update::Arbitration(a)),
        })) => a.status.expect("a status").code,
        other => panic!("expected an arbitration update, got {other:?}"),
    }
}

async fn read_acl(c: &mut P4RuntimeClient<tonic::transport::Channel>) -> Vec<p4::TableEntry> {
    let req = p4::ReadRequest {
        device_id: DEVICE,
        entities: vec![p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry::default())),
        }],
        ..Default::default()
    };
    let mut s = c.read(req).await.unwrap().into_inner();
    let mut out = Vec::new();
    while let Some(r) = s.next().await {
        for e in r.unwrap().entities {
            match e.entity {
                Some(p4::entity::Entity::TableEntry(t)) => out.push(t),
                other => panic!("{other:?}"),
            }
        }
    }
    out
}

const INSERT: i32 = p4::update::Type::Insert as i32;
const DELETE: i32 = p4::update::Type::Delete as i32;
const CONTINUE: i32 = p4::write_request::Atomicity::ContinueOnError as i32;
const ROLLBACK: i32 = p4::write_request::Atomicity::RollbackOnError as i32;

/// Idle TCP connections fill the P4Runtime listener's cap, not the
/// process's file descriptors: past the cap a connection is closed at
/// once, the Unix socket still applies a batch meanwhile, and the slots
/// come back when the idle connections close.
#[tokio::test(flavor = "current_thread")]
async fn idle_connections_are_capped() {
    let dir = tmpdir("p4-cap");
    let node = Node::start_with(&dir, |p| p.max_controllers = 2);
    let port = node.port;
    let cap = cfdp_p4runtime::server::max_connections(2);
    let capabilities = || async move {
        let mut c = P4RuntimeClient::connect(format!("http://127.0.0.1:{port}")).await?;
        c.capabilities(p4::CapabilitiesRequest {}).await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    // An admitted connection hears the server's HTTP/2 settings at once; one
    // past the cap is closed on accept (a read gives 0). Connections are
    // opened until one is refused: that happens at the cap (one earlier
    // while the slot of the start-up probe's connection is still being
    // given back).
    let mut idle = Vec::new();
    let admitted = loop {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 1];
        if std::io::Read::read(&mut s, &mut buf).unwrap() == 0 {
            break idle.len();
        }
        idle.push(s);
        assert!(idle.len() <= cap, "more than the cap ({cap}) admitted");
    };
    assert!(admitted + 1 >= cap, "refused after {admitted} of {cap}");
    let mut c =
        cfdp_control::client::Client::connect(&cfdp_control::client::Target::Unix(&node.socket))
            .unwrap();
    let r = c
        .call(
            "apply",
            serde_json::json!({"updates": [{"op": "insert", "rule": {"id": 3,
                "match": {"dst_prefix": "10.3.0.0/16"}, "action": "drop"}}]}),
        )
        .unwrap();
    assert_eq!(r["result"]["results"][0]["code"], "ok", "{r}");
    drop(idle);
    let mut tries = 0;
    while capabilities().await.is_err() {
        tries += 1;
        assert!(tries < 500, "slots never came back");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
async fn a_grpc_controller_is_arbitrated_and_writes_through_the_journal() {
    let dir = tmpdir("grpc");
    let node = Node::start(&dir);
    let port = node.port;
    let mut c = P4RuntimeClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    let caps = c.capabilities(p4::CapabilitiesRequest {}).await.unwrap();
    assert!(caps.into_inner().p4runtime_api_version.starts_with("1."));

    // No primary yet: nobody may write.
    let host = acl_entry(
        vec![
            ternary(pipeline::SRC, &[10, 9, 0, 1], &[255; 4]),
            ternary(pipeline::PROTO, &[17], &[0xff]),
            range(pipeline::DPORT, 2000, 2000),
        ],
        10,
        pipeline::DROP,
    );
    let e = c
        .write(write(3, ROLLBACK, vec![(INSERT, host.clone())]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    let (mut first, code) = arbitrate(&mut c, 3).await;
    assert_eq!(code, Code::Ok as i32, "the only controller is primary");
    c.write(write(3, ROLLBACK, vec![(INSERT, host.clone())]))
        .await
        .unwrap();

    // Bad entries are refused naming the field, never widened.
    let not_prefix = acl_entry(
        vec![ternary(pipeline::DST, &[10, 0, 0, 0], &[255, 0, 255, 0])],
        11,
        pipeline::DROP,
    );
    let no_priority = acl_entry(
        vec![ternary(pipeline::DST, &[10, 0, 0, 0], &[255, 0, 0, 0])],
        0,
        pipeline::DROP,
    );
    let net = acl_entry(
        vec![ternary(pipeline::SRC, &[10, 9, 0, 0], &[255, 255, 0, 0])],
        5,
        pipeline::ALLOW,
    );
    // CONTINUE_ON_ERROR: the good update stays, each failure is reported
    // at its position.
    let e = c
        .write(write(
            3,
            CONTINUE,
            vec![
                (INSERT, not_prefix),
                (INSERT, net.clone()),
                (INSERT, no_priority),
            ],
        ))
        .await
        .unwrap_err();
    let errs = update_errors(&e);
    assert_eq!(
        errs.iter().map(|e| e.0).collect::<Vec<_>>(),
        [Code::InvalidArgument, Code::Ok, Code::InvalidArgument]
    );
    assert!(errs[0].1.starts_with("ipv4_dst:"), "{errs:?}");
    assert!(errs[2].1.starts_with("priority:"), "{errs:?}");
    // ROLLBACK_ON_ERROR: one failure (an existing match) undoes the batch.
    let other = acl_entry(
        vec![ternary(pipeline::DST, &[192, 0, 2, 0], &[255, 255, 255, 0])],
        6,
        pipeline::DROP,
    );
    let e = c
        .write(write(
            3,
            ROLLBACK,
            vec![(INSERT, other.clone()), (INSERT, host.clone())],
        ))
        .await
        .unwrap_err();
    let codes: Vec<_> = update_errors(&e).into_iter().map(|e| e.0).collect();
    assert_eq!(codes, [Code::Aborted, Code::AlreadyExists]);
    // DATAPLANE_ATOMIC is all or nothing too.
    let e = c
        .write(write(
            3,
            p4::write_request::Atomicity::DataplaneAtomic as i32,
            vec![(INSERT, other.clone()), (INSERT, host.clone())],
        ))
        .await
        .unwrap_err();
    let codes: Vec<_> = update_errors(&e).into_iter().map(|e| e.0).collect();
    assert_eq!(codes, [Code::Aborted, Code::AlreadyExists]);

    // Read: what was written, in canonical form, and the same rules as
    // the control socket's.
    let mut entries = read_acl(&mut c).await;
    entries.sort_by_key(|e| e.priority);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].priority, 5);
    assert_eq!(entries[1].priority, 10);
    assert_eq!(
        entries[1].r#match[2],
        p4::FieldMatch {
            field_id: pipeline::DPORT,
            field_match_type: Some(p4::field_match::FieldMatchType::Range(
                p4::field_match::Range {
                    low: vec![0x07, 0xd0].into(),
                    high: vec![0x07, 0xd0].into()
                }
            )),
        }
    );
    let rules = node.ctl_rules();
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(rules[0]["match"]["src_prefix"], "10.9.0.1/32");
    assert_eq!(rules[0]["match"]["dport"], 2000);
    assert_eq!(rules[1]["match"]["src_prefix"], "10.9.0.0/16");

    // A wrong device id is refused.
    let mut wrong = write(3, ROLLBACK, vec![(INSERT, other.clone())]);
    wrong.device_id = 8;
    assert_eq!(c.write(wrong).await.unwrap_err().code(), Code::NotFound);

    // A controller with a higher election id takes over; the first hears
    // it is no longer primary and can no longer write.
    let mut c2 = c.clone();
    let (_second, code) = arbitrate(&mut c2, 9).await;
    assert_eq!(code, Code::Ok as i32);
    assert_eq!(
        next_arbitration(&mut first.1).await,
        Code::AlreadyExists as i32
    );
    let e = c
        .write(write(3, ROLLBACK, vec![(DELETE, net.clone())]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    c2.write(write(9, ROLLBACK, vec![(DELETE, net)]))
        .await
        .unwrap();
    assert_eq!(node.ctl_rules().len(), 1);
    // The door in the metrics: calls by code, updates by outcome, the two
    // streams still open.
    let m = node.scrape();
    for line in [
        "cfdp_p4runtime_calls_total{rpc=\"Write\",code=\"PERMISSION_DENIED\"} 2",
        "cfdp_p4runtime_calls_total{rpc=\"Write\",code=\"NOT_FOUND\"} 1",
        "cfdp_p4runtime_updates_total{op=\"insert\",code=\"ABORTED\"} 2",
        "cfdp_p4runtime_updates_total{op=\"delete\",code=\"OK\"} 1",
        "cfdp_p4runtime_controllers 2",
    ] {
        assert!(m.contains(line), "{line} not in\n{m}");
    }
    drop(first);

    // The writes went through the journal: a restart restores them.
    drop(node);
    let node = Node::start(&dir);
    let rules = node.ctl_rules();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["priority"], 10);
}

/// A read answers every entry of a set larger than one page of the
/// control thread's rule listing (the answer streams page by page), and
/// reads with counters as direct counter entries.
#[tokio::test(flavor = "current_thread")]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
async fn a_read_streams_every_entry_of_a_large_set() {
    let dir = tmpdir("large");
    let node = Node::start(&dir);
    let port = node.port;
    let mut c = P4RuntimeClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    let (_stream, code) = arbitrate(&mut c, 1).await;
    assert_eq!(code, Code::Ok as i32);
    let n: u16 = 2500;
    let updates = (0..n)
        .map(|i| {
            let [hi, lo] = i.to_be_bytes();
            let e = acl_entry(
                vec![ternary(
                    pipeline::SRC,
                    &[10, hi, lo, 0],
                    &[255, 255, 255, 0],
                )],
                i32::from(i) + 1,
                pipeline::ALLOW,
            );
            (INSERT, e)
        })
        .collect();
    c.write(write(1, ROLLBACK, updates)).await.unwrap();
    let mut entries = read_acl(&mut c).await;
    assert_eq!(entries.len(), usize::from(n));
    entries.sort_by_key(|e| e.priority);
    assert!(entries.iter().zip(1..).all(|(e, p)| e.priority == p));
    let req = p4::ReadRequest {
        device_id: DEVICE,
        entities: vec![p4::Entity {
            entity: Some(p4::entity::Entity::DirectCounterEntry(
                p4::DirectCounterEntry {
                    table_entry: Some(p4::TableEntry {
                        table_id: pipeline::ACL,
                        ..Default::default()
                    }),
                    data: None,
                },
            )),
        }],
        ..Default::default()
    };
    let mut s = c.read(req).await.unwrap().into_inner();
    let mut counters = 0;
    let mut messages = 0;
    while let Some(r) = s.next().await {
        messages += 1;
        let entities = r.unwrap().entities;
        // Answers come in bounded chunks, not a page (or a set) at once.
        assert!(entities.len() <= cfdp_p4runtime::service::READ_CHUNK);
        for e in entities {
            assert!(matches!(
                e.entity,
                Some(p4::entity::Entity::DirectCounterEntry(
                    p4::DirectCounterEntry { data: Some(_), .. }
                ))
            ));
            counters += 1;
        }
    }
    assert_eq!(counters, usize::from(n));
    let chunks = usize::from(n).div_ceil(cfdp_p4runtime::service::READ_CHUNK);
    assert!(
        messages >= chunks,
        "{messages} answer messages for {n} entries"
    );
    // The same wildcard 10,000 times asks once: each entry comes back
    // once, not 10,000 times (the request is ~40 KB; answered per entity,
    // it built 25 million entries).
    let wildcard = p4::Entity {
        entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry::default())),
    };
    let req = p4::ReadRequest {
        device_id: DEVICE,
        entities: vec![wildcard; 10_000],
        ..Default::default()
    };
    let mut s = c.read(req).await.unwrap().into_inner();
    let mut got = 0;
    while let Some(r) = s.next().await {
        got += r.unwrap().entities.len();
    }
    assert_eq!(got, usize::from(n));
    // More distinct entities than a Read takes: refused before any work.
    let distinct = (0..=cfdp_p4runtime::service::MAX_READ_ENTITIES as u8)
        .map(|i| p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(acl_entry(
                vec![ternary(pipeline::SRC, &[10, 0, i, 0], &[255, 255, 255, 0])],
                i32::from(i) + 1,
                pipeline::ALLOW,
            ))),
        })
        .collect();
    let req = p4::ReadRequest {
        device_id: DEVICE,
        entities: distinct,
        ..Default::default()
    };
    let e = c.read(req).await.map(|_| ()).unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
}

/// A CA, a server certificate for 127.0.0.1, a client certificate it
/// signed for `controller.test` and one for `other.test`, and a client
/// certificate another CA signed: PEM file paths (ca, server cert, server
/// key, client cert, client key, rogue cert, rogue key, other cert, other
/// key).
fn pki(dir: &Path) -> [PathBuf; 9] {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    };
    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        (p.self_signed(&key).unwrap(), key)
    };
    let (ca_cert, ca_key) = ca("cfdp test CA");
    let (rogue_ca, rogue_key) = ca("another CA");
    let leaf = |sans: Vec<String>, usage, by: &rcgen::Certificate, by_key: &KeyPair| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, "cfdp test");
        p.extended_key_usages = vec![usage];
        (
            p.signed_by(&key, by, by_key).unwrap().pem(),
            key.serialize_pem(),
        )
    };
    let server = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
        &ca_cert,
        &ca_key,
    );
    let client = leaf(
        vec!["controller.test".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        &ca_cert,
        &ca_key,
    );
    let other = leaf(
        vec!["other.test".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        &ca_cert,
        &ca_key,
    );
    let rogue = leaf(
        vec![],
        ExtendedKeyUsagePurpose::ClientAuth,
        &rogue_ca,
        &rogue_key,
    );
    let files = [
        ("ca.pem", ca_cert.pem()),
        ("server.pem", server.0),
        ("server.key", server.1),
        ("client.pem", client.0),
        ("client.key", client.1),
        ("rogue.pem", rogue.0),
        ("rogue.key", rogue.1),
        ("other.pem", other.0),
        ("other.key", other.1),
    ];
    files.map(|(name, text)| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    })
}

#[tokio::test(flavor = "current_thread")]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
async fn tls_with_client_certificates() {
    use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
    let dir = tmpdir("tls");
    let [ca, cert, key, client, client_key, rogue, rogue_key, other, other_key] = pki(&dir);
    let node = Node::start_with(&dir, |p| {
        p.tls_cert = cert.display().to_string();
        p.tls_key = key.display().to_string();
        p.tls_client_ca = ca.display().to_string();
        p.allowed_clients = vec!["controller.test".into()];
    });
    let port = node.port;
    let pem = |p: &Path| std::fs::read(p).unwrap();
    // A client of the door, with this identity (or none).
    let channel = |identity: Option<Identity>| {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(pem(&ca)))
            .domain_name("localhost");
        if let Some(i) = identity {
            tls = tls.identity(i);
        }
        async move {
            Channel::from_shared(format!("https://127.0.0.1:{port}"))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
        }
    };
    let capabilities = |identity: Option<Identity>| {
        let ch = channel(identity);
        async move {
            P4RuntimeClient::new(ch.await?)
                .capabilities(p4::CapabilitiesRequest {})
                .await
                .map_err(Into::into)
                .map(|_| ())
        }
    };
    let r: Result<(), Box<dyn std::error::Error>> =
        capabilities(Some(Identity::from_pem(pem(&client), pem(&client_key)))).await;
    assert!(
        r.is_ok(),
        "a client with a certificate the CA signed: {r:?}"
    );
    let r: Result<(), Box<dyn std::error::Error>> = capabilities(None).await;
    assert!(r.is_err(), "a client without a certificate is refused");
    let r: Result<(), Box<dyn std::error::Error>> =
        capabilities(Some(Identity::from_pem(pem(&rogue), pem(&rogue_key)))).await;
    assert!(
        r.is_err(),
        "a client whose certificate another CA signed is refused"
    );
    // A certificate the same CA signed, but not in allowed_clients: it
    // reads, and whatever election id it sends it is never primary and
    // cannot write; the allowed controller with a lower id is primary.
    let client_of = |cert: &Path, key: &Path| {
        let ch = channel(Some(Identity::from_pem(pem(cert), pem(key))));
        async move { P4RuntimeClient::new(ch.await.unwrap()) }
    };
    let mut intruder = client_of(&other, &other_key).await;
    let (_held, code) = arbitrate(&mut intruder, u64::MAX).await;
    assert_eq!(code, Code::AlreadyExists as i32, "never primary");
    let mut controller = client_of(&client, &client_key).await;
    let (_primary, code) = arbitrate(&mut controller, 1).await;
    assert_eq!(code, Code::Ok as i32, "the allowed controller is primary");
    let entry = || {
        acl_entry(
            vec![ternary(pipeline::SRC, &[10, 9, 0, 0], &[255, 255, 0, 0])],
            5,
            pipeline::DROP,
        )
    };
    let denied = intruder
        .write(write(1, ROLLBACK, vec![(INSERT, entry())]))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied}");
    controller
        .write(write(1, ROLLBACK, vec![(INSERT, entry())]))
        .await
        .unwrap();
    assert_eq!(read_acl(&mut intruder).await.len(), 1, "it may read");
    // Plain gRPC to a TLS door fails.
    let plain = async {
        P4RuntimeClient::connect(format!("http://127.0.0.1:{port}"))
            .await?
            .capabilities(p4::CapabilitiesRequest {})
            .await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    assert!(plain.await.is_err());
}

#[test]
fn bad_p4runtime_settings_stop_the_start_with_the_setting_named() {
    let dir = tmpdir("config");
    let cfg = dir.join("cfdp.toml");
    // (what is wrong, how it is set, what the refusal says)
    type Case = (&'static str, fn(&mut P4RuntimeSection), &'static str);
    let cases: [Case; 3] = [
        (
            "a remote listen",
            |p| p.listen = "0.0.0.0:9559".into(),
            "p4runtime.listen = 0.0.0.0:9559: not a loopback",
        ),
        (
            "nonsense",
            |p| p.listen = "nonsense".into(),
            "p4runtime.listen = nonsense",
        ),
        (
            "a certificate without its key",
            |p| {
                p.listen = "127.0.0.1:9559".into();
                p.tls_cert = "/x.pem".into();
            },
            "p4runtime.tls_key = \"\": give it with tls_cert",
        ),
    ];
    for (p4, set, says) in cases {
        let mut c = RunConfig::default();
        c.rules.file = String::new();
        set(&mut c.p4runtime);
        cfdp_testkit::node::write(&cfg, &c);
        let out = Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{p4}: {err}");
        assert!(err.contains(says), "{p4}: {err}");
    }
}

/// The Python interpreter with p4runtime-shell, or why there is none.
fn shell_python() -> Option<String> {
    let py = std::env::var("P4RUNTIME_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import p4runtime_sh.shell"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

#[test]
fn p4runtime_shell_programs_a_running_cfdp() {
    let Some(py) = shell_python() else {
        assert!(
            std::env::var("REQUIRE_P4RUNTIME").as_deref() != Ok("1"),
            "REQUIRE_P4RUNTIME=1 but P4RUNTIME_PYTHON ({:?}) has no p4runtime_sh",
            std::env::var("P4RUNTIME_PYTHON")
        );
        eprintln!("skipped: no p4runtime-shell (pip install p4runtime-shell; P4RUNTIME_PYTHON)");
        return;
    };
    let dir = tmpdir("shell");
    let node = Node::start(&dir);
    let port = node.port;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../p4runtime/tests/shell_session.py");
    // cfdp runs no P4 program: the device config the shell sends is empty.
    let device_config = dir.join("device_config.bin");
    std::fs::write(&device_config, b"").unwrap();
    let p4info = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/p4/cfdp.p4info.txtpb");
    let out = Command::new(py)
        .arg(script)
        .args([format!("127.0.0.1:{port}"), DEVICE.to_string()])
        .arg(p4info)
        .arg(device_config)
        .arg(env!("CARGO_BIN_EXE_cfdp"))
        .arg(&node.socket)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\ncfdp: {}",
        String::from_utf8_lossy(&out.stderr),
        node.stderr()
    );
    // What the controller read back is the node's rule set.
    let read: Vec<Value> = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let mut rules: Vec<Value> = node
        .ctl_rules()
        .iter()
        .map(|r| {
            let m = &r["match"];
            let s = |k: &str| match &m[k] {
                Value::Null => Value::Null,
                Value::Number(n) => Value::String(n.to_string()),
                v => v.clone(),
            };
            // The rule file's `{"redirect": N}` as the action's name and port.
            let action = match &r["action"] {
                Value::Object(o) => format!("redirect:{}", o["redirect"]),
                a => a.as_str().unwrap().to_string(),
            };
            json!({"src_prefix": m["src_prefix"], "dst_prefix": m["dst_prefix"],
                   "proto": m["proto"], "sport": s("sport"), "dport": s("dport"),
                   "priority": r["priority"], "action": action})
        })
        .collect();
    rules.sort_by_key(|r| r["priority"].as_u64());
    assert_eq!(Value::Array(rules), Value::Array(read));
}
