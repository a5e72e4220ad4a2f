//! Per-site response rules, compiled once from the config and consulted at
//! build time, so their results are baked into the pre-rendered heads and
//! cost nothing per request: `Cache-Control` by URL glob, custom headers by
//! URL glob, `Cache-Control` for error and redirect responses, and which
//! dotfiles may be served.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::http::Status;

/// Ordered `(glob, value)` rules plus a default; the first matching rule wins.
#[derive(Debug, Clone, Default)]
pub struct CacheControl {
    values: Vec<String>,
    set: GlobSet,
    default: Option<String>,
}

impl CacheControl {
    /// Compile `rules`, already in precedence order. Globs match the URL path
    /// without its leading `/` (`assets/app.js`); `*` also crosses `/`, so
    /// `*.html` matches at any depth, and `assets/**` matches everything
    /// below `assets/`.
    pub fn new(rules: &[(String, String)], default: Option<String>) -> Result<Self, String> {
        let mut builder = GlobSetBuilder::new();
        let mut values = Vec::with_capacity(rules.len());
        for (glob, value) in rules {
            check_value(value)?;
            builder.add(compile(glob, false)?);
            values.push(value.clone());
        }
        if let Some(value) = &default {
            check_value(value)?;
        }
        let set = builder.build().map_err(|e| e.to_string())?;
        Ok(CacheControl {
            values,
            set,
            default,
        })
    }

    /// The value for a file's URL path (with or without its leading `/`).
    pub fn value_for(&self, url: &[u8]) -> Option<&str> {
        if self.set.is_empty() {
            return self.default.as_deref();
        }
        let rel = url.strip_prefix(b"/").unwrap_or(url);
        let candidate = Candidate::new(OsStr::from_bytes(rel));
        self.set
            .matches_candidate(&candidate)
            .into_iter()
            .min()
            .map(|i| self.values[i].as_str())
            .or(self.default.as_deref())
    }
}

impl CacheControl {
    /// Whether files no rule matches still get a value.
    pub fn has_default(&self) -> bool {
        self.default.is_some()
    }

    /// How many of `urls` no rule covers (none when there is a default),
    /// and the first of them in byte order.
    pub fn uncovered<'a>(&self, urls: impl Iterator<Item = &'a [u8]>) -> (usize, Option<&'a [u8]>) {
        if self.default.is_some() {
            return (0, None);
        }
        let mut count = 0;
        let mut first: Option<&[u8]> = None;
        for url in urls.filter(|u| self.value_for(u).is_none()) {
            count += 1;
            if first.is_none_or(|f| url < f) {
                first = Some(url);
            }
        }
        (count, first)
    }

    /// Warn (once, at start) when files would go out without any
    /// `Cache-Control`: caches then guess a lifetime, typically a tenth of
    /// the time since Last-Modified, so a year-old file changed today may
    /// be served stale for over a month.
    pub fn warn_uncovered<'a>(&self, urls: impl Iterator<Item = &'a [u8]>) {
        let (count, first) = self.uncovered(urls);
        if let Some(example) = first {
            tracing::warn!(
                files = count,
                example = %String::from_utf8_lossy(example),
                "files without a Cache-Control rule: caches will guess how long to keep them \
                 (often 10% of their age); set `cache_control` rules or `cache_control_default` \
                 (README: Behind a CDN)"
            );
        }
    }
}

/// A header value may not break the head it is baked into.
fn check_value(value: &str) -> Result<(), String> {
    if value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) || value.trim().is_empty() {
        return Err(format!(
            "value `{}` is empty or has control characters",
            value.escape_debug()
        ));
    }
    Ok(())
}

/// Compile one URL glob. `*` crosses `/` unless `literal_separator`.
fn compile(glob: &str, literal_separator: bool) -> Result<globset::Glob, String> {
    GlobBuilder::new(glob)
        .literal_separator(literal_separator)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("glob `{glob}`: {e}"))
}

