//! The keys that shape responses per path, validated into [`SiteRules`]:
//! dotfiles, index files, the default type, `Cache-Control` (by glob, and
//! of errors and redirects), `[[headers]]` and the error pages.

use super::*;

/// What [`site_rules`] validates.
pub(super) struct SiteRules {
    pub(super) dotfile_allow: crate::cache::DotfileAllow,
    pub(super) index_files: Vec<String>,
    pub(super) default_type: String,
    pub(super) status_cache_control: crate::cache::StatusCacheControl,
    pub(super) headers: crate::cache::HeaderRules,
    pub(super) cache_control: crate::cache::CacheControl,
    pub(super) error_pages: Vec<(u16, String)>,
}

/// The keys that shape responses per path: dotfiles, index files, the
/// default type, error/redirect `Cache-Control`, `[[headers]]`,
/// `Cache-Control` by glob and the error pages.
pub(super) fn site_rules(s: &Settings) -> anyhow::Result<SiteRules> {
    use crate::cache::{DotfileAllow, StatusCacheControl};
    let dotfile_allow = match (&s.dotfile_allow, s.serve_dotfiles) {
        (Some(_), Some(true)) => bail!(
            "{}: give either `serve_dotfiles = true` (every dotfile) or `dotfile_allow` \
             (the ones listed), not both",
            s.name("serve_dotfiles")
        ),
        (_, Some(true)) => DotfileAllow::all(),
        (Some(patterns), _) => DotfileAllow::new(patterns)
            .map_err(|e| anyhow::anyhow!("{}: {e}", s.name("dotfile_allow")))?,
        (None, _) => DotfileAllow::default(),
    };
    let index_files = match &s.index_files {
        None => DEFAULT_INDEX_FILES
            .iter()
            .map(|n| (*n).to_owned())
            .collect(),
        Some(names) if names.is_empty() => {
            bail!("{}: at least one name is needed", s.name("index_files"))
        }
        Some(names) => {
            for name in names {
                if name.is_empty()
                    || name == "."
                    || name == ".."
                    || name.contains(['/', '\\', '\0'])
                {
                    bail!(
                        "{}: `{name}` must be a file name, not a path",
                        s.name("index_files")
                    );
                }
            }
            names.clone()
        }
    };
    let default_type = s
        .default_type
        .clone()
        .unwrap_or_else(|| DEFAULT_TYPE.to_owned());
    let parsed: Result<mime_guess::mime::Mime, _> = default_type.parse();
    if parsed.is_err() || default_type.bytes().any(|b| b < 0x20 || b == 0x7f) {
        bail!(
            "{}: `{default_type}` is not a media type like `text/plain`",
            s.name("default_type")
        );
    }
    let errors: Vec<(String, String)> = s
        .error_cache_control
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    StatusCacheControl::new(&[], s.redirect_cache_control.as_deref())
        .map_err(|e| anyhow::anyhow!("{}: {e}", s.name("redirect_cache_control")))?;
    let status_cache_control =
        StatusCacheControl::new(&errors, s.redirect_cache_control.as_deref())
            .map_err(|e| anyhow::anyhow!("{}: {e}", s.name("error_cache_control")))?;
    let headers = header_rules(s)?;
    let rules = s
        .cache_control
        .as_ref()
        .map(CacheControlRules::ordered)
        .unwrap_or_default();
    let cache_control = crate::cache::CacheControl::new(&rules, s.cache_control_default.clone())
        .map_err(|e| anyhow::anyhow!("{}: {e}", s.name("cache_control")))?;
    let error_pages = error_pages(s)?;
    Ok(SiteRules {
        dotfile_allow,
        index_files,
        default_type,
        status_cache_control,
        headers,
        cache_control,
        error_pages,
    })
}

/// `[[headers]]`, each part checked on its own first so that an error
/// names the entry and the key (`headers[1].set.X-Bad`), and with it the
/// line, rather than the first `[[headers]]` header.
fn header_rules(s: &Settings) -> anyhow::Result<crate::cache::HeaderRules> {
    use crate::cache::HeaderRules;
    let mut rules: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (i, rule) in s.headers.iter().flatten().enumerate() {
        let at = |part: &str| s.name_path(&format!("headers[{i}].{part}"));
        HeaderRules::new(&[(rule.glob.clone(), Vec::new())])
            .map_err(|e| anyhow::anyhow!("{}: {e}", at("glob")))?;
        for (name, value) in &rule.set {
            let field = vec![(name.clone(), value.clone())];
            HeaderRules::new(&[(rule.glob.clone(), field)])
                .map_err(|e| anyhow::anyhow!("{}: {e}", at(&format!("set.{name}"))))?;
        }
        let set = rule
            .set
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        rules.push((rule.glob.clone(), set));
    }
    HeaderRules::new(&rules).map_err(|e| anyhow::anyhow!("{}: {e}", s.name("headers")))
}

/// `error_pages`: 4xx/5xx codes to relative paths that stay inside the
/// root; an error names the entry (`error_pages.200`), at its own line
/// under `[error_pages]`.
fn error_pages(s: &Settings) -> anyhow::Result<Vec<(u16, String)>> {
    let mut out = Vec::new();
    for (code, page) in s.error_pages.iter().flatten() {
        let name = s.name_path(&format!("error_pages.{code}"));
        let n: u16 = code
            .parse()
            .ok()
            .filter(|n| (400..=599).contains(n))
            .with_context(|| format!("{name}: `{code}` is not a 4xx or 5xx status"))?;
        let rel = page.trim_start_matches('/');
        if rel.is_empty() || rel.split('/').any(|c| c == ".." || c == ".") || rel.contains('\\') {
            bail!("{name}: `{page}` must be a file path relative to the root");
        }
        out.push((n, rel.to_owned()));
    }
    Ok(out)
}
