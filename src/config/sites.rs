//! `[[sites]]`: virtual hosts, each with its names, its root, its response
//! rules and its certificates, validated into [`SiteConfig`]s; and
//! `unknown_host`, what a name no site claims gets. The top level is the
//! default site.
//!
//! A site inherits the top level's response rules (`[[headers]]`,
//! `cache_control`, `cache_control_default`, `error_cache_control`,
//! `redirect_cache_control`, `index_files`, the dotfile rules,
//! `default_type`, `hsts`) unless it sets its own, as nginx's `server`
//! blocks inherit from `http`; its `root`, `error_pages`, `spa_fallback`,
//! `redirect_https`, certificates and `acme` are its own.

use super::site::site_rules;
use super::tls::https;
use super::values::{error_cache_control_table, error_pages_table};
use super::*;
use crate::http::host::Names;

/// One `[[sites]]` table, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteSettings {
    #[serde(default, deserialize_with = "one_or_many_strings")]
    pub names: Option<Vec<String>>,
    pub root: Option<PathBuf>,
    pub index_files: Option<Vec<String>>,
    pub serve_dotfiles: Option<bool>,
    pub dotfile_allow: Option<Vec<String>>,
    pub default_type: Option<String>,
    pub cache_control: Option<CacheControlRules>,
    pub cache_control_default: Option<String>,
    #[serde(default, deserialize_with = "error_cache_control_table")]
    pub error_cache_control: Option<BTreeMap<String, String>>,
    pub redirect_cache_control: Option<String>,
    pub headers: Option<Vec<HeaderRule>>,
    #[serde(default, deserialize_with = "error_pages_table")]
    pub error_pages: Option<BTreeMap<String, String>>,
    pub spa_fallback: Option<bool>,
    pub hsts: Option<String>,
    pub redirect_https: Option<bool>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_certificates: Option<Vec<TlsPair>>,
    pub acme: Option<bool>,
}

pub use crate::serve::sites::UnknownHost;

/// One validated site.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    /// Its first name: the `site` label of its metrics and log lines.
    pub label: String,
    /// Exact names and `*.` wildcards, lowercased.
    pub names: Vec<String>,
    pub root: PathBuf,
    pub dotfile_allow: crate::cache::DotfileAllow,
    pub index_files: Vec<String>,
    pub default_type: String,
    pub status_cache_control: crate::cache::StatusCacheControl,
    pub headers: crate::cache::HeaderRules,
    pub cache_control: crate::cache::CacheControl,
    pub error_pages: Vec<(u16, String)>,
    pub spa_fallback: bool,
    pub hsts: Option<String>,
    pub redirect_https: bool,
}

impl Config {
    /// The `site` label of every site, the default site (`default`) first.
    pub fn site_labels(&self) -> Vec<String> {
        std::iter::once("default".to_owned())
            .chain(self.sites.iter().map(|s| s.label.clone()))
            .collect()
    }

    /// What each site's snapshot is built with, the default site's first.
    /// They share one cache of open large files (keyed by inode), so
    /// `max_open_files` bounds the server, not each site, and one
    /// `cache_max_bytes` (`cache::Budget`).
    pub fn sites_build_options(&self) -> Vec<crate::cache::BuildOptions> {
        let base = self.build_options();
        if self.sites.is_empty() {
            return vec![base];
        }
        let mut shares = crate::cache::Budget::shares(self.cache_max_bytes, self.sites.len() + 1);
        let mut out = vec![crate::cache::BuildOptions {
            budget: Some(shares.remove(0)),
            ..base.clone()
        }];
        for (site, share) in self.sites.iter().zip(shares) {
            out.push(crate::cache::BuildOptions {
                budget: Some(share),
                root: site.root.clone(),
                dotfile_allow: site.dotfile_allow.clone(),
                index_files: site.index_files.clone(),
                default_type: site.default_type.clone(),
                headers: site.headers.clone(),
                status_cache_control: site.status_cache_control.clone(),
                cache_control: site.cache_control.clone(),
                error_pages: site.error_pages.clone(),
                spa_fallback: site.spa_fallback,
                ..base.clone()
            });
        }
        out
    }
}