/// Fields the server writes itself, or that other keys own: a `[[headers]]`
/// rule may not set them.
const RESERVED_HEADERS: &[&str] = &[
    "accept-ranges",
    "age",
    "cache-control",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expires",
    "keep-alive",
    "last-modified",
    "location",
    "proxy-connection",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "vary",
];

/// Custom response headers by URL glob (`[[headers]]`). Every matching rule
/// applies, in file order; a name set by several takes the last value.
#[derive(Debug, Clone, Default)]
pub struct HeaderRules {
    set: GlobSet,
    /// Per rule, its `(name, value)` fields.
    fields: Vec<Vec<(String, String)>>,
}

impl HeaderRules {
    /// Compile `(glob, fields)` rules in file order. Globs match like
    /// [`CacheControl`]'s.
    pub fn new(rules: &[(String, Vec<(String, String)>)]) -> Result<Self, String> {
        let mut builder = GlobSetBuilder::new();
        let mut fields = Vec::with_capacity(rules.len());
        for (glob, set) in rules {
            builder.add(compile(glob, false)?);
            for (name, value) in set {
                check_name(name)?;
                check_value(value).map_err(|e| format!("header `{name}`: {e}"))?;
            }
            fields.push(set.clone());
        }
        let set = builder.build().map_err(|e| e.to_string())?;
        Ok(HeaderRules { set, fields })
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The `Name: value\r\n` lines for a file's URL path (with or without
    /// its leading `/`); empty when no rule matches.
    pub fn lines_for(&self, url: &[u8]) -> Vec<u8> {
        if self.fields.is_empty() {
            return Vec::new();
        }
        let rel = url.strip_prefix(b"/").unwrap_or(url);
        let mut matched = self
            .set
            .matches_candidate(&Candidate::new(OsStr::from_bytes(rel)));
        matched.sort_unstable();
        let mut merged: Vec<(&str, &str)> = Vec::new();
        for i in matched {
            for (name, value) in &self.fields[i] {
                match merged
                    .iter_mut()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                {
                    Some(slot) => slot.1 = value,
                    None => merged.push((name, value)),
                }
            }
        }
        // Fields sent over TLS only go last, where the frame can leave them
        // off a cleartext response by length alone (`tls_only_at`).
        merged.sort_by_key(|(name, _)| is_tls_only(name));
        let mut out = Vec::new();
        for (name, value) in merged {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.trim().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out
    }
}

/// Fields a `[[headers]]` rule may set that go out over TLS only:
/// `Strict-Transport-Security` over cleartext is forbidden (RFC 6797 §7.2),
/// as the built-in `hsts` knows.
const TLS_ONLY_HEADERS: &[&str] = &["strict-transport-security"];

fn is_tls_only(name: &str) -> bool {
    TLS_ONLY_HEADERS
        .iter()
        .any(|tls| tls.eq_ignore_ascii_case(name))
}

/// Where the TLS-only lines start in header lines rendered by
/// [`HeaderRules::lines_for`] (and anything put before them): they are
/// the last lines, so a cleartext response stops there.
pub fn tls_only_at(lines: &[u8]) -> usize {
    let mut at = 0;
    for line in lines.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if std::str::from_utf8(name).is_ok_and(is_tls_only) {
            return at;
        }
        at += line.len();
    }
    lines.len()
}

/// A header name must be an RFC 9110 token, and not one the server owns.
fn check_name(name: &str) -> Result<(), String> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(tchar) {
        return Err(format!("`{}` is not a header name", name.escape_debug()));
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "header `{name}` is set by the server (Cache-Control has its own key, `cache_control`)"
        ));
    }
    Ok(())
}

/// Which names starting with `.` the walk keeps (`dotfile_allow`). A pattern
/// without `/` matches the name at any depth (`.well-known`); one with `/`
/// matches the path from the root without its leading `/`
/// (`.well-known/acme-challenge`). `*` never crosses `/` here; `**` does.
/// Anything inside an allowed directory is served, except names that start
/// with a dot themselves, which need a pattern of their own.
#[derive(Debug, Clone)]
pub struct DotfileAllow {
    names: GlobSet,
    paths: GlobSet,
    /// `serve_dotfiles = true`: every dotfile.
    all: bool,
}

