//! `cfdp ctl`: one request over the control socket, the response on stdout
//! (pretty-printed on a terminal), and an exit status that says whether it
//! worked: 0 ok, 1 the server answered with an error (or an update of the
//! batch failed), 2 the request could not be made (usage, file, socket).

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

/// Where to reach the server.
pub enum Target<'a> {
    Unix(&'a Path),
    /// A TCP address and the token the connection authenticates with
    /// (`control.token_file` of the server).
    Tcp {
        addr: &'a str,
        token: &'a str,
    },
}

/// Why a request could not be made or its answer read.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: std::io::Error,
    },
    #[error("send: {0}")]
    Send(#[source] std::io::Error),
    #[error("receive: {0}")]
    Receive(#[source] std::io::Error),
    #[error("the server closed the connection")]
    Closed,
    /// The server refused the token (or another first request).
    #[error("authentication refused: {0}")]
    Refused(String),
    #[error("bad response: {source}: {line}")]
    BadResponse {
        line: String,
        #[source]
        source: serde_json::Error,
    },
    /// The batch file could not be read.
    #[error("{}: {source}", path.display())]
    File {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not valid JSON: {source}", path.display())]
    NotJson {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// A connection speaking the control protocol.
pub struct Client {
    reader: BufReader<Box<dyn Read + Send>>,
    writer: Box<dyn Write + Send>,
    next_id: u64,
}

impl Client {
    pub fn connect(target: &Target<'_>) -> Result<Self, ClientError> {
        let timeout = Some(Duration::from_secs(600));
        let (r, w): (Box<dyn Read + Send>, Box<dyn Write + Send>) = match target {
            Target::Unix(p) => {
                let at = |source| ClientError::Connect {
                    target: p.display().to_string(),
                    source,
                };
                let s = UnixStream::connect(p).map_err(at)?;
                s.set_read_timeout(timeout).map_err(at)?;
                (Box::new(s.try_clone().map_err(at)?), Box::new(s))
            }
            Target::Tcp { addr, .. } => {
                let at = |source| ClientError::Connect {
                    target: addr.to_string(),
                    source,
                };
                let s = std::net::TcpStream::connect(addr).map_err(at)?;
                s.set_read_timeout(timeout).map_err(at)?;
                (Box::new(s.try_clone().map_err(at)?), Box::new(s))
            }
        };
        let mut c = Self {
            reader: BufReader::new(r),
            writer: w,
            next_id: 1,
        };
        if let Target::Tcp { token, .. } = target {
            let hello = c.call("hello", json!({ "token": token }))?;
            if let Some(e) = hello.get("error") {
                let msg = e["message"].as_str().unwrap_or("?").to_string();
                return Err(ClientError::Refused(msg));
            }
        }
        Ok(c)
    }

    /// Sends one request and returns the whole response object.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&req.to_string())
    }

    /// Sends one raw line and reads one response line.
    pub fn send_raw(&mut self, line: &str) -> Result<Value, ClientError> {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|_| self.writer.flush())
            .map_err(ClientError::Send)?;
        let mut resp = String::new();
        match self.reader.read_line(&mut resp) {
            Ok(0) => Err(ClientError::Closed),
            Ok(_) => serde_json::from_str(&resp)
                .map_err(|source| ClientError::BadResponse { line: resp, source }),
            Err(e) => Err(ClientError::Receive(e)),
        }
    }
}

/// Runs one `cfdp ctl` command; returns the exit status.
pub fn run(target: &Target<'_>, method: &str, params: Value) -> u8 {
    let mut c = match Client::connect(target) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cfdp ctl: cannot connect: {e}");
            return 2;
        }
    };
    let resp = match c.call(method, params) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cfdp ctl: {e}");
            return 2;
        }
    };
    let text = if std::io::stdout().is_terminal() {
        serde_json::to_string_pretty(&resp)
    } else {
        serde_json::to_string(&resp)
    }
    .expect("JSON serializes");
    println!("{text}");
    if let Some(e) = resp.get("error") {
        eprintln!(
            "cfdp ctl: error {}: {}",
            e["code"],
            e["message"].as_str().unwrap_or("?")
        );
        return 1;
    }
    let failed = resp["result"]["results"]
        .as_array()
        .is_some_and(|rs| rs.iter().any(|r| r["code"] != "ok"));
    if failed {
        eprintln!("cfdp ctl: not every update succeeded (see results)");
        return 1;
    }
    0
}

/// Reads the batch of `cfdp ctl apply FILE` (`-`: standard input).
pub fn read_batch(file: &Path) -> Result<Value, ClientError> {
    let cannot = |source| ClientError::File {
        path: file.to_path_buf(),
        source,
    };
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(cannot)?;
        s
    } else {
        std::fs::read_to_string(file).map_err(cannot)?
    };
    serde_json::from_str(&text).map_err(|source| ClientError::NotJson {
        path: file.to_path_buf(),
        source,
    })
}
