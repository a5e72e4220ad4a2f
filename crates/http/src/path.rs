//! Request-target → snapshot key. Percent-decodes once and resolves `.` and
//! `..` lexically, so no input can name anything outside the root.

/// Why a target was rejected; every variant is a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// `%` not followed by two hex digits.
    BadEscape,
    /// A decoded NUL byte.
    Nul,
    /// `..` above the root.
    EscapesRoot,
    /// Not origin-form (`/…`) nor absolute-form (`http://host/…`).
    BadTarget,
}

impl PathError {
    pub fn message(self) -> &'static str {
        match self {
            PathError::BadEscape => "invalid percent-escape in path",
            PathError::Nul => "NUL byte in path",
            PathError::EscapesRoot => "path escapes the document root",
            PathError::BadTarget => "unsupported request target form",
        }
    }
}

/// Normalise `target` into `out` (cleared first).
///
/// The result always starts with `/`, never contains `//`, `.` or `..`
/// segments, keeps a trailing `/` when the target ended in one (or in `/.` /
/// `/..`), and drops the query and fragment. A backslash is an ordinary byte.
///
/// ```
/// use shardhttpd_http::path::{normalize, PathError};
///
/// let mut out = Vec::new();
/// normalize(b"/docs/./a//b%20c.html?v=2", &mut out).unwrap();
/// assert_eq!(out, b"/docs/a/b c.html");
/// // Decoded once: a double-encoded dot stays a name, never a `..`.
/// normalize(b"/%252e%252e/x", &mut out).unwrap();
/// assert_eq!(out, b"/%2e%2e/x");
/// assert_eq!(normalize(b"/%2e%2e/etc/passwd", &mut out), Err(PathError::EscapesRoot));
/// ```
pub fn normalize(target: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    out.clear();
    let path = path_part(target)?;
    // Query and fragment are not part of the resource name. A `#` should never
    // reach a server, but cutting there too means a stray one cannot smuggle
    // text into a file name.
    let (path, normal) = split_normal(path);
    if normal {
        out.extend_from_slice(path);
        return Ok(());
    }
    decode(path, out)?;
    resolve(out)
}

/// The path up to its query or fragment, and whether that part is already
/// normal: nothing to decode, no NUL, and no empty, `.` or `..` segment.
/// One pass; almost every real request is normal, which skips the decode
/// and resolve passes. `path` starts with `/` (see [`path_part`]).
fn split_normal(path: &[u8]) -> (&[u8], bool) {
    let mut normal = true;
    let mut i = 1;
    // Ordinary bytes cost one table lookup; only the few that can end the
    // path or make it not normal are looked at closer.
    while i < path.len() {
        let b = path[i];
        if NOTABLE[b as usize] {
            match b {
                b'?' | b'#' => return (&path[..i], normal),
                // An empty (`//`), `.` or `..` segment starts right after a `/`.
                b'/' | b'.' => normal &= path[i - 1] != b'/',
                // `%` (something to decode) or NUL.
                _ => normal = false,
            }
        }
        i += 1;
    }
    (path, normal)
}

/// The bytes [`split_normal`] must look at: the query and fragment
/// delimiters, the ones that can start an empty, `.` or `..` segment, `%`
/// and NUL.
const NOTABLE: [bool; 256] = {
    let mut t = [false; 256];
    t[b'?' as usize] = true;
    t[b'#' as usize] = true;
    t[b'/' as usize] = true;
    t[b'.' as usize] = true;
    t[b'%' as usize] = true;
    t[0] = true;
    t
};

/// The path of an origin-form or absolute-form target (RFC 9112 §3.2.1–2),
/// query and fragment still attached; it always starts with `/`.
pub fn path_part(target: &[u8]) -> Result<&[u8], PathError> {
    if target.first() == Some(&b'/') {
        return Ok(target);
    }
    let rest = strip_prefix_ignore_case(target, b"http://")
        .or_else(|| strip_prefix_ignore_case(target, b"https://"))
        .ok_or(PathError::BadTarget)?;
    let authority_end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    // RFC 9110 §4.2.1: an http(s) URI with an empty host is invalid.
    if authority_end == 0 {
        return Err(PathError::BadTarget);
    }
    match rest.get(authority_end) {
        Some(b'/') => Ok(&rest[authority_end..]),
        // `http://host` and `http://host?q` both name the root.
        _ => Ok(b"/"),
    }
}

