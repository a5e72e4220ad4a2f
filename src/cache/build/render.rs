//! **Rendering**: one entry's pre-rendered response heads (status line,
//! Content-Type, Content-Length, Last-Modified, ETag, Cache-Control, Vary),
//! a pure function of the path name, its rules, the stamp and the hashes.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::assemble::ReprParts;
use crate::cache::{compress, BuildOptions, Entry, Repr, Source};
use crate::http::accept::Coding;

/// The last second `httpdate` can render (9999-12-31T23:59:59Z); it panics
/// beyond, and `touch -d` can put an mtime there.
pub(super) const MAX_HTTP_DATE_SECS: u64 = 253_402_300_799;

/// Render the heads of one file. Everything here derives from the path name,
/// the URL's Cache-Control rule, the stamp and the content hashes, so an entry
/// is a pure function of its inputs and reused entries are simply rendered
/// again.
pub(super) fn render_entry(
    opts: &BuildOptions,
    path: &Path,
    cache_control: Option<&str>,
    source: Source,
    identity: ReprParts,
    variants: Vec<(Coding, ReprParts)>,
) -> Entry {
    let (content_type, _) = content_type(path);
    let content_type_line = format!("Content-Type: {content_type}\r\n").into_bytes();
    let last_modified = last_modified_secs(source.stamp.mtime_ns, SystemTime::now());
    let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(last_modified));
    let vary = !variants.is_empty();
    // Fields after the ETag, the same for every representation.
    let mut tail = Vec::with_capacity(64);
    tail.extend_from_slice(b"Accept-Ranges: bytes\r\n");
    if let Some(value) = cache_control {
        tail.extend_from_slice(b"Cache-Control: ");
        tail.extend_from_slice(value.as_bytes());
        tail.extend_from_slice(b"\r\n");
    }
    if vary {
        tail.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }

    let render = |coding: Coding, parts: ReprParts| -> Repr {
        // The ETag covers the bytes sent only, so it is the same on every
        // rebuild and every host serving the same bytes; the suffix keeps the
        // variants' tags apart from the identity's at a glance.
        let hash = parts.hash;
        let etag = match coding_token(coding) {
            None => format!("\"{hash:032x}\""),
            Some(token) => format!("\"{hash:032x}-{token}\""),
        }
        .into_bytes();
        let mut common = Vec::with_capacity(96 + tail.len());
        common.extend_from_slice(b"Last-Modified: ");
        common.extend_from_slice(date.as_bytes());
        common.extend_from_slice(b"\r\nETag: ");
        common.extend_from_slice(&etag);
        common.extend_from_slice(b"\r\n");
        common.extend_from_slice(&tail);

        let encoding_line = encoding_line(coding);
        let mut head_200 = Vec::with_capacity(160 + opts.server_line.len() + common.len());
        head_200.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        head_200.extend_from_slice(&opts.server_line);
        head_200.extend_from_slice(&content_type_line);
        head_200.extend_from_slice(format!("Content-Length: {}\r\n", parts.len).as_bytes());
        head_200.extend_from_slice(encoding_line);
        head_200.extend_from_slice(&common);
        Repr {
            len: parts.len,
            hash,
            etag: etag.into(),
            encoding_line,
            common: common.into(),
            head_200: head_200.into(),
            body: parts.body,
        }
    };
    let codings: Box<[Coding]> = variants.iter().map(|(c, _)| *c).collect();
    let encoded = variants
        .into_iter()
        .map(|(c, p)| (c, render(c, p)))
        .collect();
    let identity = render(Coding::Identity, identity);
    Entry {
        content_type_line: content_type_line.into(),
        last_modified,
        identity,
        encoded,
        codings,
        vary,
        source,
    }
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

pub(super) fn encoding_line(coding: Coding) -> &'static [u8] {
    match coding {
        Coding::Identity => b"",
        Coding::Brotli => b"Content-Encoding: br\r\n",
        Coding::Zstd => b"Content-Encoding: zstd\r\n",
        Coding::Gzip => b"Content-Encoding: gzip\r\n",
    }
}

/// The media type for `path`, with `; charset=utf-8` on textual types (the
/// site's text is assumed UTF-8, and without a charset browsers guess), and
/// whether the type is worth compressing.
pub(super) fn content_type(path: &Path) -> (String, bool) {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
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
