//! **Rendering**: one entry's pre-rendered response heads (status line,
//! Content-Type, Content-Length, Last-Modified, ETag, Cache-Control, Vary,
//! custom headers), a pure function of the path name, its rules, the stamp
//! and the hashes.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::assemble::ReprParts;
use crate::cache::{
    compress, encoding_line, rules, Body, BuildOptions, Entry, Frame, Repr, Source,
};
use crate::http::accept::Coding;

/// The last second `httpdate` can render (9999-12-31T23:59:59Z); it panics
/// beyond, and `touch -d` can put an mtime there.
pub(super) const MAX_HTTP_DATE_SECS: u64 = 253_402_300_799;

/// Render the heads of one file, appending them to `heads.bytes` (which its
/// representations then point into). Everything here derives from the path name,
/// the URL's Cache-Control rule and custom header lines, the stamp and the
/// content hashes, so an entry is a pure function of its inputs and reused
/// entries are simply rendered again.
///
/// `Vary: Accept-Encoding` goes on every file that has variants or will get
/// them (compressible, in memory or at most `compress_max_file_bytes`, at
/// least `compress_min_bytes`, with
/// compression configured), so a cache never stores a response that will
/// later depend on `Accept-Encoding` as if it did not: during a large root's
/// fast start, before the variants exist, too. Then, and only then, such a
/// file's freshness is capped ([`rules::capped`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn render_entry(
    opts: &BuildOptions,
    path: &Path,
    cache_control: Option<&str>,
    headers: &[u8],
    source: Source,
    identity: ReprParts,
    variants: Vec<(Coding, ReprParts)>,
    heads: &mut Heads,
) -> Entry {
    let compressible = heads.content_type(path, &opts.default_type);
    let last_modified = last_modified_secs(i128::from(source.stamp.mtime_ns), SystemTime::now());
    let will_compress = compressible
        && (matches!(identity.body, Body::Mem { .. })
            || identity.len <= opts.compress_max_file_bytes)
        && opts
            .compress_configured
            .is_some_and(|c| identity.len >= c.min_bytes);
    let vary = !variants.is_empty() || will_compress;
    let fast_start = opts.compress.is_none() && opts.compress_configured.is_some();
    let capped;
    let cache_control = if fast_start && will_compress {
        capped = rules::capped(cache_control, opts.fast_start_max_age);
        Some(capped.as_str())
    } else {
        cache_control
    };
    // Fields after the ETag, the same for every representation (and for
    // every file of this type under the same rules: the frame's tail).
    let tail = &mut heads.tail;
    tail.clear();
    tail.extend_from_slice(b"Accept-Ranges: bytes\r\n");
    if let Some(value) = cache_control {
        tail.extend_from_slice(b"Cache-Control: ");
        tail.extend_from_slice(value.as_bytes());
        tail.extend_from_slice(b"\r\n");
    }
    if vary {
        tail.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
    tail.extend_from_slice(headers);
    let frame = heads.frame(&opts.server_line);
    let date = heads.date(last_modified);

    let bytes = &mut heads.bytes;
    let mut render = |coding: Coding, parts: ReprParts| -> Repr {
        // The ETag covers the bytes sent only, so it is the same on every
        // rebuild and every host serving the same bytes; the suffix keeps the
        // variants' tags apart from the identity's at a glance.
        let start = bytes.len();
        // Writing to a Vec cannot fail.
        let _ = write!(bytes, "Content-Length: {}\r\n", parts.len);
        bytes.extend_from_slice(encoding_line(coding));
        let common_at = bytes.len() - start;
        bytes.extend_from_slice(b"Last-Modified: ");
        bytes.extend_from_slice(&date);
        bytes.extend_from_slice(b"\r\nETag: ");
        let etag_at = bytes.len() - start;
        bytes.push(b'"');
        push_hex(bytes, parts.hash);
        if let Some(token) = coding_token(coding) {
            bytes.push(b'-');
            bytes.extend_from_slice(token.as_bytes());
        }
        bytes.push(b'"');
        let etag_end = bytes.len() - start;
        bytes.extend_from_slice(b"\r\n");
        Repr::new(
            parts.len,
            start..bytes.len(),
            common_at,
            etag_at..etag_end,
            parts.body,
        )
    };
    let identity = render(Coding::Identity, identity);
    let encoded = variants
        .into_iter()
        .map(|(c, p)| (c, render(c, p)))
        .collect();
    Entry::new(frame, last_modified, identity, encoded, vary, source)
}

/// Where a build renders heads: [`Heads::bytes`] holds the entry being
/// rendered, and what consecutive entries nearly always share is rendered
/// once per build instead of once per file: the media type of an
/// extension, the date of a second, the interned frame.
#[derive(Default)]
pub(super) struct Heads {
    /// The representations' heads of the entry last rendered.
    pub(super) bytes: Vec<u8>,
    /// `Content-Type` line and compressibility by extension (`.ext`, or
    /// empty for none).
    types: HashMap<Vec<u8>, (Vec<u8>, bool)>,
    ext: Vec<u8>,
    /// The last Last-Modified second and its HTTP date.
    date: Option<(u64, [u8; 29])>,
    /// The frame last interned, with its `Content-Type` line and tail.
    frame: Option<(Vec<u8>, Vec<u8>, &'static Frame)>,
    tail: Vec<u8>,
}

impl Heads {
    /// Look up (or make) the `Content-Type` line of `path`'s extension for
    /// [`Heads::frame`]; whether the type is worth compressing.
    pub(super) fn content_type(&mut self, path: &Path, default_type: &str) -> bool {
        self.ext.clear();
        if let Some(ext) = path.extension() {
            self.ext.push(b'.');
            self.ext.extend_from_slice(ext.as_bytes());
        }
        if !self.types.contains_key(&self.ext) {
            let (content_type, compressible) = content_type(path, default_type);
            let line = format!("Content-Type: {content_type}\r\n").into_bytes();
            self.types.insert(self.ext.clone(), (line, compressible));
        }
        self.types[&self.ext].1
    }

    /// The frame of the status line, `server_line`, the `Content-Type`
    /// line last looked up and the tail just rendered.
    fn frame(&mut self, server_line: &[u8]) -> &'static Frame {
        let line = &self.types[&self.ext].0;
        if let Some((last, tail, frame)) = &self.frame {
            if last == line && *tail == self.tail {
                return frame;
            }
        }
        let mut status_and_server = b"HTTP/1.1 200 OK\r\n".to_vec();
        status_and_server.extend_from_slice(server_line);
        let frame = Frame::intern(&status_and_server, line, &self.tail);
        self.frame = Some((line.clone(), self.tail.clone(), frame));
        frame
    }

    /// The HTTP date of `secs`.
    fn date(&mut self, secs: u64) -> [u8; 29] {
        match self.date {
            Some((at, date)) if at == secs => date,
            _ => {
                let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
                let mut date = [b' '; 29];
                date.copy_from_slice(&text.as_bytes()[..29]);
                self.date = Some((secs, date));
                date
            }
        }
    }
}

/// `value` as 32 lowercase hex digits (what `{:032x}` writes, without the
/// formatting machinery: once per representation of a build).
fn push_hex(out: &mut Vec<u8>, value: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.extend(
        (0..32)
            .rev()
            .map(|i| DIGITS[(value >> (i * 4)) as usize & 0xf]),
    );
}

/// The ETag suffix of a coding; `None` for identity.
pub(super) fn coding_token(coding: Coding) -> Option<&'static str> {
    match coding {
        Coding::Identity => None,
        Coding::Brotli => Some("br"),
        Coding::Zstd => Some("zstd"),
        Coding::Gzip => Some("gzip"),
    }
}

