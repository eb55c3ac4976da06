//! cfdp's fixed pipeline described as a P4Info: what a P4Runtime
//! controller reads to learn the tables it may program.
//!
//! Two tables, `acl` (IPv4) and `acl6` (IPv6), hold cfdp's multi-field
//! rules: source and destination addresses as ternary matches whose masks
//! must be prefixes, the IP protocol as a ternary match whose mask must be
//! all ones, source and destination ports as ranges. Every entry needs a
//! priority (highest wins, as in cfdp). The actions are cfdp's four; each
//! table has a direct counter (cfdp counts every rule's packets and bytes).
//! The ids carry the P4Info kind prefix in their top byte, as P4 compilers
//! assign them.

use crate::proto::p4::config::v1 as info;

/// The P4Info kind prefixes cfdp's ids use (P4Ids.Prefix).
const ACTION: u32 = 0x01 << 24;
const TABLE: u32 = 0x02 << 24;
const DIRECT_COUNTER: u32 = 0x13 << 24;

pub const ACL: u32 = TABLE | 1;
pub const ACL6: u32 = TABLE | 2;
pub const ACL_COUNTER: u32 = DIRECT_COUNTER | 1;
pub const ACL6_COUNTER: u32 = DIRECT_COUNTER | 2;

pub const DROP: u32 = ACTION | 1;
pub const ALLOW: u32 = ACTION | 2;
pub const COUNT: u32 = ACTION | 3;
pub const REDIRECT: u32 = ACTION | 4;
/// The stateful forms of the three allowing actions (a rule's `"track":
/// true`): the packet they allow opens a connection whose packets, both
/// ways, take the same action before any entry is consulted. Actions of
/// their own rather than a parameter, so that a controller's P4Info shows
/// which entries are stateful and a parameterless `allow` stays one.
pub const ALLOW_TRACKED: u32 = ACTION | 5;
pub const COUNT_TRACKED: u32 = ACTION | 6;
pub const REDIRECT_TRACKED: u32 = ACTION | 7;
/// `redirect`'s one parameter, the output port.
pub const REDIRECT_PORT: u32 = 1;

/// Match field ids, the same in both tables.
pub const SRC: u32 = 1;
pub const DST: u32 = 2;
pub const PROTO: u32 = 3;
pub const SPORT: u32 = 4;
pub const DPORT: u32 = 5;

/// Table sizes the P4Info states: a bound for controllers, not one cfdp
/// enforces per table (its `max_rules` bounds the whole rule set).
const SIZE: i64 = 1 << 20;

/// One of cfdp's two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Acl,
    Acl6,
}

impl Table {
    pub fn of_id(id: u32) -> Option<Self> {
        match id {
            ACL => Some(Self::Acl),
            ACL6 => Some(Self::Acl6),
            _ => None,
        }
    }

    pub fn of_counter(id: u32) -> Option<Self> {
        match id {
            ACL_COUNTER => Some(Self::Acl),
            ACL6_COUNTER => Some(Self::Acl6),
            _ => None,
        }
    }

    pub fn id(self) -> u32 {
        match self {
            Self::Acl => ACL,
            Self::Acl6 => ACL6,
        }
    }

    pub fn v6(self) -> bool {
        self == Self::Acl6
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Acl => "acl",
            Self::Acl6 => "acl6",
        }
    }

    /// Bits of the address fields.
    pub fn addr_bits(self) -> u32 {
        if self.v6() {
            128
        } else {
            32
        }
    }

    /// The name of match field `id` (as the P4Info names it).
    pub fn field_name(self, id: u32) -> &'static str {
        match (id, self.v6()) {
            (SRC, false) => "ipv4_src",
            (DST, false) => "ipv4_dst",
            (SRC, true) => "ipv6_src",
            (DST, true) => "ipv6_dst",
            (PROTO, _) => "ip_proto",
            (SPORT, _) => "l4_sport",
            (DPORT, _) => "l4_dport",
            _ => "?",
        }
    }
}

