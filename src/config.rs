//! Settings: CLI flags and a TOML file name the same settings (flags win),
//! validated once into a [`Config`] that nothing downstream second-guesses.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use serde::Deserialize;

/// Default document root: the bundled example site.
pub const DEFAULT_ROOT: &str = "examples/site";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9180";
/// Listen backlog; the kernel clamps it to `net.core.somaxconn`.
pub const DEFAULT_BACKLOG: u32 = 4096;
/// nginx's `keepalive_requests` is 1000; static assets are cheap, so allow more.
pub const DEFAULT_MAX_REQUESTS_PER_CONNECTION: u32 = 10_000;
/// More ranges than this in one request get the whole body (200) instead of
/// a `multipart/byteranges` that costs more than it saves.
pub const DEFAULT_MAX_RANGES: usize = 16;
/// Request-head limit; nginx's `large_client_header_buffers` is 8 KiB too.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 8 * 1024;
/// Request-target limit. Must stay below the head limit so 414 is reachable.
pub const DEFAULT_MAX_URI_BYTES: usize = 4 * 1024;
/// A body on GET/HEAD up to this size is read and discarded; more is a 413.
pub const DEFAULT_MAX_DISCARD_BYTES: u64 = 64 * 1024;
pub const DEFAULT_HEADER_TIMEOUT_S: f64 = 10.0;
pub const DEFAULT_KEEPALIVE_TIMEOUT_S: f64 = 60.0;
/// nginx's `send_timeout`: a reader that takes nothing for this long is dropped.
pub const DEFAULT_WRITE_TIMEOUT_S: f64 = 60.0;
pub const DEFAULT_SHUTDOWN_GRACE_S: f64 = 10.0;
/// How long the new process of a SIGUSR2 upgrade has to say it is ready
/// (its snapshot built, every shard in its loop) before the old one gives up.
pub const DEFAULT_UPGRADE_TIMEOUT_S: f64 = 30.0;
/// Files at least this large are sent with `sendfile` from an fd.
pub const DEFAULT_SENDFILE_THRESHOLD: u64 = 1024 * 1024;
/// Memory for bodies held in the snapshot.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
pub const DEFAULT_SERVER_HEADER: &str = "shardhttpd";
/// Quiet time after a change under the root before the snapshot is rebuilt:
/// long enough to batch a deploy's burst of events, short enough to show
/// changes well within a second.
pub const DEFAULT_WATCH_DEBOUNCE_MS: u64 = 50;
/// Rescan period without inotify, and retry period after a failed rebuild.
pub const DEFAULT_RESCAN_INTERVAL_S: f64 = 2.0;

