//! `Cache-Control` by URL glob: compiled once from the config, consulted once
//! per file at build time, and baked into the pre-rendered heads.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};

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
            let compiled = GlobBuilder::new(glob)
                .literal_separator(false)
                .backslash_escape(true)
                .build()
                .map_err(|e| format!("glob `{glob}`: {e}"))?;
            builder.add(compiled);
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
    fn no_rules_no_header() {
        let cc = CacheControl::default();
        assert_eq!(cc.value_for(b"/a.html"), None);
    }

    #[test]
    fn bad_values_and_globs_are_refused() {
        let bad = |g: &str, v: &str| CacheControl::new(&[(g.into(), v.into())], None).is_err();
        assert!(bad("*.html", "no-cache\r\nX-Evil: 1"));
        assert!(bad("*.html", " "));
        assert!(bad("a[", "no-cache"));
        assert!(CacheControl::new(&[], Some("a\nb".into())).is_err());
    }
}
