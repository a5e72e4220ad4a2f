//! The access log: each shard formats whole lines into its own buffer and
//! hands full buffers to one writer thread, so a slow disk never blocks an
//! event loop and lines from different shards never interleave mid-line.
//! If the writer falls behind, shards drop lines (and count them) rather
//! than wait. SIGUSR1 makes the writer reopen the file, for logrotate.
//!
//! Formats: `combined` is nginx's byte for byte (goaccess and every log
//! tool read it); `combined_timed` appends `"$host" $request_time_us
//! "$request_id" $msec` to it, where tools that read combined ignore them
//! (and `"$site"` after those on a server with `[[sites]]`); `json` writes the fields `access_log_fields` chooses, in its order.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::http::request::{Request, Version};
use crate::http::Status;

/// Access log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// The NCSA combined format nginx and Apache write by default.
    Combined,
    /// Combined, then the host, the request time in microseconds, the
    /// request id and the time with milliseconds.
    CombinedTimed,
    /// One JSON object per line.
    Json,
}

/// A shard hands its buffer over once it holds this much.
const FLUSH_BYTES: usize = 64 * 1024;
/// Buffers queued to the writer before shards start dropping lines.
const QUEUE: usize = 64;

/// A field of a JSON line (`access_log_fields`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Time,
    RemoteAddr,
    Method,
    Uri,
    Protocol,
    Status,
    Bytes,
    Referer,
    UserAgent,
    TlsVersion,
    TlsCipher,
    Host,
    RequestTimeUs,
    RequestId,
    Site,
}

impl Field {
    /// Every field, in the default order (the fields of earlier releases
    /// first, so their lines only grew at the end).
    pub const ALL: [Field; 15] = [
        Field::Time,
        Field::RemoteAddr,
        Field::Method,
        Field::Uri,
        Field::Protocol,
        Field::Status,
        Field::Bytes,
        Field::Referer,
        Field::UserAgent,
        Field::TlsVersion,
        Field::TlsCipher,
        Field::Host,
        Field::RequestTimeUs,
        Field::RequestId,
        Field::Site,
    ];

    /// The JSON key, and the name `access_log_fields` takes.
    pub fn name(self) -> &'static str {
        match self {
            Field::Time => "time",
            Field::RemoteAddr => "remote_addr",
            Field::Method => "method",
            Field::Uri => "uri",
            Field::Protocol => "protocol",
            Field::Status => "status",
            Field::Bytes => "bytes",
            Field::Referer => "referer",
            Field::UserAgent => "user_agent",
            Field::TlsVersion => "tls_version",
            Field::TlsCipher => "tls_cipher",
            Field::Host => "host",
            Field::RequestTimeUs => "request_time_us",
            Field::RequestId => "request_id",
            Field::Site => "site",
        }
    }

    pub fn parse(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// What one line says about an answered request.
pub struct Line<'a> {
    pub peer: Option<SocketAddr>,
    /// The TLS protocol version and cipher suite (JSON only).
    pub tls: Option<(&'a str, &'a str)>,
    /// `None` when the head could not be parsed.
    pub req: Option<&'a Request<'a>>,
    pub status: Status,
    pub bytes: u64,
    /// When the request's first byte was read (its HEADERS, on HTTP/2).
    pub started: Instant,
    /// The request id (`request_id_header`), or empty.
    pub request_id: &'a [u8],
    /// The site that answered (its first name), on a server with
    /// `[[sites]]`; `None` on one without (the default site).
    pub site: Option<&'a str>,
}

enum Msg {
    Lines { buf: Vec<u8>, back: Sender<Vec<u8>> },
    Reopen,
}

/// The writer side; cloned into each shard as a [`ShardLog`].
#[derive(Clone)]
pub struct AccessLog {
    tx: SyncSender<Msg>,
    format: LogFormat,
    /// The JSON fields, in order.
    fields: Arc<[Field]>,
    /// A reopen was asked for and not yet done.
    reopen: Arc<AtomicBool>,
    /// Lines dropped by every shard, for `/metrics` and `/status.json`
    /// (touched only when a line is dropped, never per request).
    dropped: Arc<AtomicU64>,
    /// Told by the writer once it has written every buffer and the last
    /// sender is gone ([`AccessLog::close`]).
    written: Arc<Mutex<Option<Receiver<()>>>>,
}