/// Every setting, as given by flags or by the file; `None` means "not given".
/// Flag names are the kebab-case of the TOML keys.
#[derive(Debug, Default, Clone, Parser, Deserialize)]
#[command(
    name = "shardhttpd",
    version,
    about = "Per-core sharded static-file HTTP server"
)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// TOML config file; flags override its keys.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Validate the configuration and exit.
    #[arg(long)]
    #[serde(skip)]
    pub check: bool,

    /// Document root.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Address to listen on; repeat for several (IPv4 and IPv6). Port 0 picks one.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<Vec<SocketAddr>>,
    /// CPUs to run shards on: a count (`4`) or a list (`0-3,6`). Default: every
    /// CPU in the process's affinity mask.
    #[arg(long, value_name = "SPEC")]
    pub cores: Option<String>,
    /// Admin listener (metrics, health, status).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Listen backlog per shard socket.
    #[arg(long, value_name = "N")]
    pub backlog: Option<u32>,
    /// `Server` header value; empty turns it off.
    #[arg(long, value_name = "STR")]
    pub server_header: Option<String>,
    /// Requests served on one connection before `Connection: close`.
    #[arg(long, value_name = "N")]
    pub max_requests_per_connection: Option<u32>,
    /// Most ranges honoured in one request before answering 200.
    #[arg(long, value_name = "N")]
    pub max_ranges: Option<usize>,
    /// Largest request head in bytes (431 beyond).
    #[arg(long, value_name = "BYTES")]
    pub max_head_bytes: Option<usize>,
    /// Longest request target in bytes (414 beyond).
    #[arg(long, value_name = "BYTES")]
    pub max_uri_bytes: Option<usize>,
    /// Largest body on GET/HEAD that is read and discarded (413 beyond).
    #[arg(long, value_name = "BYTES")]
    pub max_discard_bytes: Option<u64>,
    /// Seconds to receive a whole request head (408 beyond).
    #[arg(long, value_name = "SECS")]
    pub header_timeout: Option<f64>,
    /// Seconds an idle keep-alive connection is kept.
    #[arg(long, value_name = "SECS")]
    pub keepalive_timeout: Option<f64>,
    /// Seconds a response may make no progress before the connection is dropped.
    #[arg(long, value_name = "SECS")]
    pub write_timeout: Option<f64>,
    /// Seconds to finish in-flight responses on SIGTERM/SIGINT.
    #[arg(long, value_name = "SECS")]
    pub shutdown_grace: Option<f64>,
    /// Seconds to keep accepting and serving after SIGTERM while /readyz
    /// already fails, so load balancers stop routing here first.
    #[arg(long, value_name = "SECS")]
    pub drain_delay: Option<f64>,
    /// Binary started by SIGUSR2 (default: this executable's path as
    /// resolved at start, so a binary replaced on disk is the one started).
    #[arg(long, value_name = "PATH")]
    pub upgrade_binary: Option<PathBuf>,
    /// Seconds the new process of a SIGUSR2 upgrade has to become ready.
    #[arg(long, value_name = "SECS")]
    pub upgrade_timeout: Option<f64>,
    /// Files of at least this many bytes are sent from their fd, not memory.
    #[arg(long, value_name = "BYTES")]
    pub sendfile_threshold: Option<u64>,
    /// Send those files zero-copy with sendfile. Safe only when files are
    /// replaced by rename, never rewritten in place; off by default, when
    /// they go through a verified copy instead.
    #[arg(long, value_name = "BOOL")]
    pub sendfile: Option<bool>,
    /// Memory for bodies held in the snapshot.
    #[arg(long, value_name = "BYTES")]
    pub cache_max_bytes: Option<u64>,
    /// Serve files and directories whose names start with a dot.
    #[arg(long, value_name = "BOOL")]
    pub serve_dotfiles: Option<bool>,
    /// Count requests into Prometheus metrics (on by default).
    #[arg(long, value_name = "BOOL")]
    pub metrics: Option<bool>,
    /// Access log file; off when not given.
    #[arg(long, value_name = "PATH")]
    pub access_log: Option<PathBuf>,
    /// Access log format: `combined` or `json`.
    #[arg(long, value_name = "FORMAT")]
    pub access_log_format: Option<String>,
    /// Rebuild the snapshot when files under the root change (on by default).
    #[arg(long, value_name = "BOOL")]
    pub watch: Option<bool>,
    /// Milliseconds without changes before a rebuild starts.
    #[arg(long, value_name = "MS")]
    pub watch_debounce_ms: Option<u64>,
    /// Seconds between rescans when inotify is unavailable, and before
    /// retrying a failed rebuild.
    #[arg(long, value_name = "SECS")]
    pub rescan_interval: Option<f64>,
    /// Build brotli, zstd and gzip variants of compressible files (on by default).
    #[arg(long, value_name = "BOOL")]
    pub compress: Option<bool>,
    /// Smallest file that is compressed, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub compress_min_bytes: Option<u64>,
    /// brotli quality, 0-11.
    #[arg(long, value_name = "N")]
    pub brotli_level: Option<u32>,
    /// gzip level, 1-9.
    #[arg(long, value_name = "N")]
    pub gzip_level: Option<u32>,
    /// zstd level, 1-22.
    #[arg(long, value_name = "N")]
    pub zstd_level: Option<i32>,
    /// `Cache-Control` by URL glob (config file only): a table
    /// `{ "*.html" = "no-cache" }` (longest glob wins) or an array of
    /// `{ glob, value }` tables (first match wins).
    #[arg(skip)]
    pub cache_control: Option<CacheControlRules>,
    /// `Cache-Control` for files no rule matches; none when not given.
    #[arg(long, value_name = "VALUE")]
    pub cache_control_default: Option<String>,
    /// Error status → page relative to the root (config file only), e.g.
    /// `{ 404 = "404.html" }`. Default: `404.html` when the root has one.
    #[arg(skip)]
    pub error_pages: Option<BTreeMap<String, String>>,
    /// Serve `/index.html` (200) for unknown paths without an extension.
    #[arg(long, value_name = "BOOL")]
    pub spa_fallback: Option<bool>,
}

