//! IPFIX messages (RFC 7011): the templates cfdp exports, and its flow
//! records as data sets, in messages that fit a UDP datagram.
//!
//! Written by hand: a few fixed templates and their records are a few
//! dozen big-endian writes, and the Rust IPFIX crates are parsers, or bring a
//! registry, a clock library and a parser with their encoder.
//!
//! Every field of a uniflow record (templates [`TEMPLATE_V4`],
//! [`TEMPLATE_V6`]) is an IANA information element:
//!
//! | IE | name | bytes |
//! |---|---|---|
//! | 8 / 27 | sourceIPv4Address / sourceIPv6Address | 4 / 16 |
//! | 12 / 28 | destinationIPv4Address / destinationIPv6Address | 4 / 16 |
//! | 4 | protocolIdentifier | 1 |
//! | 7 | sourceTransportPort | 2 |
//! | 11 | destinationTransportPort | 2 |
//! | 2 | packetDeltaCount | 8 |
//! | 1 | octetDeltaCount | 8 |
//! | 152 | flowStartMilliseconds | 8 |
//! | 153 | flowEndMilliseconds | 8 |
//! | 10 | ingressInterface | 4 |
//! | 89 | forwardingStatus | 1 |
//! | 136 | flowEndReason | 1 |
//!
//! A biflow record (RFC 5103; `[ipfix] biflow`: both directions of a
//! tracked connection, templates [`BIFLOW_V4`], [`BIFLOW_V6`]) adds, after
//! those, the answers' counts as RFC 5103's reverse information elements
//! (the same element ids with the enterprise bit set, under RFC 5103's
//! reverse PEN [`REVERSE_PEN`]) and says which end the addresses name:
//!
//! | IE | name | bytes |
//! |---|---|---|
//! | 29305/2 | reversePacketDeltaCount | 8 |
//! | 29305/1 | reverseOctetDeltaCount | 8 |
//! | 239 | biflowDirection: 1, initiator (the source opened the connection) | 1 |
//!
//! Its 5-tuple, times, forwarding status and end reason are the
//! connection's (first and last packet either way, the last packet's
//! verdict). Every template an export's [`Setup`] uses goes in every
//! template message, used or not, so a record never meets a collector
//! that lacks its template.
//!
//! With 1-in-N sampling (`[ipfix] sampling`, `cfdp replay
//! --ipfix-sampling`), an options template (id [`OPTIONS_SAMPLING`],
//! scope observationDomainId, 149) and its one data record state the
//! rate with every template message:
//!
//! | IE | name | value |
//! |---|---|---|
//! | 34 | samplingInterval | N |
//! | 305 | samplingPacketInterval | 1 |
//! | 306 | samplingPacketSpace | N − 1 |
//!
//! Two spellings of one systematic count-based selection, for the
//! collectors operators run: pmacct's `nfacctd` reads 34 (or 305 and
//! 306); nfdump 1.7 reads 305 and 306 — in that order after 34, which it
//! files in the same place — and drops the whole options template when
//! it also holds selectorAlgorithm (304) or selectorId (302), so
//! PSAMP's selector report (RFC 5476 §6.5.2, scoped by selectorId) is not
//! sent. The options record counts in the header's sequence number as
//! RFC 7011 §3.1 says of every data record; nfdump 1.7 counts flow
//! records only, so it reports one sequence failure for each options
//! record that follows flow records (seen: a 1-in-2 replay of 16,384
//! flows, 309 messages, four template refreshes after flow records —
//! nfcapd counted four sequence errors, and every packet scaled back).
//!
//! The rule that decided a record's first packet (the one that opened
//! its connection, for a tracked flow): no IANA element names a rule, so
//! with `[ipfix] rule_pen = N` (a private enterprise number the operator
//! holds; 0, the default: not exported) records that have one carry it as
//! element 1 of enterprise N, unsigned32 — four more templates, the ones
//! above with it last ([`RULE_TEMPLATES`] on) — and records no rule
//! decided (the default action) use the templates without it. nfdump 1.7
//! skips an enterprise element it does not know; pmacct reads it as a
//! custom primitive (`aggregate_primitives`: `field_type=N:1 len=4
//! semantics=u_int`).

use crate::record::FlowRecord;

