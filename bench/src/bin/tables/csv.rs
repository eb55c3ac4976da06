//! A results CSV (its run line, columns, rows) and the formatting the
//! renderers share.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// A CSV file as the benches write it: `#` lines (the run record) first.
pub(crate) struct Csv {
    pub(crate) name: String,
    pub(crate) run: Vec<String>,
    pub(crate) cols: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
}

pub(crate) type R<T> = Result<T, Box<dyn std::error::Error>>;

impl Csv {
    pub(crate) fn load(dir: &Path, name: &str) -> R<Csv> {
        let path = dir.join(name);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let run: Vec<String> = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim().to_owned())
            .collect();
        let mut rd = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let cols = rd
            .headers()
            .map_err(|e| format!("{name}: {e}"))?
            .iter()
            .map(str::to_owned)
            .collect();
        let rows = rd
            .records()
            .map(|r| r.map(|r| r.iter().map(str::to_owned).collect()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{name}: {e}"))?;
        let mut c = Csv {
            name: name.to_owned(),
            run,
            cols,
            rows,
        };
        // Files that record the run per row (date, commit, machine columns).
        if c.run.is_empty() {
            if let (Ok(d), Ok(k), Ok(m)) = (c.col("date"), c.col("commit"), c.col("machine")) {
                let mut runs: Vec<String> = Vec::new();
                for r in &c.rows {
                    let line = format!("run {}, commit {}, {}", r[d], r[k], r[m]);
                    if !runs.contains(&line) {
                        runs.push(line);
                    }
                }
                c.run = runs;
            }
        }
        if c.run.is_empty() {
            return Err(format!("{name}: no run record (a first `# run …` line)").into());
        }
        Ok(c)
    }

    pub(crate) fn col(&self, c: &str) -> R<usize> {
        self.cols
            .iter()
            .position(|x| x == c)
            .ok_or_else(|| format!("{}: no column {c}", self.name).into())
    }

    /// Rows as column → value maps.
    pub(crate) fn records(&self) -> Vec<BTreeMap<&str, &str>> {
        self.rows
            .iter()
            .map(|r| {
                self.cols
                    .iter()
                    .map(String::as_str)
                    .zip(r.iter().map(String::as_str))
                    .collect()
            })
            .collect()
    }

    /// The values of column `c`, each once, in the order they first appear.
    pub(crate) fn distinct(&self, c: &str) -> R<Vec<&str>> {
        let i = self.col(c)?;
        let mut out: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !out.contains(&r[i].as_str()) {
                out.push(&r[i]);
            }
        }
        Ok(out)
    }

    /// The first row where every `(column, value)` matches.
    pub(crate) fn find(&self, want: &[(&str, &str)]) -> R<Vec<String>> {
        let idx: Vec<usize> = want.iter().map(|(c, _)| self.col(c)).collect::<R<_>>()?;
        self.rows
            .iter()
            .find(|r| idx.iter().zip(want).all(|(&i, (_, v))| r[i] == *v))
            .cloned()
            .ok_or_else(|| format!("{}: no row {want:?}", self.name).into())
    }

    /// The median of column `col` over the rows where every `(column,
    /// value)` matches (the rounds of an A/B); an error when none does.
    pub(crate) fn median_where(&self, want: &[(&str, &str)], col: &str) -> R<f64> {
        let idx: Vec<usize> = want.iter().map(|(c, _)| self.col(c)).collect::<R<_>>()?;
        let k = self.col(col)?;
        let v: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| idx.iter().zip(want).all(|(&i, (_, v))| r[i] == *v))
            .map(|r| num(&r[k], &self.name))
            .collect::<R<_>>()?;
        if v.is_empty() {
            return Err(format!("{}: no row {want:?}", self.name).into());
        }
        Ok(median(v))
    }

    pub(crate) fn value(&self, want: &[(&str, &str)], col: &str) -> R<f64> {
        let r = self.find(want)?;
        num(&r[self.col(col)?], &self.name)
    }

    /// The source line printed under every table.
    pub(crate) fn source(&self) -> String {
        format!(
            "\n<sub>`results/{}` — {}</sub>\n",
            self.name,
            self.run.join(" · ")
        )
    }
}

pub(crate) fn num(s: &str, file: &str) -> R<f64> {
    s.trim()
        .parse()
        .map_err(|_| format!("{file}: {s:?} is not a number").into())
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// 1234567 → "1,234,567".
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// 10000000 → "10 M", 100000 → "100 k".
pub(crate) fn count_short(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{} M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{} k", n / 1_000),
        n => n.to_string(),
    }
}

pub(crate) fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|", head.join(" | "));
    for _ in head {
        s.push_str("---|");
    }
    s.push('\n');
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

pub(crate) fn f2(x: f64) -> String {
    format!("{x:.2}")
}

pub(crate) fn pct(x: f64, digits: usize) -> String {
    format!("{:.*} %", digits, x * 100.0)
}