/// The two spellings of the `cache_control` key.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum CacheControlRules {
    /// `[[cache_control]]` tables: tried in file order.
    Ordered(Vec<CacheControlRule>),
    /// `[cache_control]` glob = value: a TOML table has no order, so the
    /// longest glob is tried first (ties in byte order).
    Map(BTreeMap<String, String>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheControlRule {
    pub glob: String,
    pub value: String,
}

impl CacheControlRules {
    /// The rules in precedence order.
    pub fn ordered(&self) -> Vec<(String, String)> {
        match self {
            CacheControlRules::Ordered(rules) => rules
                .iter()
                .map(|r| (r.glob.clone(), r.value.clone()))
                .collect(),
            CacheControlRules::Map(map) => {
                let mut rules: Vec<(String, String)> =
                    map.iter().map(|(g, v)| (g.clone(), v.clone())).collect();
                rules.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
                rules
            }
        }
    }
}

/// Field-by-field "flag if given, else file".
macro_rules! overlay {
    ($flags:ident, $file:ident; $($field:ident),* $(,)?) => {
        Settings {
            config: $flags.config,
            check: $flags.check,
            $($field: $flags.$field.or($file.$field),)*
        }
    };
}

impl Settings {
    /// Flags in `self` win over the same keys in `file`.
    pub fn overlay(self, file: Settings) -> Settings {
        let flags = self;
        overlay!(flags, file;
            root, listen, cores, admin, backlog, server_header,
            max_requests_per_connection, max_ranges, max_head_bytes, max_uri_bytes,
            max_discard_bytes, header_timeout, keepalive_timeout, write_timeout,
            shutdown_grace, drain_delay, upgrade_binary, upgrade_timeout, sendfile_threshold, sendfile, cache_max_bytes, serve_dotfiles,
            metrics, access_log, access_log_format,
            watch, watch_debounce_ms, rescan_interval, compress, compress_min_bytes,
            brotli_level, gzip_level, zstd_level, cache_control, cache_control_default,
            error_pages, spa_fallback,
        )
    }

    /// Read a TOML file into settings.
    pub fn from_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("config file {}", path.display()))
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub root: PathBuf,
    pub listen: Vec<SocketAddr>,
    /// CPU ids, one shard each.
    pub cpus: Vec<usize>,
    pub admin: SocketAddr,
    pub backlog: u32,
    /// Rendered `Server: …\r\n`, or empty.
    pub server_line: Vec<u8>,
    pub max_requests_per_connection: u32,
    pub max_ranges: usize,
    pub max_head_bytes: usize,
    pub max_uri_bytes: usize,
    pub max_discard_bytes: u64,
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub write_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Serving goes on this long after SIGTERM, with `/readyz` failing.
    pub drain_delay: Duration,
    /// What SIGUSR2 starts; `None`: this executable, resolved at start.
    pub upgrade_binary: Option<PathBuf>,
    pub upgrade_timeout: Duration,
    pub sendfile_threshold: u64,
    pub sendfile: bool,
    pub cache_max_bytes: u64,
    pub serve_dotfiles: bool,
    pub metrics: bool,
    pub access_log: Option<PathBuf>,
    pub access_log_format: LogFormat,
    /// Rebuild on changes under the root (inotify, else rescans).
    pub watch: bool,
    pub watch_debounce: Duration,
    pub rescan_interval: Duration,
    /// `None`: no variants are built (sidecars are still used).
    pub compress: Option<crate::cache::CompressOptions>,
    pub cache_control: crate::cache::CacheControl,
    /// Status code → page path relative to the root, `/`-separated.
    pub error_pages: Vec<(u16, String)>,
    pub spa_fallback: bool,
}

