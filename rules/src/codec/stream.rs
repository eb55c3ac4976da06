//! Rule files read from disk as a stream of blocks.
//!
//! Reading a ten-million-rule file (1.4 GB) into one string cost more than
//! parsing it: the string is 1.4 GB of freshly faulted memory, and on the
//! VMs cfdp is measured on a first touch costs 0.3–3 s per GB (the same
//! file read into one reused 8 MB buffer: 0.08–0.12 s). Here the file is
//! read in blocks into a few reused buffers. This thread only finds where
//! the last whole rule of a block ends (the separator `}`, `,` `{` between
//! two rules, found from the block's end); a thread per core cuts its
//! piece into rules (brace depth, strings skipped) and parses them with the
//! same per-rule parser as [`parse_rule_file`]. Cutting on this thread was
//! a serial ~0.9 s of a 10 M-rule file; the separator is a guess the
//! piece's cutter checks (the piece must end exactly after a rule).
//!
//! The stream only *accepts*. A file in any other shape (another spelling
//! of the envelope, an element that is not an object, a rule longer than a
//! block) or with an element the rule parser refuses is not taken, and
//! [`crate::read_rule_file`] then parses the whole text with
//! [`parse_rule_file`], which gives the answer and the error for the first
//! problem in document order. Bad input costs a second read, nothing else:
//! what the stream accepts, `parse_rule_file` accepts with the same rules
//! (a test and the `rule_file` fuzz target check it, with blocks small
//! enough that rules straddle them).
//!
//! [`parse_rule_file`]: crate::parse_rule_file

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam::channel;

use crate::fast::parse_rule_text;
use crate::rule::Rule;

/// Bytes per block: about 28 k rules of the usual spelling, so a chunk of
/// parsing work is a few milliseconds and a thread per core is kept busy
/// with a handful of buffers.
pub const BLOCK: usize = 4 << 20;

/// Where the cutter is in `{"rules": [ ... ]}`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum At {
    /// Before the opening `{`.
    Start,
    /// Before the `"rules"` key.
    Key,
    /// Before the `:`.
    Colon,
    /// Before the list's `[`.
    List,
    /// After `[`: a rule or `]`.
    First,
    /// After a rule: `,` or `]`.
    AfterRule,
    /// After `,`: a rule.
    AfterComma,
    /// After `]`: the closing `}`.
    ListClosed,
    /// After the closing `}`: only whitespace.
    Closed,
}

/// The stream does not take this text (see the module documentation).
struct NotTaken;

