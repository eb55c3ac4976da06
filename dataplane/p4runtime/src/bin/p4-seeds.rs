//! Writes seed inputs for the P4Runtime fuzz targets (`dataplane/fuzz`):
//! for `p4_write`, encoded WriteRequests with entries of each kind cfdp
//! takes and some it refuses; for `p4_stream` (when a second directory is
//! given), runs of stream events in that target's format. `cargo run -p
//! cfdp-p4runtime --bin p4-seeds -- DIR [STREAM_DIR]`
#![forbid(unsafe_code)]

use cfdp_p4runtime::pipeline;
use cfdp_p4runtime::proto::p4::v1 as p4;
use prost::bytes::Bytes;
use prost::Message;

fn ternary(id: u32, value: &[u8], mask: &[u8]) -> p4::FieldMatch {
    p4::FieldMatch {
        field_id: id,
        field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
            p4::field_match::Ternary {
                value: Bytes::copy_from_slice(value),
                mask: Bytes::copy_from_slice(mask),
            },
        )),
    }
}

fn range(id: u32, lo: &[u8], hi: &[u8]) -> p4::FieldMatch {
    p4::FieldMatch {
        field_id: id,
        field_match_type: Some(p4::field_match::FieldMatchType::Range(
            p4::field_match::Range {
                low: Bytes::copy_from_slice(lo),
                high: Bytes::copy_from_slice(hi),
            },
        )),
    }
}

fn update(
    t: p4::update::Type,
    table_id: u32,
    m: Vec<p4::FieldMatch>,
    action_id: u32,
    params: Vec<p4::action::Param>,
) -> p4::Update {
    p4::Update {
        r#type: t as i32,
        entity: Some(p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                table_id,
                r#match: m,
                priority: 10,
                action: Some(p4::TableAction {
                    r#type: Some(p4::table_action::Type::Action(p4::Action {
                        action_id,
                        params,
                    })),
                }),
                ..Default::default()
            })),
        }),
    }
}

fn main() -> std::io::Result<()> {
    use p4::update::Type::{Delete, Insert, Modify};
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    std::fs::create_dir_all(&dir)?;
    let mut v6 = [0u8; 16];
    v6[..2].copy_from_slice(&[0x20, 0x01]);
    let mut v6_mask = [0u8; 16];
    v6_mask[..2].fill(0xff);
    let port = vec![p4::action::Param {
        param_id: pipeline::REDIRECT_PORT,
        value: Bytes::from_static(&[3]),
    }];
    let seeds = [
        vec![update(
            Insert,
            pipeline::ACL,
            vec![
                ternary(pipeline::SRC, &[10, 0, 0, 0], &[255, 0, 0, 0]),
                ternary(pipeline::PROTO, &[6], &[0xff]),
                range(pipeline::DPORT, &[0, 80], &[0, 80]),
            ],
            pipeline::DROP,
            vec![],
        )],
        vec![
            update(
                Modify,
                pipeline::ACL6,
                vec![ternary(pipeline::DST, &v6, &v6_mask)],
                pipeline::REDIRECT,
                port,
            ),
            update(
                Delete,
                pipeline::ACL,
                vec![range(pipeline::SPORT, &[4], &[0x10, 0])],
                pipeline::ALLOW,
                vec![],
            ),
        ],
        vec![update(
            Insert,
            pipeline::ACL,
            vec![ternary(pipeline::DST, &[10, 0, 0, 0], &[255, 0, 255, 0])],
            pipeline::COUNT,
            vec![],
        )],
    ];
    for (i, updates) in seeds.into_iter().enumerate() {
        let w = p4::WriteRequest {
            device_id: 1,
            election_id: Some(p4::Uint128 { high: 0, low: 1 }),
            updates,
            atomicity: i as i32 % 3,
            ..Default::default()
        };
        std::fs::write(dir.join(format!("seed{i}")), w.encode_to_vec())?;
    }
    if let Some(stream_dir) = std::env::args().nth(2) {
        stream_seeds(std::path::Path::new(&stream_dir))?;
    }
    Ok(())
}

/// `p4_stream`'s format: an event is a byte (client in bits 0–2, bit 3:
/// its certificate may write, bit 7: it closes its stream) followed, when
/// it sends, by a length byte and an encoded StreamMessageRequest.
fn stream_seeds(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let send = |client: u8, writer: bool, election: u64| {
        let m = p4::StreamMessageRequest {
            update: Some(p4::stream_message_request::Update::Arbitration(
                p4::MasterArbitrationUpdate {
                    device_id: 1,
                    election_id: Some(p4::Uint128 {
                        high: 0,
                        low: election,
                    }),
                    ..Default::default()
                },
            )),
        }
        .encode_to_vec();
        let mut e = vec![client | if writer { 8 } else { 0 }, m.len() as u8];
        e.extend(m);
        e
    };
    let close = |client: u8| vec![0x80 | client];
    let seeds = [
        // Two writers, the primary leaves, a reader with the highest id.
        [
            send(0, true, 1),
            send(1, true, 2),
            close(1),
            send(2, false, 9),
        ]
        .concat(),
        // Equal ids, a higher id from the same client, more than the cap.
        [
            send(0, true, 5),
            send(1, true, 5),
            send(0, true, 7),
            send(2, true, 3),
            send(3, true, 4),
            send(4, true, 6),
            send(5, true, 8),
        ]
        .concat(),
    ];
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed{i}")), s)?;
    }
    Ok(())
}