/// IPFIX's version number in the message header.
pub const VERSION: u16 = 10;
/// The template of IPv4 records.
pub const TEMPLATE_V4: u16 = 256;
/// The template of IPv6 records.
pub const TEMPLATE_V6: u16 = 257;
/// The options template stating the sampling rate.
pub const OPTIONS_SAMPLING: u16 = 258;
/// The template of IPv4 biflow records.
pub const BIFLOW_V4: u16 = 259;
/// The template of IPv6 biflow records.
pub const BIFLOW_V6: u16 = 260;
/// The four templates of records that name their rule: this plus the
/// index of their twin without it (256, 257, 259, 260: 0 to 3).
pub const RULE_TEMPLATES: u16 = 261;
/// RFC 5103's private enterprise number for reverse information
/// elements: an element id with the enterprise bit under this PEN is the
/// same element, counted the other way.
pub const REVERSE_PEN: u32 = 29305;
/// The enterprise bit of a field specifier's element id.
const ENTERPRISE: u16 = 0x8000;
/// A field specifier: information element, length, and an enterprise
/// element's PEN (0: an IANA element).
type Field = (u16, u16, u32);
/// The biflow fields after a uniflow record's: the reverse counts (RFC
/// 5103's PEN) and `biflowDirection`.
const REVERSE_FIELDS: [Field; 3] = [
    (ENTERPRISE | 2, 8, REVERSE_PEN),
    (ENTERPRISE | 1, 8, REVERSE_PEN),
    (239, 1, 0),
];
/// `biflowDirection`: the source address is the initiator's.
const INITIATOR: u8 = 1;
/// The set id of options template sets.
const OPTIONS_TEMPLATE_SET: u16 = 3;
/// The sampling options template's fields, scope first. The order is
/// nfdump's need (see the module docs).
const SAMPLING_FIELDS: [Field; 4] = [(149, 4, 0), (34, 4, 0), (305, 4, 0), (306, 4, 0)];
/// A message header's bytes.
pub const HEADER: usize = 16;
/// A set header's bytes.
const SET_HEADER: usize = 4;
/// The set id of template sets.
const TEMPLATE_SET: u16 = 2;
/// The most bytes a message takes: one UDP datagram on a 1500-byte
/// Ethernet path with IPv6 and UDP headers, as RFC 7011 §10.3.3 asks.
pub const MAX_MESSAGE: usize = 1400;

/// What an export's messages say beyond its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The observation domain id in every header.
    pub domain: u32,
    /// 1 in how many packets the records count (1: every one).
    pub sampling: u32,
    /// The PEN records name their rule under (0: they do not).
    pub rule_pen: u32,
}

impl Setup {
    /// Observation domain `domain`, every packet counted, no rule named.
    pub fn domain(domain: u32) -> Self {
        Setup {
            domain,
            sampling: 1,
            rule_pen: 0,
        }
    }
}

/// Which template a record takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    pub v6: bool,
    /// With answers' counts (RFC 5103).
    pub biflow: bool,
    /// Naming its rule (an enterprise element).
    pub rule: bool,
}

impl Kind {
    /// Every kind an export of `setup` sends templates for, in template
    /// id order.
    fn all(setup: &Setup) -> impl Iterator<Item = Kind> {
        let rules: &[bool] = if setup.rule_pen != 0 {
            &[false, true]
        } else {
            &[false]
        };
        rules.iter().flat_map(|&rule| {
            [(false, false), (true, false), (false, true), (true, true)].map(|(v6, biflow)| Kind {
                v6,
                biflow,
                rule,
            })
        })
    }

    /// Record `r`'s kind in an export of `setup` (its rule named only
    /// where the setup names rules).
    pub fn of(r: &FlowRecord, setup: &Setup) -> Kind {
        Kind {
            v6: r.key.v6,
            biflow: r.reverse.is_some(),
            rule: r.rule.is_some() && setup.rule_pen != 0,
        }
    }

    fn template(self) -> u16 {
        let i = u16::from(self.v6) + 2 * u16::from(self.biflow);
        if self.rule {
            RULE_TEMPLATES + i
        } else {
            [TEMPLATE_V4, TEMPLATE_V6, BIFLOW_V4, BIFLOW_V6][usize::from(i)]
        }
    }

    /// The template's fields: the family's, the reverse ones for biflow,
    /// the rule's under `rule_pen`.
    fn fields(self, rule_pen: u32) -> Vec<Field> {
        let (src, dst, len) = if self.v6 { (27, 28, 16) } else { (8, 12, 4) };
        let mut f = vec![
            (src, len, 0),
            (dst, len, 0),
            (4, 1, 0),
            (7, 2, 0),
            (11, 2, 0),
            (2, 8, 0),
            (1, 8, 0),
            (152, 8, 0),
            (153, 8, 0),
            (10, 4, 0),
            (89, 1, 0),
            (136, 1, 0),
        ];
        if self.biflow {
            f.extend(REVERSE_FIELDS);
        }
        if self.rule {
            f.push((ENTERPRISE | 1, 4, rule_pen));
        }
        f
    }

    /// A data record's bytes in this template.
    pub fn record_len(self) -> usize {
        self.fields(1).iter().map(|&(_, l, _)| usize::from(l)).sum()
    }
}