/// `unknown_host`.
pub(super) fn unknown_host(s: &Settings) -> anyhow::Result<UnknownHost> {
    Ok(match s.unknown_host.as_deref() {
        None | Some("default") => UnknownHost::Default,
        Some("421") => UnknownHost::Misdirected,
        Some("404") => UnknownHost::NotFound,
        Some(other) => bail!(
            "{}: `{other}` is not one of `default`, `421`, `404`",
            s.name("unknown_host")
        ),
    })
}

/// Every `[[sites]]` table checked, each name claimed once, with the
/// table of names → site (the default site is 0, `sites[i]` is `i + 1`);
/// a site's certificates are added to `tls` and its `acme = true` names to
/// `acme_names`.
pub(super) fn sites(
    s: &Settings,
    mut tls: Option<&mut crate::tls::TlsSettings>,
    acme_names: &mut Vec<(String, String)>,
) -> anyhow::Result<(Vec<SiteConfig>, Names<u32>)> {
    let mut out = Vec::new();
    let mut claimed: Names<u32> = Names::default();
    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    for (i, site) in s.sites.iter().flatten().enumerate() {
        let ss = site_settings(s, site, i);
        let names = site.names.clone().unwrap_or_default();
        if names.is_empty() {
            bail!(
                "{}: a site needs `names`, e.g. `names = [\"example.com\", \"*.example.com\"]`",
                ss.name("names")
            );
        }
        let index = u32::try_from(i + 1).context("more sites than a table holds")?;
        let mut lower = Vec::new();
        for name in &names {
            let key = name.trim_end_matches('.').to_ascii_lowercase();
            if let Err(e) = claimed.insert(name, index) {
                let by = match owner.get(&key) {
                    Some(j) if *j != i => format!(" (also by sites[{j}])"),
                    _ => String::new(),
                };
                bail!("{}: `{name}` {e}{by}", ss.name("names"));
            }
            owner.insert(key.clone(), i);
            lower.push(key);
        }
        if site.root.is_none() {
            bail!(
                "{}: a site needs `root`, the directory it serves",
                ss.name("root")
            );
        }
        let root = super::validate::root(&ss)?;
        let rules = site_rules(&ss)?;
        let https = https(&ss, tls.is_some())?;
        let label = lower[0].clone();
        site_certificates(&ss, site.acme == Some(true), tls.as_deref_mut())?;
        if site.acme == Some(true) {
            for name in &lower {
                if name.starts_with("*.") {
                    bail!(
                        "{}: `{name}` is a wildcard, which ACME grants only by DNS-01 \
                         (not supported); give the site a `tls_cert` for it",
                        ss.name("acme")
                    );
                }
                acme_names.push((name.clone(), format!("sites[{i}].acme")));
            }
        }
        out.push(SiteConfig {
            label,
            names: lower,
            root,
            dotfile_allow: rules.dotfile_allow,
            index_files: rules.index_files,
            default_type: rules.default_type,
            status_cache_control: rules.status_cache_control,
            headers: rules.headers,
            cache_control: rules.cache_control,
            error_pages: rules.error_pages,
            spa_fallback: site.spa_fallback.unwrap_or(false),
            hsts: https.hsts,
            redirect_https: https.redirect_https,
        });
    }
    Ok((out, claimed))
}

/// The settings one site is validated from: its own keys, then the top
/// level's for the inherited rules; errors name `sites[i].key`.
fn site_settings(top: &Settings, site: &SiteSettings, i: usize) -> Settings {
    // The dotfile rules are one choice: a site that makes it takes none
    // of the top level's.
    let own_dotfiles = site.serve_dotfiles.is_some() || site.dotfile_allow.is_some();
    let (serve_dotfiles, dotfile_allow) = if own_dotfiles {
        (site.serve_dotfiles, site.dotfile_allow.clone())
    } else {
        (top.serve_dotfiles, top.dotfile_allow.clone())
    };
    Settings {
        key_lines: top.key_lines.clone(),
        key_prefix: format!("sites[{i}]."),
        root: site.root.clone(),
        serve_dotfiles,
        dotfile_allow,
        index_files: site.index_files.clone().or(top.index_files.clone()),
        default_type: site.default_type.clone().or(top.default_type.clone()),
        cache_control: site.cache_control.clone().or(top.cache_control.clone()),
        cache_control_default: site
            .cache_control_default
            .clone()
            .or(top.cache_control_default.clone()),
        error_cache_control: site
            .error_cache_control
            .clone()
            .or(top.error_cache_control.clone()),
        redirect_cache_control: site
            .redirect_cache_control
            .clone()
            .or(top.redirect_cache_control.clone()),
        headers: site.headers.clone().or(top.headers.clone()),
        error_pages: site.error_pages.clone(),
        hsts: site.hsts.clone().or(top.hsts.clone()),
        redirect_https: site.redirect_https,
        tls_cert: site.tls_cert.clone(),
        tls_key: site.tls_key.clone(),
        tls_certificates: site.tls_certificates.clone(),
        ..Settings::default()
    }
}