/// The media type for `path` (`default_type` when its extension names no
/// known type), with `; charset=utf-8` on textual types that have no
/// parameters (the site's text is assumed UTF-8, and without a charset
/// browsers guess), and whether the type is worth compressing.
pub(super) fn content_type(path: &Path, default_type: &str) -> (String, bool) {
    let guessed = mime_guess::from_path(path).first();
    let mime = match guessed {
        Some(m) => m,
        None => match default_type.parse::<mime_guess::mime::Mime>() {
            // Given with parameters: the operator's words, as written.
            Ok(m) if m.params().next().is_some() => {
                return (
                    default_type.trim().to_owned(),
                    compress::compressible(m.essence_str()),
                )
            }
            Ok(m) => m,
            Err(_) => mime_guess::mime::APPLICATION_OCTET_STREAM,
        },
    };
    let essence = mime.essence_str();
    let textual = mime.type_().as_str() == "text"
        || matches!(
            essence,
            "application/javascript" | "application/json" | "application/xml" | "image/svg+xml"
        );
    let compressible = compress::compressible(essence);
    if textual {
        (format!("{essence}; charset=utf-8"), compressible)
    } else {
        (essence.to_owned(), compressible)
    }
}

/// Last-Modified in Unix seconds: the mtime, but never before the epoch, never
/// after `now` (RFC 9110 §8.8.2.1: not later than the response's Date) and
/// never past what an HTTP date can express.
pub(super) fn last_modified_secs(mtime_ns: i128, now: SystemTime) -> u64 {
    let secs = mtime_ns.div_euclid(1_000_000_000).max(0);
    let mtime = u64::try_from(secs).unwrap_or(u64::MAX);
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    mtime.min(now).min(MAX_HTTP_DATE_SECS)
}