/// The authority of an absolute-form target (`http://host:port/path`),
/// without user info: what RFC 9112 §3.2.2 says names the host in place of
/// the `Host` field. `None` for the origin form (`/path`).
pub fn authority(target: &[u8]) -> Option<&[u8]> {
    if target.first() == Some(&b'/') {
        return None;
    }
    let rest = strip_prefix_ignore_case(target, b"http://")
        .or_else(|| strip_prefix_ignore_case(target, b"https://"))?;
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    (!host.is_empty()).then_some(host)
}

fn strip_prefix_ignore_case<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    match s.get(..prefix.len()) {
        Some(head) if head.eq_ignore_ascii_case(prefix) => Some(&s[prefix.len()..]),
        _ => None,
    }
}

/// Percent-decode `path` into `out`, exactly once: `%252e` stays `%2e`, so a
/// double-encoded dot can never turn into a `..` segment later.
fn decode(path: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    out.reserve(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = if path[i] == b'%' {
            let hi = path.get(i + 1).and_then(|&c| hex(c));
            let lo = path.get(i + 2).and_then(|&c| hex(c));
            match (hi, lo) {
                (Some(hi), Some(lo)) => {
                    i += 3;
                    (hi << 4) | lo
                }
                _ => return Err(PathError::BadEscape),
            }
        } else {
            i += 1;
            path[i - 1]
        };
        // A NUL would truncate the name at any C boundary (open(2), logs).
        if b == 0 {
            return Err(PathError::Nul);
        }
        out.push(b);
    }
    Ok(())
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Resolve `.`, `..` and empty segments of the decoded path in place.
///
/// Splitting happens after decoding, so `%2f` separates segments like `/`
/// does: the snapshot is keyed by decoded names, and a name cannot contain a
/// slash anyway.
fn resolve(buf: &mut Vec<u8>) -> Result<(), PathError> {
    let trailing_slash = buf.ends_with(b"/") || buf.ends_with(b"/.") || buf.ends_with(b"/..");
    // `w` is the length of the resolved prefix, written as `/seg` repeats.
    // Each kept segment is read after at least one `/` and written after
    // exactly one, so the writer never overtakes the reader.
    let mut w = 0;
    let mut r = 0;
    while r < buf.len() {
        if buf[r] == b'/' {
            r += 1;
            continue;
        }
        let start = r;
        while r < buf.len() && buf[r] != b'/' {
            r += 1;
        }
        match &buf[start..r] {
            b"." => {}
            b".." => {
                if w == 0 {
                    return Err(PathError::EscapesRoot);
                }
                w = buf[..w].iter().rposition(|&b| b == b'/').unwrap_or(0);
            }
            _ => {
                buf[w] = b'/';
                buf.copy_within(start..r, w + 1);
                w += 1 + (r - start);
            }
        }
    }
    buf.truncate(w);
    // Neither push reallocates: the decoded path was at least this long.
    if w == 0 || trailing_slash {
        buf.push(b'/');
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn absolute_form_names_its_authority() {
        assert_eq!(super::authority(b"/a"), None);
        assert_eq!(super::authority(b"http://B.test/x"), Some(&b"B.test"[..]));
        assert_eq!(
            super::authority(b"HTTPS://b.test:8443?q"),
            Some(&b"b.test:8443"[..])
        );
        assert_eq!(
            super::authority(b"http://u:p@b.test/"),
            Some(&b"b.test"[..])
        );
        assert_eq!(super::authority(b"http:///x"), None);
        assert_eq!(super::authority(b"*"), None);
    }
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, Result<&str, PathError>)] = &[
            ("/", Ok("/")),
            ("/a/b", Ok("/a/b")),
            ("/a//b/", Ok("/a/b/")),
            ("//a///b", Ok("/a/b")),
            ("/a/./b", Ok("/a/b")),
            ("/a/../b", Ok("/b")),
            ("/a/b/../../c", Ok("/c")),
            ("/a/.", Ok("/a/")),
            ("/a/b/..", Ok("/a/")),
            ("/.", Ok("/")),
            ("/dir/..", Ok("/")),
            ("/dir/../", Ok("/")),
            ("/./", Ok("/")),
            ("/..", Err(PathError::EscapesRoot)),
            ("/../", Err(PathError::EscapesRoot)),
            ("/a/../..", Err(PathError::EscapesRoot)),
            ("/a/../../b", Err(PathError::EscapesRoot)),
            ("/%2e%2e/", Err(PathError::EscapesRoot)),
            ("/%2E%2E", Err(PathError::EscapesRoot)),
            ("/%2e%2e%2fetc/passwd", Err(PathError::EscapesRoot)),
            ("/a%2f..%2f..%2fb", Err(PathError::EscapesRoot)),
            ("/..%5c..%5cetc", Ok("/..\\..\\etc")),
            ("/a\\..\\..\\b", Ok("/a\\..\\..\\b")),
            ("/...", Ok("/...")),
            ("/..a/.b/a.", Ok("/..a/.b/a.")),
            ("/a%00b", Err(PathError::Nul)),
            ("/%zz", Err(PathError::BadEscape)),
            ("/%2", Err(PathError::BadEscape)),
            ("/%", Err(PathError::BadEscape)),
            ("/%g0", Err(PathError::BadEscape)),
            ("/%252e%252e/x", Ok("/%2e%2e/x")),
            ("/a%20b", Ok("/a b")),
            ("/%C3%A9", Ok("/\u{e9}")),
            ("/a%2Fb", Ok("/a/b")),
            ("/a?x=../../..", Ok("/a")),
            ("/a?x=%zz", Ok("/a")),
            ("/a#frag", Ok("/a")),
            ("/?", Ok("/")),
            ("/a/?q", Ok("/a/")),
            ("http://example.com/a/b?q", Ok("/a/b")),
            ("http://example.com", Ok("/")),
            ("http://example.com?q=/x", Ok("/")),
            ("HTTPS://Example.com:8443/x/../y/", Ok("/y/")),
            ("http://h/../x", Err(PathError::EscapesRoot)),
            ("http:///a", Err(PathError::BadTarget)),
            ("ftp://h/a", Err(PathError::BadTarget)),
            ("foo", Err(PathError::BadTarget)),
            ("*", Err(PathError::BadTarget)),
            ("", Err(PathError::BadTarget)),
            ("example.com:80", Err(PathError::BadTarget)),
        ];
        let mut out = b"stale".to_vec();
        for (target, want) in cases {
            let got = normalize(target.as_bytes(), &mut out).map(|()| out.as_slice());
            assert_eq!(got, want.map(str::as_bytes), "{target:?}");
        }
    }

    /// The fast path takes exactly the paths that need neither decoding nor
    /// resolving; everything else goes through both passes (whose output
    /// the table above checks). The query or fragment is cut off either way
    /// and does not count.
    #[test]
    fn fast_path_only_for_normal_paths() {
        for normal in ["/", "/a", "/a/b.html", "/a/", "/a.b/c.", "/a\\b", "/a./b"] {
            let got = split_normal(normal.as_bytes());
            assert_eq!(got, (normal.as_bytes(), true), "{normal:?} is normal");
        }
        for odd in [
            "//", "/a//b", "/.", "/a/./b", "/a/..", "/.x", "/a%20b", "/a\0b",
        ] {
            let got = split_normal(odd.as_bytes());
            assert_eq!(got, (odd.as_bytes(), false), "{odd:?} is not normal");
        }
        let cut: &[(&str, &str, bool)] = &[
            ("/a/b?x=/../%zz", "/a/b", true),
            ("/a#/./", "/a", true),
            ("/a/./b?q", "/a/./b", false),
            ("/%41?", "/%41", false),
            ("/?", "/", true),
        ];
        for &(target, path, normal) in cut {
            let got = split_normal(target.as_bytes());
            assert_eq!(got, (path.as_bytes(), normal), "{target:?}");
        }
    }

    /// Every target over a small, hostile alphabet either fails or yields a
    /// path with no empty, `.` or `..` segment that normalises to itself.
    #[test]
    fn exhaustive_invariants() {
        const ALPHABET: &[u8] = b"/.a%2ef";
        let mut target = Vec::new();
        let mut out = Vec::new();
        let mut again = Vec::new();
        for len in 0..=6u32 {
            for mut n in 0..ALPHABET.len().pow(len) {
                target.clear();
                target.push(b'/');
                for _ in 0..len {
                    target.push(ALPHABET[n % ALPHABET.len()]);
                    n /= ALPHABET.len();
                }
                if normalize(&target, &mut out).is_err() {
                    continue;
                }
                let shown = String::from_utf8_lossy(&target);
                assert_eq!(out.first(), Some(&b'/'), "{shown}");
                let body = out.strip_suffix(b"/").unwrap_or(&out);
                for seg in body.split(|&b| b == b'/').skip(1) {
                    assert!(!matches!(seg, b"" | b"." | b".."), "{shown} -> {out:?}");
                }
                if !out.contains(&b'%') {
                    normalize(&out, &mut again).expect("normalised path re-normalises");
                    assert_eq!(again, out, "{shown}");
                }
            }
        }
    }

    #[test]
    fn messages_are_distinct() {
        let all = [
            PathError::BadEscape,
            PathError::Nul,
            PathError::EscapesRoot,
            PathError::BadTarget,
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(!a.message().is_empty());
            for b in &all[i + 1..] {
                assert_ne!(a.message(), b.message());
            }
        }
    }
}