/// A message being written: its header first (length filled in at the
/// end), then sets.
struct Message {
    buf: Vec<u8>,
}

impl Message {
    fn new(export_s: u32, sequence: u32, domain: u32) -> Self {
        let mut buf = Vec::with_capacity(MAX_MESSAGE);
        buf.extend_from_slice(&VERSION.to_be_bytes());
        buf.extend_from_slice(&0u16.to_be_bytes());
        buf.extend_from_slice(&export_s.to_be_bytes());
        buf.extend_from_slice(&sequence.to_be_bytes());
        buf.extend_from_slice(&domain.to_be_bytes());
        Message { buf }
    }

    /// Starts a set; returns where its header is, for [`Self::end_set`].
    fn start_set(&mut self, id: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&id.to_be_bytes());
        self.buf.extend_from_slice(&0u16.to_be_bytes());
        at
    }

    fn end_set(&mut self, at: usize) {
        let len = (self.buf.len() - at) as u16;
        self.buf[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u16;
        self.buf[2..4].copy_from_slice(&len.to_be_bytes());
        self.buf
    }
}

/// A message holding every template `setup` uses (sent first, and again
/// as the exporter's refresh interval asks) and, when 1 in
/// `setup.sampling` packets is taken (more than 1), the sampling options
/// template and its record, which `sequence` counts (see the module docs).
pub fn templates(export_s: u32, sequence: &mut u32, setup: &Setup) -> Vec<u8> {
    let mut m = Message::new(export_s, *sequence, setup.domain);
    let at = m.start_set(TEMPLATE_SET);
    for kind in Kind::all(setup) {
        let f = kind.fields(setup.rule_pen);
        m.buf.extend_from_slice(&kind.template().to_be_bytes());
        m.buf.extend_from_slice(&(f.len() as u16).to_be_bytes());
        put_fields(&mut m.buf, &f);
    }
    m.end_set(at);
    let sampling = setup.sampling;
    if sampling > 1 {
        let at = m.start_set(OPTIONS_TEMPLATE_SET);
        m.buf.extend_from_slice(&OPTIONS_SAMPLING.to_be_bytes());
        m.buf
            .extend_from_slice(&(SAMPLING_FIELDS.len() as u16).to_be_bytes());
        m.buf.extend_from_slice(&1u16.to_be_bytes()); // one scope field
        put_fields(&mut m.buf, &SAMPLING_FIELDS);
        m.end_set(at);
        let at = m.start_set(OPTIONS_SAMPLING);
        for v in [setup.domain, sampling, 1, sampling - 1] {
            m.buf.extend_from_slice(&v.to_be_bytes());
        }
        m.end_set(at);
        *sequence = sequence.wrapping_add(1);
    }
    m.finish()
}

/// Field specifiers: each information element and its length, and an
/// enterprise element's PEN.
fn put_fields(buf: &mut Vec<u8>, f: &[Field]) {
    for &(ie, len, pen) in f {
        buf.extend_from_slice(&ie.to_be_bytes());
        buf.extend_from_slice(&len.to_be_bytes());
        if ie & ENTERPRISE != 0 {
            buf.extend_from_slice(&pen.to_be_bytes());
        }
    }
}

/// One record's fields, in its template's (`kind`'s) order.
fn write_record(buf: &mut Vec<u8>, r: &FlowRecord, kind: Kind) {
    let k = &r.key;
    let n = if k.v6 { 16 } else { 4 };
    buf.extend_from_slice(&k.src[..n]);
    buf.extend_from_slice(&k.dst[..n]);
    buf.push(k.proto);
    buf.extend_from_slice(&k.sport.to_be_bytes());
    buf.extend_from_slice(&k.dport.to_be_bytes());
    buf.extend_from_slice(&r.packets.to_be_bytes());
    buf.extend_from_slice(&r.bytes.to_be_bytes());
    buf.extend_from_slice(&(r.first_ns / 1_000_000).to_be_bytes());
    buf.extend_from_slice(&(r.last_ns / 1_000_000).to_be_bytes());
    buf.extend_from_slice(&u32::from(r.port).to_be_bytes());
    buf.push(r.forwarding.ipfix());
    buf.push(r.end.ipfix());
    if let Some(rev) = r.reverse {
        buf.extend_from_slice(&rev.packets.to_be_bytes());
        buf.extend_from_slice(&rev.bytes.to_be_bytes());
        buf.push(INITIATOR);
    }
    if let Some(rule) = r.rule.filter(|_| kind.rule) {
        buf.extend_from_slice(&rule.to_be_bytes());
    }
}

