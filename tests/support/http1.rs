//! An HTTP/1.1 client over raw sockets: requests written byte for byte,
//! responses parsed strictly enough that a wrong byte count or a missing
//! header fails a test, and multipart/byteranges bodies.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::*;

/// `GET path HTTP/1.1` with a Host header.
pub fn get(path: &str) -> String {
    request("GET", path, &[])
}

/// An HTTP/1.1 request with a Host header and `headers`.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut s = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s
}

/// The method (first word) of a raw request.
pub fn method_of(raw: &[u8]) -> &str {
    let end = raw.iter().position(|&b| b == b' ').unwrap_or(0);
    std::str::from_utf8(&raw[..end]).unwrap_or("")
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

#[derive(Clone)]
pub struct Response {
    pub version: String,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// First header named `name`, case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        first_header(&self.headers, name)
    }

    pub fn header_count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .count()
    }

    /// The header's value, or a panic that shows the response.
    #[track_caller]
    pub fn must(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("missing header {name}: {self:?}"))
    }

    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Whether the response asks for the connection to close.
    pub fn says_close(&self) -> bool {
        self.header("connection")
            .map(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
            .unwrap_or(false)
    }

    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")
            .map(|v| v.trim().parse().expect("numeric Content-Length"))
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {} {}", self.version, self.status, self.reason)?;
        for (k, v) in &self.headers {
            writeln!(f, "  {k}: {v}")?;
        }
        let shown = &self.body[..self.body.len().min(200)];
        write!(
            f,
            "  <{} body bytes> {:?}{}",
            self.body.len(),
            String::from_utf8_lossy(shown),
            if self.body.len() > 200 { "…" } else { "" }
        )
    }
}

/// Why no complete response could be read.
#[derive(Debug)]
pub enum ReadError {
    /// EOF (or reset) before the first byte of a response.
    Closed,
    /// EOF (or reset) part-way: inside the head, or with `got` of `want` body
    /// bytes.
    Incomplete {
        status: Option<u16>,
        got: usize,
        want: Option<usize>,
    },
    /// No progress within the read timeout; `status` and `want` are known
    /// once the head has been read.
    Timeout {
        buffered: usize,
        status: Option<u16>,
        want: Option<usize>,
    },
    Malformed(String),
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Parses a response head (status line and headers, without the final CRLF).
pub fn parse_head(head: &[u8]) -> Result<Response, String> {
    let text = std::str::from_utf8(head).map_err(|e| format!("head not UTF-8: {e}"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("").to_string();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status code in {status_line:?}"))?;
    let reason = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for line in lines {
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {line:?}"))?;
        if k.is_empty() || k.contains(' ') {
            return Err(format!("bad header name in {line:?}"));
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    Ok(Response {
        version,
        status,
        reason,
        headers,
        body: Vec::new(),
    })
}

/// One client connection with a buffer, so pipelined responses can be read
/// one after another.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        Conn::from_stream(stream)
    }

    pub fn try_connect(addr: SocketAddr) -> io::Result<Conn> {
        TcpStream::connect_timeout(&addr, IO_TIMEOUT).map(Conn::from_stream)
    }

    pub fn from_stream(stream: TcpStream) -> Conn {
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn set_read_timeout(&self, t: Duration) {
        self.stream.set_read_timeout(Some(t)).unwrap();
    }

    /// Writes all of `bytes` in one `write_all`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write request");
    }

    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads more bytes into the buffer; Ok(0) on EOF or reset. A read a
    /// signal interrupted (EINTR: a socket read with a timeout is not
    /// restarted) is made again, as any client's read loop does.
    fn fill(&mut self) -> Result<usize, ReadError> {
        let mut chunk = [0u8; 64 * 1024];
        let read = loop {
            match self.stream.read(&mut chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match read {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e) if is_reset(&e) => Ok(0),
            Err(e) if is_timeout(&e) => Err(ReadError::Timeout {
                buffered: self.buf.len(),
                status: None,
                want: None,
            }),
            Err(e) => Err(ReadError::Io(e)),
        }
    }

    /// Reads one response head; the body (if any) is left in the buffer.
    pub fn read_head(&mut self) -> Result<Response, ReadError> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = parse_head(&self.buf[..end]).map_err(ReadError::Malformed)?;
                self.buf.drain(..end + 4);
                return Ok(head);
            }
            if self.buf.len() > 64 * 1024 {
                return Err(ReadError::Malformed("response head over 64 KiB".into()));
            }
            if self.fill()? == 0 {
                return Err(if self.buf.is_empty() {
                    ReadError::Closed
                } else {
                    ReadError::Incomplete {
                        status: None,
                        got: self.buf.len(),
                        want: None,
                    }
                });
            }
        }
    }

    /// Reads one complete response to a request with `method` (HEAD, 204 and
    /// 304 responses have no body).
    pub fn read_response_to(&mut self, method: &str) -> Result<Response, ReadError> {
        let mut resp = self.read_head()?;
        let bodiless =
            method == "HEAD" || resp.status == 204 || resp.status == 304 || resp.status < 200;
        if bodiless {
            return Ok(resp);
        }
        if let Some(te) = resp.header("transfer-encoding") {
            return Err(ReadError::Malformed(format!(
                "unexpected Transfer-Encoding {te:?} on a static response"
            )));
        }
        match resp.header("content-length") {
            Some(v) => {
                let want: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| ReadError::Malformed(format!("bad Content-Length {v:?}")))?;
                while self.buf.len() < want {
                    let n = self.fill().map_err(|e| match e {
                        ReadError::Timeout { buffered, .. } => ReadError::Timeout {
                            buffered,
                            status: Some(resp.status),
                            want: Some(want),
                        },
                        e => e,
                    })?;
                    if n == 0 {
                        return Err(ReadError::Incomplete {
                            status: Some(resp.status),
                            got: self.buf.len(),
                            want: Some(want),
                        });
                    }
                }
                resp.body = self.buf.drain(..want).collect();
            }
            None => {
                // No length: the body runs to EOF (RFC 9112 §6.3 rule 8).
                while self.fill()? != 0 {}
                resp.body = std::mem::take(&mut self.buf);
            }
        }
        Ok(resp)
    }