impl AccessLog {
    /// Open `path` for appending and start the writer thread; dropped lines
    /// are added to `dropped`. `fields` are those of a JSON line.
    pub fn open(
        path: &Path,
        format: LogFormat,
        fields: &[Field],
        dropped: Arc<AtomicU64>,
    ) -> std::io::Result<AccessLog> {
        let file = open_append(path)?;
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let path = path.to_owned();
        let reopen = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&reopen);
        let (written_tx, written) = mpsc::channel();
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                writer(path, file, rx, &flag);
                let _ = written_tx.send(());
            })?;
        Ok(AccessLog {
            tx,
            format,
            fields: fields.into(),
            reopen,
            dropped,
            written: Arc::new(Mutex::new(Some(written))),
        })
    }

    /// Close the log once every shard has stopped (and handed over its
    /// last lines): wait up to `wait` for the writer to write what is
    /// queued, which the process would otherwise lose as it exits.
    pub fn close(self, wait: Duration) {
        let written = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(self);
        if let Some(written) = written {
            if written.recv_timeout(wait).is_err() {
                tracing::warn!(
                    wait_s = wait.as_secs_f64(),
                    "the access log's last lines were not all written before exit"
                );
            }
        }
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
        let (clock, timed) = match self.format {
            LogFormat::Combined => (false, false),
            LogFormat::CombinedTimed => (true, true),
            LogFormat::Json => (
                self.fields.contains(&Field::Time),
                self.fields.contains(&Field::RequestTimeUs),
            ),
        };
        ShardLog {
            log: self.clone(),
            buf: Vec::with_capacity(FLUSH_BYTES + 1024),
            back_tx,
            back_rx,
            time_secs: u64::MAX,
            time: String::new(),
            clock,
            timed,
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
    /// Lines carry milliseconds: the clock is read per line (a vDSO call),
    /// not the shard's Date second.
    clock: bool,
    /// Lines carry the request time: `Instant::now()` per line.
    timed: bool,
    /// Lines dropped because the writer was behind.
    pub dropped: u64,
}

/// A line's request fields, `-` or empty where there is no request.
struct Fields<'a> {
    method: &'a [u8],
    target: &'a [u8],
    version: &'static str,
    referer: Option<&'a [u8]>,
    agent: Option<&'a [u8]>,
    host: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    fn of(req: Option<&'a Request<'a>>) -> Fields<'a> {
        match req {
            Some(r) => Fields {
                method: r.method_name.as_bytes(),
                target: r.target,
                version: match r.version {
                    Version::Http10 => "HTTP/1.0",
                    Version::Http11 => "HTTP/1.1",
                    Version::Http2 => "HTTP/2.0",
                    Version::Http3 => "HTTP/3",
                },
                referer: r.referer,
                agent: r.user_agent,
                host: r.host,
            },
            None => Fields {
                method: b"-",
                target: b"-",
                version: "-",
                referer: None,
                agent: None,
                host: None,
            },
        }
    }
}