/// A piece of the file that starts in `start` (the file's start, or after
/// a separator's `,`) and ends after a whole rule (or, the last piece, at
/// the file's end): `buf[..len]`.
struct Piece {
    no: usize,
    start: At,
    last: bool,
    buf: Vec<u8>,
    len: usize,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The length of the JSON object starting at `text[0]` (a `{`), found by
/// bracket depth with strings skipped; `None` when it does not end within
/// `text`. Mismatched brackets are the rule parser's to refuse.
fn object_len(text: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if in_str {
            match b {
                b'\\' => i += 1,
                b'"' => in_str = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_str = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// Cuts the complete rules out of `data`, starting in state `at`; returns
/// the new state and how many bytes were used (the rest, an incomplete
/// rule or key, starts the next block).
fn cut(data: &[u8], mut at: At, rules: &mut Vec<(usize, usize)>) -> Result<(At, usize), NotTaken> {
    let mut pos = 0;
    loop {
        while pos < data.len() && is_ws(data[pos]) {
            pos += 1;
        }
        let Some(&b) = data.get(pos) else {
            return Ok((at, pos));
        };
        at = match (at, b) {
            (At::Start, b'{') => At::Key,
            (At::Key, b'"') => {
                const KEY: &[u8] = b"\"rules\"";
                let have = &data[pos..data.len().min(pos + KEY.len())];
                if have.len() < KEY.len() {
                    return if KEY.starts_with(have) {
                        Ok((at, pos))
                    } else {
                        Err(NotTaken)
                    };
                }
                if have != KEY {
                    return Err(NotTaken);
                }
                pos += KEY.len() - 1;
                At::Colon
            }
            (At::Colon, b':') => At::List,
            (At::List, b'[') => At::First,
            (At::First | At::AfterComma, b'{') => match object_len(&data[pos..]) {
                Some(n) => {
                    rules.push((pos, pos + n));
                    pos += n - 1;
                    At::AfterRule
                }
                None => return Ok((at, pos)),
            },
            (At::AfterRule, b',') => At::AfterComma,
            (At::First | At::AfterRule, b']') => At::ListClosed,
            (At::ListClosed, b'}') => At::Closed,
            _ => return Err(NotTaken),
        };
        pos += 1;
    }
}

/// Cuts and parses one piece; `None` if it does not start and end where
/// it should, or a rule is not valid UTF-8 or not a valid rule (the
/// whole-text parser then names the problem; positions do not matter
/// here, so none are given).
fn parse_piece(p: &Piece) -> Option<Vec<Rule>> {
    let text = &p.buf[..p.len];
    let mut rules = Vec::new();
    let (end, used) = cut(text, p.start, &mut rules).ok()?;
    let want = if p.last { At::Closed } else { At::AfterRule };
    if end != want || used != text.len() {
        return None;
    }
    rules
        .iter()
        .map(|&(a, b)| {
            let text = std::str::from_utf8(&text[a..b]).ok()?;
            parse_rule_text(text, None).ok()
        })
        .collect()
}

/// The position of the `,` after the last whole rule in `data` that
/// another rule follows (`}` `,` `{` with any whitespace), searched from
/// the end. In the plain spelling `,` before `{` occurs only between
/// rules; anywhere else (inside a string) the pieces on either side fail
/// their cut.
fn last_separator(data: &[u8]) -> Option<usize> {
    let mut end = data.len();
    while let Some(open) = data[..end].iter().rposition(|&b| b == b'{') {
        let mut i = open;
        while i > 0 && is_ws(data[i - 1]) {
            i -= 1;
        }
        if i > 0 && data[i - 1] == b',' {
            let comma = i - 1;
            let mut j = comma;
            while j > 0 && is_ws(data[j - 1]) {
                j -= 1;
            }
            if j > 0 && data[j - 1] == b'}' {
                return Some(comma);
            }
        }
        end = open;
    }
    None
}

/// Keeps chunk `no`'s outcome in document order.
fn store(results: &mut Vec<Option<Vec<Rule>>>, no: usize, r: Option<Vec<Rule>>) {
    if results.len() <= no {
        results.resize_with(no + 1, || None);
    }
    results[no] = r;
}

/// Reads into `buf` until it is full or the input ends; the bytes read.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The input, read a block at a time and cut into [`Piece`]s at the last
/// rule separator of each block (the rest starts the next piece).
struct Blocks<R> {
    input: R,
    block: usize,
    buf: Vec<u8>,
    len: usize,
    no: usize,
}

impl<R: Read> Blocks<R> {
    /// The next piece; `next` (a spare buffer of `block` bytes) becomes
    /// the buffer that keeps what follows the cut. `None` when one rule
    /// (or the envelope) is longer than a block.
    fn cut(&mut self, mut next: Vec<u8>) -> Option<Piece> {
        let len = self.len;
        let last = len < self.block;
        let end = if last {
            len
        } else {
            last_separator(&self.buf[..len])?
        };
        // The next piece starts after the separator's `,`.
        let tail = if last { 0 } else { len - end - 1 };
        next[..tail].copy_from_slice(&self.buf[len - tail..len]);
        self.len = tail;
        let no = self.no;
        self.no += 1;
        Some(Piece {
            no,
            start: if no == 0 { At::Start } else { At::AfterComma },
            last,
            buf: std::mem::replace(&mut self.buf, next),
            len: end,
        })
    }

    /// Reads on after the kept tail.
    fn refill(&mut self) -> io::Result<()> {
        self.len += fill(&mut self.input, &mut self.buf[self.len..])?;
        Ok(())
    }
}

/// A piece's rules; a piece not taken sets `failed` so that the others
/// stop parsing.
fn parse_flagged(p: &Piece, failed: &AtomicBool) -> Option<Vec<Rule>> {
    let r = if failed.load(Ordering::Relaxed) {
        None
    } else {
        parse_piece(p)
    };
    if r.is_none() {
        failed.store(true, Ordering::Relaxed);
    }
    r
}

/// The pieces' rules in order, or `None` if any piece was not taken.
fn concat(results: Vec<Option<Vec<Rule>>>) -> Option<Vec<Rule>> {
    let total = results.iter().map(|r| r.as_ref().map_or(0, Vec::len)).sum();
    let mut rules = Vec::with_capacity(total);
    for r in results {
        rules.extend(r?);
    }
    Some(rules)
}

/// A parsed piece coming back: its number, its rules, its buffer (reused).
type Done = (usize, Option<Vec<Rule>>, Vec<u8>);

/// Reads a rule file (`{"rules": [...]}`) from `input` in blocks of
/// `block` bytes; `Ok(None)` when the stream does not take it (then parse
/// the whole text with [`crate::parse_rule_file`], which names the
/// problem). `threads` parse the pieces; with 0 the calling thread parses
/// them itself. Public for the fuzz target, which reads with small blocks
/// so that rules straddle them, and on one thread (LeakSanitizer counts a
/// finished thread's thread-local bookkeeping as a leak).
pub fn read_rule_stream(
    mut input: impl Read,
    block: usize,
    threads: usize,
) -> io::Result<Option<Vec<Rule>>> {
    let block = block.max(16);
    let mut buf = vec![0u8; block];
    let len = fill(&mut input, &mut buf)?;
    if len < block {
        // The whole file in one block: parsed right here.
        return Ok(parse_piece(&Piece {
            no: 0,
            start: At::Start,
            last: true,
            buf,
            len,
        }));
    }
    let mut blocks = Blocks {
        input,
        block,
        buf,
        len,
        no: 0,
    };
    let failed = AtomicBool::new(false);
    let (work_tx, work_rx) = channel::bounded::<Piece>(threads);
    let (done_tx, done_rx) = channel::unbounded::<Done>();
    let mut results: Vec<Option<Vec<Rule>>> = Vec::new();
    let outcome: io::Result<bool> = std::thread::scope(|s| {
        for _ in 0..threads {
            let tx = done_tx.clone();
            let (work_rx, failed) = (&work_rx, &failed);
            s.spawn(move || {
                for p in work_rx {
                    let r = parse_flagged(&p, failed);
                    if tx.send((p.no, r, p.buf)).is_err() {
                        break;
                    }
                }
            });
        }
        // Buffers in flight at most: enough to keep every thread busy
        // while this one reads the next block.
        let max_buffers = 2 * threads + 2;
        let mut buffers = 1usize;
        let run = (|| -> io::Result<bool> {
            loop {
                let next = if buffers < max_buffers {
                    buffers += 1;
                    vec![0u8; block]
                } else {
                    let Ok((no, r, b)) = done_rx.recv() else {
                        return Ok(false);
                    };
                    store(&mut results, no, r);
                    b
                };
                let Some(piece) = blocks.cut(next) else {
                    return Ok(false);
                };
                let last = piece.last;
                if threads == 0 {
                    let r = parse_flagged(&piece, &failed);
                    let _ = done_tx.send((piece.no, r, piece.buf));
                } else if work_tx.send(piece).is_err() {
                    return Ok(false);
                }
                if last || failed.load(Ordering::Relaxed) {
                    return Ok(true);
                }
                blocks.refill()?;
            }
        })();
        drop(work_tx);
        drop(done_tx);
        for (no, r, _) in &done_rx {
            store(&mut results, no, r);
        }
        run
    });
    if !outcome? || failed.load(Ordering::Relaxed) {
        return Ok(None);
    }
    Ok(concat(results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_rule_file;

    fn rule(i: usize) -> String {
        format!(
            r#"{{"id": {}, "match": {{"flow": {{"src": "10.0.{}.{}", "dst": "192.0.2.1", "proto": "udp", "sport": {}, "dport": 53}}}}, "action": "drop"}}"#,
            i + 1,
            (i >> 8) & 255,
            i & 255,
            1024 + i % 50_000
        )
    }

    /// The stream's answer, which must not depend on the threads.
    fn stream(text: &str, block: usize) -> Option<Vec<Rule>> {
        let threaded = read_rule_stream(text.as_bytes(), block, 2).unwrap();
        let inline = read_rule_stream(text.as_bytes(), block, 0).unwrap();
        assert!(
            threaded == inline,
            "block {block}: threads changed the answer"
        );
        threaded
    }

    #[test]
    fn accepts_what_the_whole_text_parser_accepts_at_every_cut() {
        let many: Vec<String> = (0..3000).map(rule).collect();
        let docs = [
            format!("{{\"rules\": [\n{}\n]}}\n", many.join(",\n")),
            format!("\r\n\t{{ \"rules\" :[{}] }}  ", many[..5].join(" , ")),
            "{\"rules\": []}".to_string(),
            "{\"rules\":[ ]}".to_string(),
            // Brackets and escapes inside strings do not end a rule.
            r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": {"redirect": 2}}, {"id": 2, "match": {"src_prefix": "10.\u0030.0.0/8"}, "action": "drop"}]}"#.to_string(),
        ];
        for doc in &docs {
            let want = parse_rule_file(doc).unwrap();
            // Any block longer than one rule (~140 bytes) takes the file.
            for block in [150, 151, 200, 257, 333, 4096, 1 << 20] {
                let got = stream(doc, block);
                assert!(got.as_ref() == Some(&want), "block {block}: {doc:.80}");
            }
        }
        assert_eq!(stream(&docs[0], 4096).unwrap().len(), 3000);
        // A rule longer than a block is not taken.
        assert_eq!(stream(&docs[0], 100), None);
    }

    #[test]
    fn declines_what_it_does_not_take() {
        let good = rule(0);
        let bad_rule = r#"{"id": 5, "match": {"dst_prefix": "10.0.0.1/8"}, "action": "drop"}"#;
        let docs = [
            format!("{{\"rules\": [{good}, {bad_rule}]}}"),
            format!("{{\"rules\": [{good}, 3]}}"),
            format!("{{\"rules\": [{good},]}}"),
            format!("{{\"rules\": [{good}]}} 7"),
            format!("{{\"rules\": [{good}]"),
            format!("{{\"rules\": [{good}"),
            format!("{{\"rulez\": [{good}]}}"),
            format!("{{\"r\\u0075les\": [{good}]}}"),
            format!("[{good}]"),
            format!("{{\"rules\": [{good}], \"rules\": []}}"),
            format!("{{\"rules\": [{good} {good}]}}"),
            // A separator inside a string: the pieces around it fail.
            format!("{{\"rules\": [{good}, {{\"id\": 2, \"x\": \"}}, {{\"}}, {good}]}}"),
            "".to_string(),
        ];
        for doc in &docs {
            for block in [16, 33, 4096] {
                assert_eq!(stream(doc, block), None, "block {block}: {doc}");
            }
        }
        // Invalid UTF-8 inside a rule's string.
        let mut bytes = format!("{{\"rules\": [{good}]}}").into_bytes();
        let at = bytes.iter().position(|&b| b == b'1').unwrap();
        bytes[at] = 0xff;
        assert_eq!(read_rule_stream(&bytes[..], 16, 2).unwrap(), None);
    }

    #[test]
    fn a_bad_rule_in_a_later_block_declines_the_whole_file() {
        let mut many: Vec<String> = (0..20_000).map(rule).collect();
        many[15_000] =
            r#"{"id": 1, "match": {"dst_prefix": "10.0.0.1/8"}, "action": "drop"}"#.into();
        let doc = format!("{{\"rules\": [{}]}}", many.join(",\n"));
        assert_eq!(stream(&doc, 64 << 10), None);
        many.truncate(15_000);
        let doc = format!("{{\"rules\": [{}]}}", many.join(",\n"));
        assert_eq!(stream(&doc, 64 << 10).map(|r| r.len()), Some(15_000));
    }
}