/// What `dotfile_allow` is when not given: ACME HTTP-01 and the other
/// RFC 8615 well-known URIs work out of the box.
pub const DEFAULT_DOTFILE_ALLOW: &[&str] = &[".well-known"];

impl DotfileAllow {
    pub fn new(patterns: &[String]) -> Result<Self, String> {
        let mut names = GlobSetBuilder::new();
        let mut paths = GlobSetBuilder::new();
        for pattern in patterns {
            let pattern = pattern.trim_start_matches('/');
            if pattern.is_empty() {
                return Err("an empty pattern".to_owned());
            }
            if pattern.contains('/') {
                paths.add(compile(pattern, true)?);
            } else {
                names.add(compile(pattern, true)?);
            }
        }
        Ok(DotfileAllow {
            names: names.build().map_err(|e| e.to_string())?,
            paths: paths.build().map_err(|e| e.to_string())?,
            all: false,
        })
    }

    /// Every dotfile is served (the old `serve_dotfiles = true`).
    pub fn all() -> Self {
        DotfileAllow {
            all: true,
            ..DotfileAllow::none()
        }
    }

    /// No dotfile is served.
    pub fn none() -> Self {
        DotfileAllow::new(&[]).expect("no patterns compile")
    }

    /// Whether the entry `name` (which starts with `.`) at URL path `url`
    /// (from the root, with or without its leading `/`) is walked.
    pub fn allows(&self, name: &[u8], url: &[u8]) -> bool {
        if self.all {
            return true;
        }
        let rel = url.strip_prefix(b"/").unwrap_or(url);
        self.names.is_match(OsStr::from_bytes(name)) || self.paths.is_match(OsStr::from_bytes(rel))
    }
}

impl Default for DotfileAllow {
    fn default() -> Self {
        let patterns: Vec<String> = DEFAULT_DOTFILE_ALLOW
            .iter()
            .map(|p| (*p).to_owned())
            .collect();
        DotfileAllow::new(&patterns).expect("the default patterns compile")
    }
}

/// Error statuses whose `Cache-Control` can be configured: those that say
/// something about the resource itself. The others (400, 412, 416, …)
/// depend on request headers a cache does not key on (Range, If-*),
/// so a stored copy would be served to requests it does
/// not fit; they never carry a `Cache-Control`.
pub const CACHEABLE_ERRORS: &[(Status, &str)] = &[
    (Status::Forbidden, "4xx"),
    (Status::NotFound, "4xx"),
    (Status::InternalServerError, "5xx"),
    (Status::ServiceUnavailable, "5xx"),
];

/// `Cache-Control` lines for non-200 responses, rendered once per status:
/// `error_cache_control` (by status, or by class `4xx`/`5xx`; a status wins
/// over its class) and `redirect_cache_control` for the 301.
#[derive(Debug, Clone)]
pub struct StatusCacheControl {
    /// `Cache-Control: …\r\n` or empty, indexed by `Status as usize`;
    /// shared by every snapshot built from the same config.
    lines: Arc<[Box<[u8]>]>,
}

impl Default for StatusCacheControl {
    fn default() -> Self {
        StatusCacheControl {
            lines: vec![Box::default(); Status::ALL.len()].into(),
        }
    }
}