impl ShardLog {
    /// Append the line of an answered request; `date_secs` is the shard's
    /// Date second (used when the format has no milliseconds).
    pub fn line(&mut self, date_secs: u64, l: &Line<'_>) {
        let (secs, millis) = if self.clock {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            (now.as_secs(), now.subsec_millis())
        } else {
            (date_secs, 0)
        };
        let micros = if self.timed {
            Instant::now()
                .saturating_duration_since(l.started)
                .as_micros() as u64
        } else {
            0
        };
        self.render_time(secs);
        let f = Fields::of(l.req);
        match self.log.format {
            LogFormat::Combined => self.combined(&f, l),
            LogFormat::CombinedTimed => {
                self.combined(&f, l);
                let buf = &mut self.buf;
                buf.pop(); // the newline
                buf.extend_from_slice(b" \"");
                escape_text(buf, f.host.unwrap_or(b"-"));
                let _ = write!(buf, "\" {micros} \"");
                escape_text(buf, nonempty(l.request_id).unwrap_or(b"-"));
                let _ = write!(buf, "\" {secs}.{millis:03}");
                if let Some(site) = l.site {
                    buf.extend_from_slice(b" \"");
                    escape_text(buf, site.as_bytes());
                    buf.push(b'"');
                }
                buf.push(b'\n');
            }
            LogFormat::Json => self.json(&f, l, millis, micros),
        }
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// nginx's `combined`.
    fn combined(&mut self, f: &Fields<'_>, l: &Line<'_>) {
        let buf = &mut self.buf;
        match l.peer {
            Some(p) => {
                let _ = write!(buf, "{}", p.ip());
            }
            None => buf.push(b'-'),
        }
        let _ = write!(buf, " - - [{}] \"", self.time);
        escape_text(buf, f.method);
        buf.push(b' ');
        escape_text(buf, f.target);
        let _ = write!(buf, " {}\" {} {} \"", f.version, l.status.code(), l.bytes);
        escape_text(buf, f.referer.unwrap_or(b"-"));
        buf.extend_from_slice(b"\" \"");
        escape_text(buf, f.agent.unwrap_or(b"-"));
        buf.extend_from_slice(b"\"\n");
    }

    fn json(&mut self, f: &Fields<'_>, l: &Line<'_>, millis: u32, micros: u64) {
        let buf = &mut self.buf;
        buf.push(b'{');
        for (i, field) in self.log.fields.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            buf.push(b'"');
            buf.extend_from_slice(field.name().as_bytes());
            buf.extend_from_slice(b"\":");
            let (tls_version, tls_cipher) = l.tls.unwrap_or(("", ""));
            match field {
                Field::Time => {
                    let _ = write!(buf, "\"{}.{millis:03}Z\"", self.time);
                }
                Field::RemoteAddr => {
                    buf.push(b'"');
                    if let Some(p) = l.peer {
                        let _ = write!(buf, "{}", p.ip());
                    }
                    buf.push(b'"');
                }
                Field::Method => quoted(buf, f.method),
                Field::Uri => quoted(buf, f.target),
                Field::Protocol => quoted(buf, f.version.as_bytes()),
                Field::Status => {
                    let _ = write!(buf, "{}", l.status.code());
                }
                Field::Bytes => {
                    let _ = write!(buf, "{}", l.bytes);
                }
                Field::Referer => quoted(buf, f.referer.unwrap_or(b"")),
                Field::UserAgent => quoted(buf, f.agent.unwrap_or(b"")),
                Field::TlsVersion => quoted(buf, tls_version.as_bytes()),
                Field::TlsCipher => quoted(buf, tls_cipher.as_bytes()),
                Field::Host => quoted(buf, f.host.unwrap_or(b"")),
                Field::RequestTimeUs => {
                    let _ = write!(buf, "{micros}");
                }
                Field::RequestId => quoted(buf, l.request_id),
                Field::Site => quoted(buf, l.site.unwrap_or("default").as_bytes()),
            }
        }
        buf.extend_from_slice(b"}\n");
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

    /// The second's part of the timestamp, rendered once per second:
    /// `30/Nov/2026:15:04:17 +0000` (combined) or `2026-11-30T15:04:17`
    /// (JSON, milliseconds and `Z` added per line).
    fn render_time(&mut self, secs: u64) {
        if secs == self.time_secs {
            return;
        }
        self.time_secs = secs;
        // "Mon, 30 Nov 2026 15:04:17 GMT"
        let imf = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
        let (day, mon, year, hms) = (&imf[5..7], &imf[8..11], &imf[12..16], &imf[17..25]);
        self.time = match self.log.format {
            LogFormat::Combined | LogFormat::CombinedTimed => {
                format!("{day}/{mon}/{year}:{hms} +0000")
            }
            LogFormat::Json => {
                let month = MONTHS.iter().position(|m| *m == mon).unwrap_or(0) + 1;
                format!("{year}-{month:02}-{day}T{hms}")
            }
        };
    }
}

fn nonempty(b: &[u8]) -> Option<&[u8]> {
    (!b.is_empty()).then_some(b)
}

/// A JSON string.
fn quoted(buf: &mut Vec<u8>, s: &[u8]) {
    buf.push(b'"');
    escape_json(buf, s);
    buf.push(b'"');
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
