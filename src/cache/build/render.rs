//! **Rendering**: one entry's pre-rendered response heads (status line,
//! Content-Type, Content-Length, Last-Modified, ETag, Cache-Control, Vary,
//! custom headers), a pure function of the path name, its rules, the stamp
//! and the hashes.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::assemble::ReprParts;
use crate::cache::{
    compress, encoding_line, rules, Body, BuildOptions, Entry, Prefix, Repr, Source,
};
use crate::http::accept::Coding;

/// The last second `httpdate` can render (9999-12-31T23:59:59Z); it panics
/// beyond, and `touch -d` can put an mtime there.
pub(super) const MAX_HTTP_DATE_SECS: u64 = 253_402_300_799;

/// Render the heads of one file, appending them to `heads` (which its
/// representations then point into). Everything here derives from the path name,
/// the URL's Cache-Control rule and custom header lines, the stamp and the
/// content hashes, so an entry is a pure function of its inputs and reused
/// entries are simply rendered again.
///
/// `Vary: Accept-Encoding` goes on every file that has variants or will get
/// them (compressible, in memory, at least `compress_min_bytes`, with
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
    heads: &mut Vec<u8>,
) -> Entry {
    let (content_type, compressible) = content_type(path, &opts.default_type);
    let content_type_line = format!("Content-Type: {content_type}\r\n").into_bytes();
    let last_modified = last_modified_secs(i128::from(source.stamp.mtime_ns), SystemTime::now());
    let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(last_modified));
    let will_compress = compressible
        && matches!(identity.body, Body::Mem { .. })
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
    // Fields after the ETag, the same for every representation.
    let mut tail = Vec::with_capacity(64 + headers.len());
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

    let mut render = |coding: Coding, parts: ReprParts| -> Repr {
        // The ETag covers the bytes sent only, so it is the same on every
        // rebuild and every host serving the same bytes; the suffix keeps the
        // variants' tags apart from the identity's at a glance.
        let hash = parts.hash;
        let etag = match coding_token(coding) {
            None => format!("\"{hash:032x}\""),
            Some(token) => format!("\"{hash:032x}-{token}\""),
        }
        .into_bytes();
        let start = heads.len();
        heads.extend_from_slice(format!("Content-Length: {}\r\n", parts.len).as_bytes());
        heads.extend_from_slice(encoding_line(coding));
        let common_at = heads.len() - start;
        heads.extend_from_slice(b"Last-Modified: ");
        heads.extend_from_slice(date.as_bytes());
        heads.extend_from_slice(b"\r\nETag: ");
        let etag_at = heads.len() - start;
        heads.extend_from_slice(&etag);
        heads.extend_from_slice(b"\r\n");
        heads.extend_from_slice(&tail);
        Repr::new(
            parts.len,
            start..heads.len(),
            common_at,
            etag_at..etag_at + etag.len(),
            parts.body,
        )
    };
    let identity = render(Coding::Identity, identity);
    let encoded = variants
        .into_iter()
        .map(|(c, p)| (c, render(c, p)))
        .collect();
    let mut status_and_server = b"HTTP/1.1 200 OK\r\n".to_vec();
    status_and_server.extend_from_slice(&opts.server_line);
    Entry::new(
        Prefix::intern(&status_and_server, &content_type_line),
        last_modified,
        identity,
        encoded,
        vary,
        source,
    )
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