impl StatusCacheControl {
    /// `errors` maps `"404"`, `"4xx"`, … to values.
    pub fn new(errors: &[(String, String)], redirect: Option<&str>) -> Result<Self, String> {
        let mut lines: Vec<Box<[u8]>> = vec![Box::default(); Status::ALL.len()];
        let render = |value: &str| -> Result<Box<[u8]>, String> {
            check_value(value)?;
            Ok(format!("Cache-Control: {}\r\n", value.trim())
                .into_bytes()
                .into())
        };
        for (key, _) in errors {
            let known = CACHEABLE_ERRORS
                .iter()
                .any(|(s, class)| key == class || *key == s.code().to_string());
            if !known {
                return Err(format!(
                    "`{key}`: only 403, 404, 500, 503, `4xx` and `5xx` take a Cache-Control; \
                     other errors depend on request headers a cache does not key on"
                ));
            }
        }
        for &(status, class) in CACHEABLE_ERRORS {
            let code = status.code().to_string();
            let value = errors
                .iter()
                .find(|(k, _)| *k == code)
                .or_else(|| errors.iter().find(|(k, _)| k == class));
            if let Some((key, value)) = value {
                lines[status as usize] = render(value).map_err(|e| format!("`{key}`: {e}"))?;
            }
        }
        if let Some(value) = redirect {
            lines[Status::MovedPermanently as usize] = render(value)?;
        }
        Ok(StatusCacheControl {
            lines: lines.into(),
        })
    }

    /// The rendered line for `status`; empty when none applies.
    pub fn line(&self, status: Status) -> &[u8] {
        &self.lines[status as usize]
    }
}

