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

/// A P4Info read from text format. Fields cfdp's subset does not describe
/// are refused by name (so a typo is not silently a different P4Info).
pub fn from_text(text: &str) -> Result<P4Info, String> {
    let m = DynamicMessage::parse_text_format(p4info_descriptor(), text)
        .map_err(|e| format!("P4Info text: {e}"))?;
    P4Info::decode(m.encode_to_vec().as_slice()).map_err(|e| format!("P4Info: {e}"))
}

/// Whether a controller's P4Info is cfdp's pipeline (its tables, actions
/// and direct counters; the package description may differ). The error
/// says what differs.
pub fn same_pipeline(given: Option<&P4Info>, ours: &P4Info) -> Result<(), String> {
    let Some(given) = given else {
        return Err(
            "config.p4info: missing (cfdp's pipeline is fixed: send its P4Info, from \
                    GetForwardingPipelineConfig or configs/p4/cfdp.p4info.txtpb)"
                .to_string(),
        );
    };
    let differs = |what: &str| {
        Err(format!(
            "config.p4info: its {what} differ from cfdp's fixed pipeline (cfdp runs no P4 \
             program: send its own P4Info, from GetForwardingPipelineConfig or \
             configs/p4/cfdp.p4info.txtpb)"
        ))
    };
    if given.tables != ours.tables {
        return differs("tables");
    }
    if given.actions != ours.actions {
        return differs("actions");
    }
    if given.direct_counters != ours.direct_counters {
        return differs("direct counters");
    }
    Ok(())
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
        let e = same_pipeline(Some(&other), &ours).unwrap_err();
        assert!(e.contains("tables"), "{e}");
        let mut other = ours.clone();
        other.actions.pop();
        assert!(same_pipeline(Some(&other), &ours)
            .unwrap_err()
            .contains("actions"));
        assert!(same_pipeline(None, &ours).unwrap_err().contains("missing"));
        // The package description may differ.
        let mut renamed = ours.clone();
        renamed.pkg_info = None;
        assert_eq!(same_pipeline(Some(&renamed), &ours), Ok(()));
    }

    #[test]
    fn a_field_cfdp_does_not_know_is_refused_by_name() {
        let e = from_text("tables { preamble { id: 1 } no_such_field: 3 }").unwrap_err();
        assert!(e.contains("no_such_field"), "{e}");
    }
}