/// Access log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// The NCSA combined format nginx and Apache write by default.
    Combined,
    /// One JSON object per line.
    Json,
}

impl Config {
    /// Merge flags over the config file (if any) and validate.
    pub fn load(flags: Settings) -> anyhow::Result<Config> {
        let file = match &flags.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        Config::validate(flags.overlay(file), &affinity_cpus())
    }

    /// Validate settings; every error names the key. `allowed` is the
    /// process's CPU affinity mask.
    pub fn validate(s: Settings, allowed: &[usize]) -> anyhow::Result<Config> {
        let compress = compress_options(&s)?;
        let root = s.root.unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT));
        if !root.is_dir() {
            bail!("config key `root`: {} is not a directory", root.display());
        }
        let listen = match s.listen {
            Some(l) if l.is_empty() => bail!("config key `listen`: at least one address is needed"),
            Some(l) => l,
            None => vec![DEFAULT_LISTEN.parse().expect("valid default")],
        };
        let cpus = match s.cores.as_deref() {
            None => allowed.to_vec(),
            Some(spec) => parse_cores(spec, allowed).context("config key `cores`")?,
        };
        if cpus.is_empty() {
            bail!("config key `cores`: no CPU available");
        }
        let server = s
            .server_header
            .unwrap_or_else(|| DEFAULT_SERVER_HEADER.to_owned());
        if server.bytes().any(|b| b < 0x20 || b == 0x7f) {
            bail!("config key `server_header`: control characters are not allowed");
        }
        let server_line = if server.is_empty() {
            Vec::new()
        } else {
            format!("Server: {server}\r\n").into_bytes()
        };
        let max_head_bytes = s.max_head_bytes.unwrap_or(DEFAULT_MAX_HEAD_BYTES);
        if !(256..=1024 * 1024).contains(&max_head_bytes) {
            bail!("config key `max_head_bytes`: must be between 256 and 1048576");
        }
        let max_uri_bytes = s.max_uri_bytes.unwrap_or(DEFAULT_MAX_URI_BYTES);
        if max_uri_bytes < 16 || max_uri_bytes >= max_head_bytes {
            bail!("config key `max_uri_bytes`: must be at least 16 and below max_head_bytes ({max_head_bytes})");
        }
        let max_requests = s
            .max_requests_per_connection
            .unwrap_or(DEFAULT_MAX_REQUESTS_PER_CONNECTION);
        if max_requests == 0 {
            bail!("config key `max_requests_per_connection`: must be at least 1");
        }
        let max_ranges = s.max_ranges.unwrap_or(DEFAULT_MAX_RANGES);
        if max_ranges == 0 {
            bail!("config key `max_ranges`: must be at least 1");
        }
        let watch_debounce_ms = s.watch_debounce_ms.unwrap_or(DEFAULT_WATCH_DEBOUNCE_MS);
        if !(1..=10_000).contains(&watch_debounce_ms) {
            bail!("config key `watch_debounce_ms`: must be between 1 and 10000");
        }
        let rules = s
            .cache_control
            .as_ref()
            .map(CacheControlRules::ordered)
            .unwrap_or_default();
        let cache_control =
            crate::cache::CacheControl::new(&rules, s.cache_control_default.clone())
                .map_err(|e| anyhow::anyhow!("config key `cache_control`: {e}"))?;
        let error_pages = error_pages(s.error_pages.as_ref())?;
        Ok(Config {
            root,
            listen,
            cpus,
            admin: s
                .admin
                .unwrap_or_else(|| DEFAULT_ADMIN.parse().expect("valid default")),
            backlog: s.backlog.unwrap_or(DEFAULT_BACKLOG).max(1),
            server_line,
            max_requests_per_connection: max_requests,
            max_ranges,
            max_head_bytes,
            max_uri_bytes,
            max_discard_bytes: s.max_discard_bytes.unwrap_or(DEFAULT_MAX_DISCARD_BYTES),
            header_timeout: seconds("header_timeout", s.header_timeout, DEFAULT_HEADER_TIMEOUT_S)?,
            keepalive_timeout: seconds(
                "keepalive_timeout",
                s.keepalive_timeout,
                DEFAULT_KEEPALIVE_TIMEOUT_S,
            )?,
            write_timeout: seconds("write_timeout", s.write_timeout, DEFAULT_WRITE_TIMEOUT_S)?,
            shutdown_grace: seconds("shutdown_grace", s.shutdown_grace, DEFAULT_SHUTDOWN_GRACE_S)?,
            drain_delay: match s.drain_delay.unwrap_or(0.0) {
                v if (0.0..=3600.0).contains(&v) => Duration::from_secs_f64(v),
                _ => bail!("config key `drain_delay`: must be a number of seconds in [0, 3600]"),
            },
            upgrade_binary: s.upgrade_binary,
            upgrade_timeout: seconds(
                "upgrade_timeout",
                s.upgrade_timeout,
                DEFAULT_UPGRADE_TIMEOUT_S,
            )?,
            sendfile_threshold: s
                .sendfile_threshold
                .unwrap_or(DEFAULT_SENDFILE_THRESHOLD)
                .max(1),
            sendfile: s.sendfile.unwrap_or(false),
            cache_max_bytes: s.cache_max_bytes.unwrap_or(DEFAULT_CACHE_MAX_BYTES),
            serve_dotfiles: s.serve_dotfiles.unwrap_or(false),
            metrics: s.metrics.unwrap_or(true),
            access_log: s.access_log,
            access_log_format: match s.access_log_format.as_deref() {
                None | Some("combined") => LogFormat::Combined,
                Some("json") => LogFormat::Json,
                Some(other) => bail!(
                    "config key `access_log_format`: `{other}` is not one of `combined`, `json`"
                ),
            },
            watch: s.watch.unwrap_or(true),
            watch_debounce: Duration::from_millis(watch_debounce_ms),
            rescan_interval: seconds(
                "rescan_interval",
                s.rescan_interval,
                DEFAULT_RESCAN_INTERVAL_S,
            )?,
            compress,
            cache_control,
            error_pages,
            spa_fallback: s.spa_fallback.unwrap_or(false),
        })
    }

    pub fn build_options(&self) -> crate::cache::BuildOptions {
        crate::cache::BuildOptions {
            root: self.root.clone(),
            cache_max_bytes: self.cache_max_bytes,
            sendfile_threshold: self.sendfile_threshold,
            server_line: self.server_line.clone(),
            serve_dotfiles: self.serve_dotfiles,
            compress: self.compress,
            cache_control: self.cache_control.clone(),
            error_pages: self.error_pages.clone(),
            spa_fallback: self.spa_fallback,
        }
    }

    pub fn watch_options(&self) -> crate::cache::watch::WatchOptions {
        crate::cache::watch::WatchOptions {
            debounce: self.watch_debounce,
            rescan_interval: self.rescan_interval,
        }
    }
}