/// `records` in the parts one data message of at most [`MAX_MESSAGE`]
/// bytes holds each: one template (family, uni- or biflow, naming its rule
/// or not) a part.
pub fn chunks<'r>(records: &'r [FlowRecord], setup: &Setup) -> Vec<Vec<&'r FlowRecord>> {
    let mut out = Vec::new();
    for kind in Kind::all(setup) {
        let per = (MAX_MESSAGE - HEADER - SET_HEADER) / kind.record_len();
        let of_kind: Vec<&FlowRecord> = records
            .iter()
            .filter(|r| Kind::of(r, setup) == kind)
            .collect();
        out.extend(of_kind.chunks(per).map(<[_]>::to_vec));
    }
    out
}

/// One data message of `chunk` (one template, as [`chunks`] parts them);
/// `sequence` is the exporter's count of data records sent before (RFC
/// 7011 §3.1), moved past these.
pub fn data_message(
    chunk: &[&FlowRecord],
    export_s: u32,
    sequence: &mut u32,
    setup: &Setup,
) -> Vec<u8> {
    let kind = chunk.first().map_or(
        Kind {
            v6: false,
            biflow: false,
            rule: false,
        },
        |r| Kind::of(r, setup),
    );
    let mut m = Message::new(export_s, *sequence, setup.domain);
    let at = m.start_set(kind.template());
    for r in chunk {
        debug_assert_eq!(Kind::of(r, setup), kind, "one template");
        write_record(&mut m.buf, r, kind);
    }
    m.end_set(at);
    *sequence = sequence.wrapping_add(chunk.len() as u32);
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Header, set header, two uniflow templates of 12 fields (4 + 12·4
    /// bytes), two biflow ones of 15 fields, two of them with a PEN.
    const TEMPLATES_END: usize = HEADER + SET_HEADER + 2 * (4 + 12 * 4) + 2 * (4 + 15 * 4 + 2 * 4);

    #[test]
    fn the_templates_records_are_as_long_as_their_fields() {
        let len = |v6, biflow, rule| Kind { v6, biflow, rule }.record_len();
        assert_eq!(len(false, false, false), 51);
        assert_eq!(len(true, false, false), 75);
        assert_eq!(len(false, true, false), 51 + 17);
        assert_eq!(len(true, true, false), 75 + 17);
        assert_eq!(len(true, true, true), 75 + 17 + 4);
        let mut seq = 0;
        let t = templates(1, &mut seq, &Setup::domain(7));
        assert_eq!(t.len(), TEMPLATES_END);
        // With rules named: four more templates, each one field (and its
        // PEN) longer than its twin.
        let named = Setup {
            rule_pen: 32473,
            ..Setup::domain(7)
        };
        let t = templates(1, &mut seq, &named);
        assert_eq!(
            t.len(),
            TEMPLATES_END + 2 * (4 + 13 * 4 + 4) + 2 * (4 + 16 * 4 + 3 * 4)
        );
        let ids: Vec<u16> = Kind::all(&named).map(Kind::template).collect();
        assert_eq!(ids, [256, 257, 259, 260, 261, 262, 263, 264]);
        assert_eq!(u16::from_be_bytes([t[2], t[3]]) as usize, t.len());
        assert_eq!(seq, 0, "templates are not data records");
    }

    /// With sampling, the message also holds the options template (scope
    /// observationDomainId; 34, 305, 306 in that order) and its one
    /// record, N, 1 and N − 1, which the sequence number counts.
    #[test]
    fn sampling_is_stated_by_an_options_template_and_its_record() {
        let mut seq = 5;
        let t = templates(
            1,
            &mut seq,
            &Setup {
                sampling: 100,
                ..Setup::domain(7)
            },
        );
        assert_eq!(seq, 6);
        assert_eq!(u32::from_be_bytes([t[8], t[9], t[10], t[11]]), 5);
        let opts = TEMPLATES_END;
        let be16 = |at: usize| u16::from_be_bytes([t[at], t[at + 1]]);
        let be32 = |at: usize| u32::from_be_bytes([t[at], t[at + 1], t[at + 2], t[at + 3]]);
        // Options template set: id 3, length; template 258, 4 fields, 1 scope.
        assert_eq!((be16(opts), be16(opts + 2)), (3, 4 + 6 + 4 * 4));
        assert_eq!(
            (be16(opts + 4), be16(opts + 6), be16(opts + 8)),
            (258, 4, 1)
        );
        let ies: Vec<u16> = (0..4).map(|i| be16(opts + 10 + 4 * i)).collect();
        assert_eq!(ies, [149, 34, 305, 306]);
        let data = opts + 4 + 6 + 16;
        assert_eq!((be16(data), be16(data + 2)), (258, 4 + 16));
        let values: Vec<u32> = (0..4).map(|i| be32(data + 4 + 4 * i)).collect();
        assert_eq!(values, [7, 100, 1, 99]);
        assert_eq!(be16(2) as usize, t.len());
        assert_eq!(t.len(), data + 4 + 16);
    }
}
