//! Rule matching through the concurrent filters.
//!
//! One filter holds the exact flow rules; one filter per prefix class in use
//! (family, direction, length, protocol, port) holds that class's masked
//! addresses, probed in the rule set's priority order (longest prefix
//! first). All of them live in the published [`Tables`], which a worker
//! enters once per burst (see `tables` for how updates stay consistent).
//!
//! Modes:
//! * `verify` (default): a filter positive is confirmed against the rule
//!   set's exact tables before its action applies: no false-positive actions.
//!   A negative is final (a filter has no false negatives), which is where
//!   the filter saves work: most packets match no rule and never touch the
//!   exact tables.
//! * `filter-only`: the action comes from the filter's value (the rule's
//!   slot in the slot array). False positives are possible; every 64th
//!   positive is also verified — against a 32-bit check of the rule's key
//!   hash kept beside its action, not against the key itself, which this
//!   mode does not keep (see `tables`) — and the sampled false-positive
//!   rate is reported.
//!
//! Matching is per burst (at most [`MAX_BURST`] packets), with batched,
//! prefetching filter lookups, and allocates nothing.

use cfdp_filter::Lookup;
use cfdp_rules::FlowKey;

use crate::stats::Totals;
use crate::tables::{key_check, RuleRef, Tables};

/// Largest burst a worker hands to the matcher.
pub const MAX_BURST: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    #[default]
    Verify,
    FilterOnly,
    /// No filters: every packet probes the exact tables. The baseline the
    /// filter path is measured against (`bench --bin pipeline`).
    Exact,
}

/// A mode name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode '{0}' (verify, filter-only or exact)")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, UnknownMode> {
        match s {
            "verify" => Ok(Mode::Verify),
            "filter-only" => Ok(Mode::FilterOnly),
            "exact" => Ok(Mode::Exact),
            _ => Err(UnknownMode(s.to_string())),
        }
    }
}

/// Filter parameters for this mode and Bloom field width. In verify and
/// exact mode the filter only has to say "maybe", so entries carry no value
/// and the widest fingerprint that fits one 64-bit word per bucket is used
/// (16 bits, 15 beside a 1-bit Bloom field): half the memory of two words,
/// so more of it stays in cache. In filter-only mode each entry carries its
/// rule's slot (`value_bits`), in two words per bucket.
pub fn filter_params(
    mode: Mode,
    value_bits: u32,
    bloom_field_bits: u32,
) -> Result<(u32, u32), FingerprintTooNarrow> {
    let (fp, v) = if mode == Mode::FilterOnly {
        (
            (64u32.saturating_sub(bloom_field_bits) / 2).saturating_sub(value_bits),
            value_bits,
        )
    } else {
        (64u32.saturating_sub(bloom_field_bits) / 4, 0)
    };
    let fp = fp.min(16);
    if fp < 8 {
        return Err(FingerprintTooNarrow {
            value_bits,
            bloom_field_bits,
            fingerprint_bits: fp,
        });
    }
    Ok((fp, v))
}

/// A filter layout whose value bits and Bloom field leave too short a
/// fingerprint for a useful false-positive rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value_bits} value bits and a {bloom_field_bits}-bit Bloom field leave a \
     {fingerprint_bits}-bit fingerprint: too many rules (lower control.max_rules) or too wide \
     a Bloom tag"
)]
pub struct FingerprintTooNarrow {
    pub value_bits: u32,
    pub bloom_field_bits: u32,
    pub fingerprint_bits: u32,
}

/// What a burst's matching needs beside the tables: the mode, the worker's
/// counters and its filter-only sampling counter.
pub struct MatchCtx<'a> {
    pub mode: Mode,
    pub counters: &'a mut Totals,
    pub sample: &'a mut u32,
}

impl MatchCtx<'_> {
    /// Resolves one filter answer for a key (`h`: its filter hash) into a
    /// rule. `confirm` looks the key up in the copy's exact table.
    #[inline]
    pub(crate) fn resolve(
        &mut self,
        answer: Lookup,
        t: &Tables,
        h: u64,
        confirm: impl Fn() -> Option<RuleRef>,
    ) -> Option<RuleRef> {
        let c = &mut *self.counters;
        match (answer, self.mode) {
            (Lookup::Miss, _) => None,
            (Lookup::Entry(v), Mode::FilterOnly) => {
                let Some(e) = t.slots.get(v as usize).copied().flatten() else {
                    // A slot not (yet, or no longer) in this copy: a
                    // deleted rule's entry stays in the filter until its
                    // commit settles, and a rule given the same key in
                    // that batch is in the exact tables (key → slot).
                    return confirm().and_then(|r| {
                        let e = t.slots.get(r.slot as usize).copied().flatten()?;
                        Some(RuleRef {
                            action: e.action,
                            slot: r.slot,
                        })
                    });
                };
                *self.sample = self.sample.wrapping_add(1);
                if (*self.sample).is_multiple_of(64) {
                    c.filter_only_sampled += 1;
                    if key_check(h) != e.check {
                        c.filter_only_sampled_false += 1;
                    }
                }
                Some(RuleRef {
                    action: e.action,
                    slot: v,
                })
            }
            // A Bloom-part answer carries no value: filter-only mode keeps
            // those keys in the exact tables (key → slot) and takes the
            // action from the slot array, where changes to it land.
            (Lookup::Bloom, Mode::FilterOnly) => {
                let got = confirm().and_then(|r| {
                    let e = t.slots.get(r.slot as usize).copied().flatten()?;
                    Some(RuleRef {
                        action: e.action,
                        slot: r.slot,
                    })
                });
                match got {
                    Some(_) => c.filter_verified += 1,
                    None => c.filter_false_positives += 1,
                }
                got
            }
            // Verify mode.
            _ => {
                let got = confirm();
                match got {
                    Some(_) => c.filter_verified += 1,
                    None => c.filter_false_positives += 1,
                }
                got
            }
        }
    }
}