/// `compress*` and the three levels, range-checked.
fn compress_options(s: &Settings) -> anyhow::Result<Option<crate::cache::CompressOptions>> {
    let d = crate::cache::CompressOptions::default();
    let opts = crate::cache::CompressOptions {
        min_bytes: s.compress_min_bytes.unwrap_or(d.min_bytes),
        brotli_level: s.brotli_level.unwrap_or(d.brotli_level),
        gzip_level: s.gzip_level.unwrap_or(d.gzip_level),
        zstd_level: s.zstd_level.unwrap_or(d.zstd_level),
    };
    if opts.brotli_level > 11 {
        bail!("config key `brotli_level`: must be between 0 and 11");
    }
    if !(1..=9).contains(&opts.gzip_level) {
        bail!("config key `gzip_level`: must be between 1 and 9");
    }
    if !(1..=22).contains(&opts.zstd_level) {
        bail!("config key `zstd_level`: must be between 1 and 22");
    }
    Ok(s.compress.unwrap_or(true).then_some(opts))
}

/// `error_pages`: 4xx/5xx codes to relative paths that stay inside the root.
fn error_pages(pages: Option<&BTreeMap<String, String>>) -> anyhow::Result<Vec<(u16, String)>> {
    let mut out = Vec::new();
    for (code, page) in pages.into_iter().flatten() {
        let n: u16 = code
            .parse()
            .ok()
            .filter(|n| (400..=599).contains(n))
            .with_context(|| {
                format!("config key `error_pages`: `{code}` is not a 4xx or 5xx status")
            })?;
        let rel = page.trim_start_matches('/');
        if rel.is_empty() || rel.split('/').any(|c| c == ".." || c == ".") || rel.contains('\\') {
            bail!("config key `error_pages`: `{page}` must be a file path relative to the root");
        }
        out.push((n, rel.to_owned()));
    }
    Ok(out)
}

