//! The access log: each shard formats whole lines into its own buffer and
//! hands full buffers to one writer thread, so a slow disk never blocks an
//! event loop and lines from different shards never interleave mid-line.
//! If the writer falls behind, shards drop lines (and count them) rather
//! than wait. SIGUSR1 makes the writer reopen the file, for logrotate.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use crate::config::LogFormat;
use crate::http::request::{Request, Version};
use crate::http::Status;

/// A shard hands its buffer over once it holds this much.
const FLUSH_BYTES: usize = 64 * 1024;
/// Buffers queued to the writer before shards start dropping lines.
const QUEUE: usize = 64;

enum Msg {
    Lines { buf: Vec<u8>, back: Sender<Vec<u8>> },
    Reopen,
}

/// The writer side; cloned into each shard as a [`ShardLog`].
#[derive(Clone)]
pub struct AccessLog {
    tx: SyncSender<Msg>,
    format: LogFormat,
    /// A reopen was asked for and not yet done.
    reopen: Arc<AtomicBool>,
    /// Lines dropped by every shard, for `/metrics` and `/status.json`
    /// (touched only when a line is dropped, never per request).
    dropped: Arc<AtomicU64>,
}

impl AccessLog {
    /// Open `path` for appending and start the writer thread; dropped lines
    /// are added to `dropped`.
    pub fn open(
        path: &Path,
        format: LogFormat,
        dropped: Arc<AtomicU64>,
    ) -> std::io::Result<AccessLog> {
        let file = open_append(path)?;
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let path = path.to_owned();
        let reopen = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&reopen);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || writer(path, file, rx, &flag))?;
        Ok(AccessLog {
            tx,
            format,
            reopen,
            dropped,
        })
    }

    /// Ask the writer to reopen the file (SIGUSR1). Never blocks: the
    /// request is a flag the writer checks after every buffer, and the
    /// message only wakes it; with the queue full (a stuck disk) the writer
    /// is busy and sees the flag anyway. The signal thread must stay free
    /// for SIGTERM.
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
        let _ = self.tx.try_send(Msg::Reopen);
    }

    pub fn for_shard(&self) -> ShardLog {
        let (back_tx, back_rx) = mpsc::channel();
        ShardLog {
            log: self.clone(),
            buf: Vec::with_capacity(FLUSH_BYTES + 1024),
            back_tx,
            back_rx,
            time_secs: u64::MAX,
            time: String::new(),
            dropped: 0,
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

fn writer(path: PathBuf, mut file: File, rx: Receiver<Msg>, reopen: &AtomicBool) {
    for msg in rx {
        if let Msg::Lines { mut buf, back } = msg {
            // O_APPEND and one write per buffer of whole lines: lines stay
            // whole even if another process appends to the same file.
            if let Err(e) = file.write_all(&buf) {
                tracing::warn!(error = %e, "access log write failed");
            }
            buf.clear();
            let _ = back.send(buf);
        }
        if reopen.swap(false, Ordering::AcqRel) {
            match open_append(&path) {
                Ok(f) => {
                    file = f;
                    tracing::info!(path = %path.display(), "access log reopened");
                }
                Err(e) => {
                    tracing::error!(error = %e, "access log reopen failed; keeping the old file")
                }
            }
        }
    }
}

/// One shard's side of the access log.
pub struct ShardLog {
    log: AccessLog,
    buf: Vec<u8>,
    back_tx: Sender<Vec<u8>>,
    back_rx: Receiver<Vec<u8>>,
    /// The second `time` was rendered for.
    time_secs: u64,
    time: String,
    /// Lines dropped because the writer was behind.
    pub dropped: u64,
}

impl ShardLog {
    /// Append one line for an answered request (`req` is None when the head
    /// could not be parsed; `tls` is the protocol version and cipher suite
    /// of a TLS connection, in the JSON format only).
    pub fn line(
        &mut self,
        unix_secs: u64,
        peer: Option<SocketAddr>,
        tls: Option<(&str, &str)>,
        req: Option<&Request<'_>>,
        status: Status,
        bytes: u64,
    ) {
        self.render_time(unix_secs);
        let ip = peer.map(|p| p.ip());
        let (method, target, version, referer, agent) = match req {
            Some(r) => (
                r.method_name.as_bytes(),
                r.target,
                match r.version {
                    Version::Http10 => "HTTP/1.0",
                    Version::Http11 => "HTTP/1.1",
                    Version::Http2 => "HTTP/2.0",
                },
                r.referer,
                r.user_agent,
            ),
            None => (&b"-"[..], &b"-"[..], "-", None, None),
        };
        let buf = &mut self.buf;
        match self.log.format {
            LogFormat::Combined => {
                match ip {
                    Some(ip) => {
                        let _ = write!(buf, "{ip}");
                    }
                    None => buf.push(b'-'),
                }
                let _ = write!(buf, " - - [{}] \"", self.time);
                escape_text(buf, method);
                buf.push(b' ');
                escape_text(buf, target);
                let _ = write!(buf, " {version}\" {} {bytes} \"", status.code());
                escape_text(buf, referer.unwrap_or(b"-"));
                buf.extend_from_slice(b"\" \"");
                escape_text(buf, agent.unwrap_or(b"-"));
                buf.extend_from_slice(b"\"\n");
            }
            LogFormat::Json => {
                let _ = write!(buf, "{{\"time\":\"{}\",\"remote_addr\":\"", self.time);
                if let Some(ip) = ip {
                    let _ = write!(buf, "{ip}");
                }
                buf.extend_from_slice(b"\",\"method\":\"");
                escape_json(buf, method);
                buf.extend_from_slice(b"\",\"uri\":\"");
                escape_json(buf, target);
                let _ = write!(
                    buf,
                    "\",\"protocol\":\"{version}\",\"status\":{},\"bytes\":{bytes},\"referer\":\"",
                    status.code()
                );
                escape_json(buf, referer.unwrap_or(b""));
                buf.extend_from_slice(b"\",\"user_agent\":\"");
                escape_json(buf, agent.unwrap_or(b""));
                let (tls_version, tls_cipher) = tls.unwrap_or(("", ""));
                let _ = writeln!(
                    buf,
                    "\",\"tls_version\":\"{tls_version}\",\"tls_cipher\":\"{tls_cipher}\"}}"
                );
            }
        }
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// Hand the buffered lines to the writer (on the shard's tick, or when full).
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let fresh = self
            .back_rx
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(FLUSH_BYTES + 1024));
        let buf = std::mem::replace(&mut self.buf, fresh);
        let lines = bytecount_lines(&buf);
        match self.log.tx.try_send(Msg::Lines {
            buf,
            back: self.back_tx.clone(),
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(Msg::Lines { mut buf, .. })) => {
                self.count_dropped(lines);
                buf.clear();
                self.buf = buf;
            }
            Err(_) => self.count_dropped(lines),
        }
    }

    fn count_dropped(&mut self, lines: u64) {
        self.dropped += lines;
        self.log.dropped.fetch_add(lines, Ordering::Relaxed);
    }

    fn render_time(&mut self, secs: u64) {
        if secs == self.time_secs {
            return;
        }
        self.time_secs = secs;
        // "Mon, 30 Nov 2026 15:04:17 GMT"
        let imf = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
        let (day, mon, year, hms) = (&imf[5..7], &imf[8..11], &imf[12..16], &imf[17..25]);
        self.time = match self.log.format {
            LogFormat::Combined => format!("{day}/{mon}/{year}:{hms} +0000"),
            LogFormat::Json => {
                let month = MONTHS.iter().position(|m| *m == mon).unwrap_or(0) + 1;
                format!("{year}-{month:02}-{day}T{hms}Z")
            }
        };
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn bytecount_lines(buf: &[u8]) -> u64 {
    buf.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Like nginx: `"`, `\` and bytes outside printable ASCII become `\xHH`, so
/// a client cannot forge a line break or a field boundary.
fn escape_text(buf: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(buf, "\\x{b:02X}");
        } else {
            buf.push(b);
        }
    }
}

/// JSON string escaping; bytes that are not valid UTF-8 become U+FFFD.
fn escape_json(buf: &mut Vec<u8>, s: &[u8]) {
    for c in String::from_utf8_lossy(s).chars() {
        match c {
            '"' => buf.extend_from_slice(b"\\\""),
            '\\' => buf.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(buf, "\\u{:04x}", c as u32);
            }
            c => {
                let mut tmp = [0u8; 4];
                buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_keep_one_line() {
        let mut buf = Vec::new();
        escape_text(&mut buf, b"a\"b\nc\\");
        assert_eq!(buf, b"a\\x22b\\x0Ac\\x5C");
        let mut buf = Vec::new();
        escape_json(&mut buf, b"a\"b\nc\\\xff");
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "a\\\"b\\u000ac\\\\\u{fffd}"
        );
    }
}