    /// Reads one response to a GET.
    pub fn read_response(&mut self) -> Result<Response, ReadError> {
        self.read_response_to("GET")
    }

    /// Sends `raw` and reads its response, panicking on failure.
    #[track_caller]
    pub fn roundtrip(&mut self, raw: &str) -> Response {
        self.send(raw.as_bytes());
        self.read_response_to(method_of(raw.as_bytes()))
            .unwrap_or_else(|e| panic!("no response to {raw:?}: {e}"))
    }

    /// Takes the bytes read past the last parsed response.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Ok if the peer closes (EOF or reset) within `within` with no further
    /// bytes; Err describing what happened otherwise.
    pub fn expect_closed(&mut self, within: Duration) -> Result<(), String> {
        if !self.buf.is_empty() {
            return Err(format!(
                "{} unexpected bytes after the response: {:?}",
                self.buf.len(),
                String::from_utf8_lossy(&self.buf[..self.buf.len().min(200)])
            ));
        }
        self.set_read_timeout(within);
        let mut b = [0u8; 4096];
        let r = match self.stream.read(&mut b) {
            Ok(0) => Ok(()),
            Ok(n) => Err(format!(
                "expected EOF, got {n} bytes: {:?}",
                String::from_utf8_lossy(&b[..n])
            )),
            Err(e) if is_reset(&e) => Ok(()),
            Err(e) if is_timeout(&e) => Err(format!("connection still open after {within:?}")),
            Err(e) => Err(format!("read error {e}")),
        };
        self.set_read_timeout(IO_TIMEOUT);
        r
    }
}

/// Asserts the connection is closed by the server within a couple of seconds.
#[track_caller]
pub fn assert_closed(conn: &mut Conn, what: &str) {
    if let Err(e) = conn.expect_closed(Duration::from_secs(3)) {
        panic!("{what}: server should have closed the connection: {e}");
    }
}

// ---------------------------------------------------------------------------
// multipart/byteranges
// ---------------------------------------------------------------------------

/// The first of `headers` named `name`, case-insensitively.
fn first_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

pub struct Part {
    pub headers: Vec<(String, String)>,
    pub data: Vec<u8>,
}

impl Part {
    pub fn header(&self, name: &str) -> Option<&str> {
        first_header(&self.headers, name)
    }
}

/// The `boundary` parameter of a multipart Content-Type.
pub fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Splits a multipart body (RFC 2046 §5.1.1) into parts.
pub fn parse_multipart(body: &[u8], boundary: &str) -> Result<Vec<Part>, String> {
    let delim = format!("--{boundary}").into_bytes();
    let first = find(body, &delim).ok_or("no opening boundary")?;
    let mut pos = first + delim.len();
    let mut parts = Vec::new();
    loop {
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        if !body[pos..].starts_with(b"\r\n") {
            return Err(format!("boundary not followed by CRLF at byte {pos}"));
        }
        pos += 2;
        let head_end = find(&body[pos..], b"\r\n\r\n").ok_or("part head not terminated")?;
        let head = parse_head_lines(&body[pos..pos + head_end])?;
        pos += head_end + 4;
        let mut next_delim = b"\r\n".to_vec();
        next_delim.extend_from_slice(&delim);
        let data_len = find(&body[pos..], &next_delim).ok_or("part not terminated")?;
        parts.push(Part {
            headers: head,
            data: body[pos..pos + data_len].to_vec(),
        });
        pos += data_len + next_delim.len();
    }
}

fn parse_head_lines(head: &[u8]) -> Result<Vec<(String, String)>, String> {
    let text = std::str::from_utf8(head).map_err(|e| e.to_string())?;
    text.split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("bad part header {l:?}"))
        })
        .collect()
}