/// A site's `tls_cert`/`tls_key` and `[[sites.tls_certificates]]` (read
/// from `ss`, its settings), added to the TLS settings: chosen by SNI from
/// their subjectAltNames, as the top level's are.
fn site_certificates(
    ss: &Settings,
    acme: bool,
    tls: Option<&mut crate::tls::TlsSettings>,
) -> anyhow::Result<()> {
    let pairs = super::tls::cert_pairs(ss)?;
    if pairs.is_empty() && !acme {
        return Ok(());
    }
    let Some(tls) = tls else {
        let key = if pairs.is_empty() { "acme" } else { "tls_cert" };
        bail!(
            "{}: needs `tls_listen` at the top level, the address to serve HTTPS on",
            ss.name(key)
        );
    };
    tls.pairs.extend(pairs);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> anyhow::Result<Config> {
        let dir = std::env::temp_dir().join(format!("shardhttpd-sites-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::create_dir_all(dir.join("b")).unwrap();
        let text = text.replace("DIR", &dir.display().to_string());
        // One file per call: the tests run in parallel in one process.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("s{n}.toml"));
        std::fs::write(&path, &text).unwrap();
        let file = Settings::from_file(&path)?;
        Config::validate(file, &[0])
    }

    #[test]
    fn sites_inherit_rules_and_keep_their_own_root() {
        let c = config(
            "root = \"DIR\"\nindex_files = [\"home.html\"]\nspa_fallback = true\n\
             [[sites]]\nnames = [\"A.example\", \"*.a.example\"]\nroot = \"DIR/a\"\n\
             [[sites]]\nnames = \"b.example\"\nroot = \"DIR/b\"\nindex_files = [\"i.htm\"]\n",
        )
        .unwrap();
        assert_eq!(c.sites.len(), 2);
        assert_eq!(c.sites[0].label, "a.example");
        assert_eq!(c.sites[0].names, ["a.example", "*.a.example"]);
        assert_eq!(c.sites[0].index_files, ["home.html"]);
        assert!(!c.sites[0].spa_fallback, "spa_fallback is the site's own");
        assert_eq!(c.sites[1].index_files, ["i.htm"]);
        assert!(c.sites[1].root.ends_with("b"));
        assert_eq!(c.unknown_host, UnknownHost::Default);
    }

    #[test]
    fn errors_name_the_site_and_its_line() {
        let e = config(
            "root = \"DIR\"\n[[sites]]\nnames = \"a.example\"\nroot = \"DIR/a\"\n\
             [[sites]]\nnames = [\"b.example\", \"A.example\"]\nroot = \"DIR/b\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 6: key `sites[1].names`"), "{e}");
        assert!(
            e.contains("`A.example` is claimed twice (also by sites[0])"),
            "{e}"
        );

        let e = config("root = \"DIR\"\n[[sites]]\nnames = \"a.example\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `sites[0].root`") && e.contains("needs `root`"),
            "{e}"
        );

        let e = config(
            "root = \"DIR\"\n[[sites]]\nnames = \"a.example\"\nroot = \"DIR/a\"\n\
             [[sites.headers]]\nglob = \"*\"\nset = { \"Bad Name\" = \"x\" }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 7: key `sites[0].headers[0].set.Bad Name`"),
            "{e}"
        );

        let e = config("root = \"DIR\"\nunknown_host = \"drop\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`drop` is not one of"), "{e}");

        let e = config(
            "root = \"DIR\"\n[[sites]]\nnames = \"a.example\"\nroot = \"DIR/a\"\n\
             hsts = \"max-age=1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("key `sites[0].hsts`") && e.contains("tls_listen"),
            "{e}"
        );
    }
}