/// The `Cache-Control` of a compressible file served before its compressed
/// variants exist (a large root's fast start), from its configured `value`.
///
/// Freshness is capped at `max_age` seconds: a cache that stores the
/// identity body now (correctly, under `Vary: Accept-Encoding`) then asks
/// again soon after the variants are ready, instead of serving the
/// uncompressed body to every client for the configured lifetime.
/// `max-age`, `s-maxage` and `immutable` are replaced; the other directives
/// stay. A value that already keeps shared caches from storing or reusing
/// without asking (`no-store`, `no-cache`, `private`) is left alone.
pub fn capped(value: Option<&str>, max_age: u64) -> String {
    let Some(value) = value else {
        return format!("max-age={max_age}");
    };
    let mut keep = Vec::new();
    let mut cap = max_age;
    for directive in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (name, arg) = match directive.split_once('=') {
            Some((n, a)) => (
                n.trim().to_ascii_lowercase(),
                Some(a.trim().trim_matches('"')),
            ),
            None => (directive.to_ascii_lowercase(), None),
        };
        match name.as_str() {
            "no-store" | "no-cache" | "private" => return value.to_owned(),
            "max-age" | "s-maxage" => {
                if let Some(n) = arg.and_then(|a| a.parse::<u64>().ok()) {
                    cap = cap.min(n);
                }
            }
            "immutable" => {}
            _ => keep.push(directive),
        }
    }
    let max_age = format!("max-age={cap}");
    keep.push(&max_age);
    keep.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(r: &[(&str, &str)], default: Option<&str>) -> CacheControl {
        let r: Vec<(String, String)> = r
            .iter()
            .map(|(g, v)| (g.to_string(), v.to_string()))
            .collect();
        CacheControl::new(&r, default.map(str::to_owned)).unwrap()
    }

    #[test]
    fn first_matching_rule_wins() {
        let cc = rules(
            &[
                ("assets/**", "public, max-age=31536000, immutable"),
                ("*.html", "no-cache"),
            ],
            Some("max-age=60"),
        );
        let table: &[(&str, Option<&str>)] = &[
            ("/index.html", Some("no-cache")),
            ("/docs/guide.html", Some("no-cache")),
            (
                "/assets/app.js",
                Some("public, max-age=31536000, immutable"),
            ),
            (
                "/assets/x/y.html",
                Some("public, max-age=31536000, immutable"),
            ),
            ("/style.css", Some("max-age=60")),
            ("/assetsx/a.js", Some("max-age=60")),
        ];
        for (url, want) in table {
            assert_eq!(cc.value_for(url.as_bytes()), *want, "{url}");
        }
    }

    #[test]
    fn uncovered_files_are_counted_unless_there_is_a_default() {
        let urls: [&[u8]; 4] = [b"/index.html", b"/b.txt", b"/a.txt", b"/assets/x.js"];
        let cc = rules(&[("*.html", "no-cache"), ("assets/**", "immutable")], None);
        assert_eq!(cc.uncovered(urls.into_iter()), (2, Some(&b"/a.txt"[..])));
        let cc = rules(&[("*.html", "no-cache")], Some("max-age=60"));
        assert_eq!(cc.uncovered(urls.into_iter()), (0, None));
        assert_eq!(CacheControl::default().uncovered(urls.into_iter()).0, 4);
    }

    #[test]
    fn no_rules_no_header() {
        let cc = CacheControl::default();
        assert_eq!(cc.value_for(b"/a.html"), None);
        let cc = rules(&[], Some("max-age=60"));
        assert_eq!(cc.value_for(b"/a.html"), Some("max-age=60"));
    }

    #[test]
    fn bad_values_and_globs_are_refused() {
        let bad = |g: &str, v: &str| CacheControl::new(&[(g.into(), v.into())], None).is_err();
        assert!(bad("*.html", "no-cache\r\nX-Evil: 1"));
        assert!(bad("*.html", " "));
        assert!(bad("a[", "no-cache"));
        assert!(CacheControl::new(&[], Some("a\nb".into())).is_err());
    }
    fn header_rules(r: &[(&str, &[(&str, &str)])]) -> Result<HeaderRules, String> {
        let r: Vec<(String, Vec<(String, String)>)> = r
            .iter()
            .map(|(g, set)| {
                let set = set
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect();
                (g.to_string(), set)
            })
            .collect();
        HeaderRules::new(&r)
    }

    #[test]
    fn every_matching_header_rule_applies_and_later_values_win() {
        let rules = header_rules(&[
            (
                "**",
                &[("X-Content-Type-Options", "nosniff"), ("X-Frame", "DENY")],
            ),
            (
                "*.html",
                &[("Content-Security-Policy", "default-src 'self'")],
            ),
            (
                "fonts/**",
                &[
                    ("Access-Control-Allow-Origin", "*"),
                    ("x-frame", "SAMEORIGIN"),
                ],
            ),
        ])
        .unwrap();
        let lines = |url: &str| String::from_utf8(rules.lines_for(url.as_bytes())).unwrap();
        assert_eq!(
            lines("/index.html"),
            "X-Content-Type-Options: nosniff\r\nX-Frame: DENY\r\n\
             Content-Security-Policy: default-src 'self'\r\n"
        );
        assert_eq!(
            lines("/fonts/a.woff2"),
            "X-Content-Type-Options: nosniff\r\nX-Frame: SAMEORIGIN\r\n\
             Access-Control-Allow-Origin: *\r\n"
        );
        assert!(HeaderRules::default().lines_for(b"/a").is_empty());
    }

    #[test]
    fn tls_only_fields_come_last_and_are_found() {
        let rules = header_rules(&[
            (
                "**",
                &[("strict-transport-security", "max-age=1"), ("X-A", "a")],
            ),
            ("*.html", &[("X-B", "b")]),
        ])
        .unwrap();
        let lines = rules.lines_for(b"/a.html");
        let text = String::from_utf8(lines.clone()).unwrap();
        assert_eq!(
            text,
            "X-A: a\r\nX-B: b\r\nstrict-transport-security: max-age=1\r\n"
        );
        assert_eq!(tls_only_at(&lines), "X-A: a\r\nX-B: b\r\n".len());
        let plain = rules.lines_for(b"/a.css");
        assert_eq!(tls_only_at(&b"X-A: a\r\n"[..]), 8);
        assert_eq!(tls_only_at(b""), 0);
        assert!(plain.ends_with(b"max-age=1\r\n"));
    }

    #[test]
    fn header_rules_refuse_what_would_break_a_head() {
        for (name, value) in [
            ("Content-Length", "5"),
            ("cache-control", "no-cache"),
            ("Vary", "Cookie"),
            ("Bad Name", "x"),
            ("X-Ok", "a\r\nInjected: 1"),
            ("X-Ok", " "),
            ("", "x"),
        ] {
            assert!(
                header_rules(&[("*", &[(name, value)])]).is_err(),
                "{name}: {value}"
            );
        }
        assert!(header_rules(&[("a[", &[("X-A", "1")])]).is_err());
    }

    #[test]
    fn dotfile_allow_by_name_or_path() {
        let allow = DotfileAllow::default();
        assert!(allow.allows(b".well-known", b"/.well-known"));
        assert!(allow.allows(b".well-known", b"/sub/.well-known"));
        assert!(!allow.allows(b".git", b"/.git"));
        assert!(!allow.allows(b".env", b"/.env"));
        let allow = DotfileAllow::new(&[".well-known/*".into(), ".htaccess".into()]).unwrap();
        assert!(!allow.allows(b".well-known", b"/.well-known"));
        assert!(allow.allows(b".acme", b"/.well-known/.acme"));
        assert!(!allow.allows(b".acme", b"/.well-known/x/.acme"));
        assert!(allow.allows(b".htaccess", b"/a/b/.htaccess"));
        assert!(DotfileAllow::all().allows(b".git", b"/.git"));
        assert!(!DotfileAllow::none().allows(b".well-known", b"/.well-known"));
        assert!(DotfileAllow::new(&["".into()]).is_err());
    }

    #[test]
    fn status_cache_control_by_status_and_class() {
        let errors = vec![
            ("4xx".to_owned(), "public, max-age=60".to_owned()),
            ("404".to_owned(), "public, max-age=10".to_owned()),
            ("5xx".to_owned(), "no-store".to_owned()),
        ];
        let t = StatusCacheControl::new(&errors, Some("public, max-age=3600")).unwrap();
        let line = |s| String::from_utf8_lossy(t.line(s)).into_owned();
        assert_eq!(
            line(Status::NotFound),
            "Cache-Control: public, max-age=10\r\n"
        );
        assert_eq!(
            line(Status::Forbidden),
            "Cache-Control: public, max-age=60\r\n"
        );
        assert_eq!(
            line(Status::ServiceUnavailable),
            "Cache-Control: no-store\r\n"
        );
        assert_eq!(
            line(Status::MovedPermanently),
            "Cache-Control: public, max-age=3600\r\n"
        );
        for s in [
            Status::RangeNotSatisfiable,
            Status::PreconditionFailed,
            Status::Ok,
        ] {
            assert_eq!(line(s), "", "{s:?}");
        }
        assert!(StatusCacheControl::default()
            .line(Status::NotFound)
            .is_empty());
        for bad in ["416", "412", "200", "6xx", "abc"] {
            let e = vec![(bad.to_owned(), "max-age=1".to_owned())];
            assert!(StatusCacheControl::new(&e, None).is_err(), "{bad}");
        }
        let e = vec![("404".to_owned(), "a\nb".to_owned())];
        assert!(StatusCacheControl::new(&e, None).is_err());
        assert!(StatusCacheControl::new(&[], Some("")).is_err());
    }

    #[test]
    fn fast_start_freshness_cap() {
        let table: &[(Option<&str>, &str)] = &[
            (None, "max-age=60"),
            (
                Some("public, max-age=31536000, immutable"),
                "public, max-age=60",
            ),
            (Some("max-age=10"), "max-age=10"),
            (
                Some("public, s-maxage=600, max-age=30, stale-if-error=86400"),
                "public, stale-if-error=86400, max-age=30",
            ),
            (Some("no-cache"), "no-cache"),
            (Some("private, max-age=600"), "private, max-age=600"),
            (Some("public, No-Store"), "public, No-Store"),
            (Some("public"), "public, max-age=60"),
        ];
        for (value, want) in table {
            assert_eq!(capped(*value, 60), *want, "{value:?}");
        }
    }
}
