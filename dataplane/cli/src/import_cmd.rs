//! `cfdp rules import --format classbench IN [-o OUT] [--action A]`: a
//! ClassBench filter set as a cfdp rule file. Line `i` of `n` becomes rule
//! id `i` with priority `n - i + 1` (the first matching line wins, as in
//! ClassBench and `rte_acl`); the TCP-flags column is not part of cfdp's
//! rules, and the import says once how many rules had a non-wildcard one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cfdp_rules::classbench::parse_rules;
use cfdp_rules::{AclRule, Action};

/// The formats `import` reads.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Classbench,
}

pub struct Args {
    pub format: Format,
    pub input: PathBuf,
    /// `None`: standard output.
    pub out: Option<PathBuf>,
    pub action: Action,
}

pub fn import(a: &Args) -> ExitCode {
    let Format::Classbench = a.format;
    let text = match std::fs::read_to_string(&a.input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cfdp: {}: {e}", a.input.display());
            return ExitCode::from(2);
        }
    };
    let imported = match parse_rules(&text, a.action) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("cfdp: {}: {e}", a.input.display());
            return ExitCode::from(2);
        }
    };
    if imported.flags_ignored > 0 {
        eprintln!(
            "cfdp: {}: the TCP-flags column is not part of cfdp's rules: ignored in {} of {} \
             rules (as rte_acl does)",
            a.input.display(),
            imported.flags_ignored,
            imported.rules.len()
        );
    }
    let written = match &a.out {
        Some(path) => write_file(path, &imported.rules),
        None => write_rules(&mut std::io::stdout().lock(), &imported.rules),
    };
    if let Err(e) = written {
        let at = a
            .out
            .as_deref()
            .map_or("stdout".into(), |p| p.display().to_string());
        eprintln!("cfdp: {at}: {e}");
        return ExitCode::from(1);
    }
    eprintln!("cfdp: imported {} rules", imported.rules.len());
    ExitCode::SUCCESS
}

fn write_file(path: &Path, rules: &[AclRule]) -> std::io::Result<()> {
    let f = cfdp_pcap::create_output(path)?;
    let mut w = std::io::BufWriter::new(f);
    write_rules(&mut w, rules)?;
    w.flush()
}

/// A rule file, one rule a line.
fn write_rules(w: &mut impl Write, rules: &[AclRule]) -> std::io::Result<()> {
    writeln!(w, "{{\"rules\": [")?;
    for (i, r) in rules.iter().enumerate() {
        let sep = if i + 1 < rules.len() { "," } else { "" };
        let line = serde_json::to_string(&r.to_rule()).map_err(std::io::Error::other)?;
        writeln!(w, "  {line}{sep}")?;
    }
    writeln!(w, "]}}")
}