/// Matches a burst against one copy of the tables: `keys[i]` is packet i's
/// (fragment-resolved) 5-tuple when `valid[i]`; writes the applicable rule
/// (or `None`) to `out[i]`.
pub fn match_burst(
    cx: &mut MatchCtx<'_>,
    t: &Tables,
    keys: &[FlowKey],
    valid: &[bool],
    out: &mut [Option<RuleRef>],
) {
    let n = keys.len();
    assert!(n <= MAX_BURST && valid.len() >= n && out.len() >= n);
    let exact = t.exact.view();
    if cx.mode == Mode::Exact {
        for i in 0..n {
            out[i] = if valid[i] {
                t.classify_in(exact, &keys[i])
            } else {
                None
            };
        }
        return;
    }
    let mut idx = [0usize; MAX_BURST];
    let mut hashes = [0u64; MAX_BURST];
    let mut answers = [Lookup::Miss; MAX_BURST];

    // 1. Exact flow rules, one hash per packet. The skip is decided on this
    //    copy's own exact table, which cannot change while the burst holds
    //    the copy: with no flow rule in it, no flow-filter positive could be
    //    confirmed (verify) or resolve to a flow rule's slot (filter-only).
    //    (Deciding on the filter's item count was racy: migration moves an
    //    item between the two counts the filter reads.)
    // In filter-only mode the exact table holds only Bloom-part keys: the
    // skip is decided on the copy's slot array instead (any rule at all).
    let flow_rules = if cx.mode == Mode::FilterOnly {
        t.live_slots > 0
    } else {
        !t.exact.is_empty()
    };
    out[..n].fill(None);
    let mut m = 0;
    // Without flow rules no packet is hashed for them (a set of only
    // prefix or multi-field rules skips the 5-tuple hash).
    if flow_rules {
        for i in (0..n).filter(|&i| valid[i]) {
            idx[m] = i;
            hashes[m] = keys[i].hash_with(&t.secret);
            m += 1;
        }
    }
    if m > 0 {
        t.flow_filter
            .get_batch_hashes(&hashes[..m], &mut answers[..m]);
        for j in 0..m {
            let i = idx[j];
            out[i] = cx.resolve(answers[j], t, hashes[j], || exact.get(&keys[i]).copied());
        }
    }

    // 2. Prefix classes, longest first; each packet stops at its first match.
    for cf in &t.classes {
        let mut m = 0;
        let mut masked = [[0u8; 16]; MAX_BURST];
        for i in 0..n {
            if valid[i] && out[i].is_none() && cf.class.admits(&keys[i]) {
                idx[m] = i;
                masked[m] = cf.class.masked(&keys[i]);
                hashes[m] = cf.class.hash_masked(&t.secret, &masked[m]);
                m += 1;
            }
        }
        if m == 0 {
            continue;
        }
        cf.filter.get_batch_hashes(&hashes[..m], &mut answers[..m]);
        let table = cf.entries.view();
        for j in 0..m {
            let addr = masked[j];
            out[idx[j]] = cx.resolve(answers[j], t, hashes[j], || table.get(&addr).copied());
        }
    }

    // 3. Multi-field rules (explicit priorities, below every rule above),
    //    the packets still unmatched as one burst.
    if t.has_acl() && n > 0 {
        acl_step(t, keys, valid, out);
    }
}

/// Step 3 of [`match_burst`]: the burst's packets no flow or prefix rule
/// took (and not decided otherwise: `valid`) through the multi-field
/// rules, which the compiled layer walks together (`acl::compiled`).
fn acl_step(t: &Tables, keys: &[FlowKey], valid: &[bool], out: &mut [Option<RuleRef>]) {
    let n = keys.len();
    let mut idx = [0usize; MAX_BURST];
    let mut m = 0;
    for i in 0..n {
        if valid[i] && out[i].is_none() {
            idx[m] = i;
            m += 1;
        }
    }
    // None left (a burst its connections decided): no copy of the
    // keys at all.
    if m == 0 {
        return;
    }
    // Every packet still to classify (a set of only multi-field
    // rules, no fragment held): the burst as it is, no copies.
    if m == n {
        t.classify_acl_burst(&keys[..n], &mut out[..n]);
        return;
    }
    let mut left = [keys[0]; MAX_BURST];
    for (l, &i) in left.iter_mut().zip(&idx[..m]) {
        *l = keys[i];
    }
    let mut acl = [None; MAX_BURST];
    t.classify_acl_burst(&left[..m], &mut acl[..m]);
    for j in 0..m {
        out[idx[j]] = acl[j];
    }
}