fn preamble(id: u32, name: &str, brief: &str) -> Option<info::Preamble> {
    Some(info::Preamble {
        id,
        name: name.to_string(),
        alias: name.to_string(),
        annotations: Vec::new(),
        doc: Some(info::Documentation {
            brief: brief.to_string(),
            description: String::new(),
        }),
    })
}

fn field(t: Table, id: u32, bits: i32, kind: info::match_field::MatchType) -> info::MatchField {
    info::MatchField {
        id,
        name: t.field_name(id).to_string(),
        annotations: Vec::new(),
        bitwidth: bits,
        doc: None,
        r#match: Some(info::match_field::Match::MatchType(kind as i32)),
    }
}

fn table(t: Table) -> info::Table {
    use info::match_field::MatchType::{Range, Ternary};
    let addr = i32::try_from(t.addr_bits()).expect("32 or 128");
    let (brief, counter) = match t {
        Table::Acl => ("IPv4 rules: first match by priority", ACL_COUNTER),
        Table::Acl6 => ("IPv6 rules: first match by priority", ACL6_COUNTER),
    };
    let action = |id| info::ActionRef {
        id,
        scope: info::action_ref::Scope::TableOnly as i32,
        annotations: Vec::new(),
    };
    info::Table {
        preamble: preamble(t.id(), t.name(), brief),
        match_fields: vec![
            field(t, SRC, addr, Ternary),
            field(t, DST, addr, Ternary),
            field(t, PROTO, 8, Ternary),
            field(t, SPORT, 16, Range),
            field(t, DPORT, 16, Range),
        ],
        action_refs: [
            DROP,
            ALLOW,
            COUNT,
            REDIRECT,
            ALLOW_TRACKED,
            COUNT_TRACKED,
            REDIRECT_TRACKED,
        ]
        .map(action)
        .to_vec(),
        const_default_action_id: 0,
        implementation_id: 0,
        direct_resource_ids: vec![counter],
        size: SIZE,
        is_const_table: false,
    }
}

fn action(id: u32, name: &str, brief: &str) -> info::Action {
    info::Action {
        preamble: preamble(id, name, brief),
        params: Vec::new(),
    }
}

fn counter(id: u32, name: &str, t: Table) -> info::DirectCounter {
    info::DirectCounter {
        preamble: preamble(id, name, "packets and bytes per entry"),
        spec: Some(info::CounterSpec {
            unit: info::counter_spec::Unit::Both as i32,
        }),
        direct_table_id: t.id(),
    }
}

/// cfdp's P4Info.
pub fn p4info() -> info::P4Info {
    let port = info::action::Param {
        id: REDIRECT_PORT,
        name: "port".to_string(),
        annotations: Vec::new(),
        bitwidth: 16,
        doc: None,
    };
    let mut redirect = action(REDIRECT, "redirect", "forward out of an output port");
    redirect.params.push(port.clone());
    let mut redirect_tracked = action(
        REDIRECT_TRACKED,
        "redirect_tracked",
        "forward out of an output port and track the connection (both directions then take it)",
    );
    redirect_tracked.params.push(port);
    info::P4Info {
        pkg_info: Some(info::PkgInfo {
            name: "cfdp".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            doc: Some(info::Documentation {
                brief: "cfdp's fixed pipeline: multi-field rules by priority".to_string(),
                description: String::new(),
            }),
            arch: "cfdp".to_string(),
            ..Default::default()
        }),
        tables: vec![table(Table::Acl), table(Table::Acl6)],
        actions: vec![
            action(DROP, "drop", "drop the packet"),
            action(ALLOW, "allow", "forward the packet"),
            action(
                COUNT,
                "count",
                "forward the packet (every entry is counted)",
            ),
            redirect,
            action(
                ALLOW_TRACKED,
                "allow_tracked",
                "forward the packet and track the connection (both directions then forwarded)",
            ),
            action(
                COUNT_TRACKED,
                "count_tracked",
                "forward and count the packet and track the connection",
            ),
            redirect_tracked,
        ],
        direct_counters: vec![
            counter(ACL_COUNTER, "acl_counter", Table::Acl),
            counter(ACL6_COUNTER, "acl6_counter", Table::Acl6),
        ],
    }
}
