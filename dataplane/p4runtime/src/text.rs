//! The P4Info in protobuf's text format (what P4 compilers write and
//! p4runtime-shell reads), and the check that a controller's P4Info is
//! cfdp's pipeline.

use prost::Message;
use prost_reflect::text_format::FormatOptions;
use prost_reflect::{DescriptorPool, DynamicMessage};

use crate::proto::p4::config::v1::P4Info;

/// The descriptors the build compiled (`build.rs`).
const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

fn p4info_descriptor() -> prost_reflect::MessageDescriptor {
    DescriptorPool::decode(DESCRIPTORS)
        .expect("the build's own descriptors decode")
        .get_message_by_name("p4.config.v1.P4Info")
        .expect("P4Info is among them")
}

/// A P4Info in text format.
pub fn to_text(p: &P4Info) -> String {
    let m = DynamicMessage::decode(p4info_descriptor(), p.encode_to_vec().as_slice())
        .expect("a message decodes by its own descriptor");
    let mut s = m.to_text_format_with_options(&FormatOptions::new().pretty(true));
    s.push('\n');
    s
}

/// Why a P4Info text was refused.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// Not protobuf text format for a P4Info (a field cfdp's subset does
    /// not describe is named).
    #[error("P4Info text: {0}")]
    Parse(#[source] prost_reflect::text_format::ParseError),
    #[error("P4Info: {0}")]
    Decode(#[source] prost::DecodeError),
}

/// A P4Info read from text format. Fields cfdp's subset does not describe
/// are refused by name (so a typo is not silently a different P4Info).
pub fn from_text(text: &str) -> Result<P4Info, TextError> {
    let m =
        DynamicMessage::parse_text_format(p4info_descriptor(), text).map_err(TextError::Parse)?;
    P4Info::decode(m.encode_to_vec().as_slice()).map_err(TextError::Decode)
}

/// What part of a controller's P4Info is not cfdp's pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineMismatch {
    #[error(
        "config.p4info: missing (cfdp's pipeline is fixed: send its P4Info, from \
         GetForwardingPipelineConfig or configs/p4/cfdp.p4info.txtpb)"
    )]
    Missing,
    #[error(
        "config.p4info: its {0} differ from cfdp's fixed pipeline (cfdp runs no P4 \
         program: send its own P4Info, from GetForwardingPipelineConfig or \
         configs/p4/cfdp.p4info.txtpb)"
    )]
    Differs(PipelinePart),
}

/// A part of the pipeline a P4Info describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelinePart {
    Tables,
    Actions,
    DirectCounters,
}

impl std::fmt::Display for PipelinePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PipelinePart::Tables => "tables",
            PipelinePart::Actions => "actions",
            PipelinePart::DirectCounters => "direct counters",
        })
    }
}

/// Whether a controller's P4Info is cfdp's pipeline (its tables, actions
/// and direct counters; the package description may differ). The error
/// says what differs.
pub fn same_pipeline(given: Option<&P4Info>, ours: &P4Info) -> Result<(), PipelineMismatch> {
    let given = given.ok_or(PipelineMismatch::Missing)?;
    let part = if given.tables != ours.tables {
        PipelinePart::Tables
    } else if given.actions != ours.actions {
        PipelinePart::Actions
    } else if given.direct_counters != ours.direct_counters {
        PipelinePart::DirectCounters
    } else {
        return Ok(());
    };
    Err(PipelineMismatch::Differs(part))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::p4info;

    #[test]
    fn the_text_form_reads_back_as_the_same_p4info() {
        let ours = p4info();
        let back = from_text(&to_text(&ours)).unwrap();
        assert_eq!(back, ours);
        assert_eq!(same_pipeline(Some(&back), &ours), Ok(()));
    }

    #[test]
    fn the_shipped_p4info_is_the_pipeline() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../configs/p4/cfdp.p4info.txtpb"
        );
        let shipped = std::fs::read_to_string(path).unwrap();
        assert_eq!(
            shipped,
            to_text(&p4info()),
            "configs/p4/cfdp.p4info.txtpb is stale: cargo run -- p4info > configs/p4/cfdp.p4info.txtpb"
        );
    }

    #[test]
    fn another_pipeline_is_refused_with_what_differs() {
        let ours = p4info();
        let mut other = ours.clone();
        other.tables[0].match_fields[2].bitwidth = 16;
        assert_eq!(
            same_pipeline(Some(&other), &ours),
            Err(PipelineMismatch::Differs(PipelinePart::Tables))
        );
        let mut other = ours.clone();
        other.actions.pop();
        assert_eq!(
            same_pipeline(Some(&other), &ours),
            Err(PipelineMismatch::Differs(PipelinePart::Actions))
        );
        assert_eq!(same_pipeline(None, &ours), Err(PipelineMismatch::Missing));
        // The package description may differ.
        let mut renamed = ours.clone();
        renamed.pkg_info = None;
        assert_eq!(same_pipeline(Some(&renamed), &ours), Ok(()));
    }

    #[test]
    fn a_field_cfdp_does_not_know_is_refused_by_name() {
        let e = from_text("tables { preamble { id: 1 } no_such_field: 3 }").unwrap_err();
        assert!(matches!(e, TextError::Parse(_)), "{e}");
        assert!(e.to_string().contains("no_such_field"), "{e}");
    }
}