fn seconds(key: &str, value: Option<f64>, default: f64) -> anyhow::Result<Duration> {
    let v = value.unwrap_or(default);
    if !(v > 0.0 && v <= 86_400.0) {
        bail!("config key `{key}`: must be a number of seconds in (0, 86400]");
    }
    Ok(Duration::from_secs_f64(v))
}

/// The CPUs this process may run on (respects `taskset` and cpusets).
pub fn affinity_cpus() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    ids
}

/// `"4"` → the first four allowed CPUs; `"0-3,6"` → exactly those CPUs.
pub fn parse_cores(spec: &str, allowed: &[usize]) -> anyhow::Result<Vec<usize>> {
    let spec = spec.trim();
    if !spec.contains(['-', ',']) {
        let n: usize = spec
            .parse()
            .with_context(|| format!("`{spec}` is neither a count nor a CPU list"))?;
        if n == 0 || n > allowed.len() {
            bail!(
                "count {n} must be between 1 and {} (CPUs in the affinity mask)",
                allowed.len()
            );
        }
        return Ok(allowed[..n].to_vec());
    }
    let mut cpus = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: usize = lo
            .parse()
            .with_context(|| format!("bad CPU number in `{part}`"))?;
        let hi: usize = hi
            .parse()
            .with_context(|| format!("bad CPU number in `{part}`"))?;
        if lo > hi {
            bail!("range `{part}` is backwards");
        }
        for cpu in lo..=hi {
            if !allowed.contains(&cpu) {
                bail!("CPU {cpu} is not in this process's affinity mask {allowed:?}");
            }
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_count_and_list() {
        let allowed = [0, 1, 2, 3, 6, 7];
        assert_eq!(parse_cores("2", &allowed).unwrap(), vec![0, 1]);
        assert_eq!(parse_cores("0-3,6", &allowed).unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cores("6,0-1,1", &allowed).unwrap(), vec![6, 0, 1]);
        assert!(parse_cores("0", &allowed).is_err());
        assert!(parse_cores("7", &allowed).is_err());
        assert!(parse_cores("4-5", &allowed).is_err());
        assert!(parse_cores("3-1", &allowed).is_err());
        assert!(parse_cores("x", &allowed).is_err());
    }

    #[test]
    fn flags_win_over_file() {
        let file: Settings =
            toml::from_str("backlog = 10\nmax_ranges = 3\nheader_timeout = 2").unwrap();
        let flags = Settings {
            backlog: Some(20),
            ..Settings::default()
        };
        let s = flags.overlay(file);
        assert_eq!(s.backlog, Some(20));
        assert_eq!(s.max_ranges, Some(3));
        assert_eq!(s.header_timeout, Some(2.0));
    }

    #[test]
    fn unknown_key_is_named() {
        let err = toml::from_str::<Settings>("bogus_key = 1").unwrap_err();
        assert!(err.to_string().contains("bogus_key"), "{err}");
    }

    #[test]
    fn cache_control_both_spellings() {
        let map: Settings = toml::from_str(
            "[cache_control]\n\"*.html\" = \"no-cache\"\n\"assets/**\" = \"immutable\"\n",
        )
        .unwrap();
        let rules = map.cache_control.unwrap().ordered();
        assert_eq!(rules[0].0, "assets/**");
        assert_eq!(rules[1].0, "*.html");
        let list: Settings = toml::from_str(
            "[[cache_control]]\nglob = \"*.html\"\nvalue = \"no-cache\"\n\
             [[cache_control]]\nglob = \"assets/**\"\nvalue = \"immutable\"\n",
        )
        .unwrap();
        let rules = list.cache_control.unwrap().ordered();
        assert_eq!(rules[0].0, "*.html");
    }

    #[test]
    fn live_content_keys_are_validated() {
        let base = || Settings {
            root: Some(PathBuf::from(".")),
            ..Settings::default()
        };
        let c = Config::validate(base(), &[0]).unwrap();
        assert!(c.watch && !c.spa_fallback);
        assert_eq!(c.watch_debounce, Duration::from_millis(50));
        assert_eq!(c.compress, Some(crate::cache::CompressOptions::default()));
        let bad: &[(&str, Settings)] = &[
            (
                "brotli_level",
                Settings {
                    brotli_level: Some(12),
                    ..base()
                },
            ),
            (
                "gzip_level",
                Settings {
                    gzip_level: Some(0),
                    ..base()
                },
            ),
            (
                "zstd_level",
                Settings {
                    zstd_level: Some(23),
                    ..base()
                },
            ),
            (
                "watch_debounce_ms",
                Settings {
                    watch_debounce_ms: Some(0),
                    ..base()
                },
            ),
            (
                "rescan_interval",
                Settings {
                    rescan_interval: Some(0.0),
                    ..base()
                },
            ),
            (
                "cache_control",
                Settings {
                    cache_control_default: Some("a\r\nb".into()),
                    ..base()
                },
            ),
        ];
        for (key, s) in bad {
            let err = Config::validate(s.clone(), &[0]).unwrap_err();
            assert!(format!("{err:#}").contains(key), "{key}: {err:#}");
        }
        let pages: Settings =
            toml::from_str("error_pages = { 404 = \"errors/404.html\" }").unwrap();
        let c = Config::validate(
            Settings {
                root: Some(PathBuf::from(".")),
                ..pages
            },
            &[0],
        )
        .unwrap();
        assert_eq!(c.error_pages, vec![(404, "errors/404.html".to_owned())]);
        for bad in [
            "error_pages = { 200 = \"a.html\" }",
            "error_pages = { 404 = \"../x.html\" }",
        ] {
            let s: Settings = toml::from_str(bad).unwrap();
            let s = Settings {
                root: Some(PathBuf::from(".")),
                ..s
            };
            assert!(Config::validate(s, &[0]).is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_names_the_key() {
        let s = Settings {
            root: Some(PathBuf::from(".")),
            max_uri_bytes: Some(100_000),
            ..Settings::default()
        };
        let err = Config::validate(s, &[0]).unwrap_err();
        assert!(format!("{err:#}").contains("max_uri_bytes"), "{err:#}");
    }
}
