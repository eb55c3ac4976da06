//! `cfdp top`: a terminal view of a running node over its control socket,
//! refreshed every second — per-worker packets/s and drops, the busiest
//! rules, batch latency, generation, journal and filter occupancy. `q`
//! (or Esc, or Ctrl-C) quits. Plain terminal escapes through `ratatui`'s
//! crossterm backend, so it works over SSH.
//!
//! Rates are differences between two `stats` answers (and two `rules`
//! pages for the rules) divided by the time between them.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cfdp_control::client::{Client, ClientError, Target};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};
use serde_json::{json, Value};

/// Rules read per refresh for the busiest-rules table (the first page by
/// id: a node with more rules shows the busiest of these).
const RULES_PAGE: u64 = 10_000;
/// Rows of the busiest-rules table.
const TOP_RULES: usize = 10;

/// Why the view stopped.
#[derive(Debug, thiserror::Error)]
enum TopError {
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{method}: {message}")]
    Refused {
        method: &'static str,
        message: Value,
    },
}

/// One reading of the node.
struct Sample {
    at: Instant,
    stats: Value,
    /// Packets per rule id.
    rules: HashMap<u64, u64>,
}

/// Runs the view until the user quits; 0, or 1 when the node went away.
pub fn top(target: &Target<'_>, interval: Duration) -> ExitCode {
    let mut c = match Client::connect(target) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cfdp top: cannot connect: {e}");
            return ExitCode::from(2);
        }
    };
    let mut term = ratatui::init();
    let r = run(&mut term, &mut c, interval);
    ratatui::restore();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cfdp top: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(term: &mut DefaultTerminal, c: &mut Client, interval: Duration) -> Result<(), TopError> {
    let mut prev: Option<Sample> = None;
    loop {
        let now = sample(c)?;
        term.draw(|f| draw(f, prev.as_ref(), &now))?;
        prev = Some(now);
        let until = Instant::now() + interval;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left)? {
                break;
            }
            if let Event::Key(k) = event::read()? {
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if k.kind == KeyEventKind::Press
                    && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c)
                {
                    return Ok(());
                }
            }
        }
    }
}

fn sample(c: &mut Client) -> Result<Sample, TopError> {
    let mut result = |method: &'static str, params: Value| -> Result<Value, TopError> {
        let r = c.call(method, params)?;
        match r.get("error") {
            Some(e) => Err(TopError::Refused {
                method,
                message: e["message"].clone(),
            }),
            None => Ok(r["result"].clone()),
        }
    };
    let stats = result("stats", json!({}))?;
    let page = result("rules", json!({"limit": RULES_PAGE}))?;
    let rules = page["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["id"].as_u64()?, r["packets"].as_u64()?)))
        .collect();
    Ok(Sample {
        at: Instant::now(),
        stats,
        rules,
    })
}

/// Per second between two readings of a counter.
fn rate(now: u64, before: Option<u64>, secs: f64) -> String {
    match before {
        Some(b) if secs > 0.0 => format!("{:.0}", now.saturating_sub(b) as f64 / secs),
        _ => "…".into(),
    }
}

fn draw(f: &mut Frame<'_>, prev: Option<&Sample>, now: &Sample) {
    let secs = prev.map_or(0.0, |p| now.at.duration_since(p.at).as_secs_f64());
    let [head, workers, rules] = Layout::vertical([
        Constraint::Length(6),
        Constraint::Min(4),
        Constraint::Min(6),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(head_text(&now.stats))
            .block(Block::bordered().title(" cfdp top — q quits ")),
        head,
    );
    f.render_widget(worker_table(prev, now, secs), workers);
    f.render_widget(rule_table(prev, now, secs), rules);
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn head_text(s: &Value) -> String {
    format!(
        "generation {}   rules {}   up {:.0} s\n\
         batches applied {} refused {}   batch p50 {} µs  p99 {} µs  max {} µs\n\
         journal records {}   filter occupancy {:.1} %  items {}\n{}",
        n(&s["generation"]),
        n(&s["rules"]),
        s["uptime_s"].as_f64().unwrap_or(0.0),
        n(&s["batches"]["applied"]),
        n(&s["batches"]["refused"]),
        n(&s["batch_us"]["p50"]),
        n(&s["batch_us"]["p99"]),
        n(&s["batch_us"]["max"]),
        s["journal"]["records"]
            .as_u64()
            .map_or("-".into(), |r| r.to_string()),
        s["filter"]["occupancy"].as_f64().unwrap_or(0.0) * 100.0,
        n(&s["filter"]["items"]),
        conntrack_line(&s["conntrack"]),
    )
}

/// Tracked connections: how many, the states most of them are in, what
/// was refused or dropped to make room.
fn conntrack_line(ct: &Value) -> String {
    let Some(states) = ct["by_state"].as_object() else {
        return "connections: no table".into();
    };
    let mut busy: Vec<(&String, u64)> = states.iter().map(|(k, v)| (k, n(v))).collect();
    busy.sort_by_key(|&(_, v)| std::cmp::Reverse(v));
    let top: Vec<String> = busy
        .iter()
        .filter(|&&(_, v)| v > 0)
        .take(3)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    format!(
        "connections {} of {}   {}   refused {}  early-dropped {}",
        n(&ct["entries"]),
        n(&ct["capacity"]),
        if top.is_empty() {
            "-".into()
        } else {
            top.join("  ")
        },
        n(&ct["refused"]),
        n(&ct["early_dropped"]),
    )
}

fn worker_table(prev: Option<&Sample>, now: &Sample, secs: f64) -> Table<'static> {
    let before = |i: usize, key: &str| prev.and_then(|p| p.stats["workers"][i][key].as_u64());
    let rows: Vec<Row> = now.stats["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, w)| {
            Row::new(vec![
                i.to_string(),
                rate(n(&w["packets"]), before(i, "packets"), secs),
                rate(n(&w["dropped"]), before(i, "dropped"), secs),
                rate(n(&w["rx_dropped"]), before(i, "rx_dropped"), secs),
                n(&w["packets"]).to_string(),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(8),
        Constraint::Length(14),
        Constraint::Length(12),
        Constraint::Length(14),
        Constraint::Min(12),
    ];
    Table::new(rows, widths)
        .header(Row::new(vec![
            "worker",
            "packets/s",
            "drops/s",
            "rx drops/s",
            "packets",
        ]))
        .block(Block::bordered().title(" workers "))
}

fn rule_table(prev: Option<&Sample>, now: &Sample, secs: f64) -> Table<'static> {
    let mut busy: Vec<(u64, u64, u64)> = now
        .rules
        .iter()
        .map(|(&id, &p)| {
            let d = prev
                .and_then(|q| q.rules.get(&id))
                .map_or(0, |&b| p.saturating_sub(b));
            (id, d, p)
        })
        .collect();
    busy.sort_by_key(|&(id, d, p)| (std::cmp::Reverse(d), std::cmp::Reverse(p), id));
    let rows: Vec<Row> = busy
        .iter()
        .take(TOP_RULES)
        .map(|&(id, d, p)| {
            let per_s = if secs > 0.0 {
                format!("{:.0}", d as f64 / secs)
            } else {
                "…".into()
            };
            Row::new(vec![id.to_string(), per_s, p.to_string()])
        })
        .collect();
    let widths = [12, 14, 14].map(Constraint::Length);
    Table::new(rows, widths)
        .header(Row::new(vec!["rule", "packets/s", "packets"]))
        .block(Block::bordered().title(" busiest rules "))
}
