//! The second stage of configuration: [`Settings`] (what the flags and the
//! file said) checked once into [`Config`], the validated values every other
//! module reads, checked by group (one function each); the CPU list is
//! resolved here too. The per-path site rules are in `site`, the logging
//! settings in `logs`, the TLS pairs and HTTPS headers in `tls`, the ACME
//! settings in `acme`, what the host allows (CPUs, memory, fds) in `host`.

use super::logs::{logs, request_id_header};
use super::site::site_rules;
use super::tls::{https, tls_settings};
use super::*;
pub use crate::metrics::access_log::LogFormat;

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file the settings came from, if any (logged at start).
    pub config_path: Option<PathBuf>,
    /// Where that file set each key, for errors found later (certificates).
    pub key_lines: Option<std::sync::Arc<super::KeyLines>>,
    /// Keys given as flags, which win over the file's: an error found
    /// later names the file's line only for a key the file decided.
    pub from_flags: BTreeSet<&'static str>,
    pub root: PathBuf,
    /// Every listen address, host names resolved.
    pub listen: Vec<SocketAddr>,
    /// CPU ids, one shard each.
    pub cpus: Vec<usize>,
    pub admin: SocketAddr,
    pub backlog: u32,
    pub steer: Steer,
    /// The shards' event source (`--io`).
    pub io: IoBackend,
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
    /// How long a draining shard keeps a connection between requests open
    /// for its next one (already capped at half of `shutdown_grace`).
    pub drain_idle_grace: Duration,
    /// What SIGUSR2 starts; `None`: this executable, resolved at start.
    pub upgrade_binary: Option<PathBuf>,
    pub upgrade_timeout: Duration,
    pub sendfile_threshold: u64,
    pub sendfile: bool,
    pub cache_max_bytes: u64,
    /// Which names starting with a dot are served.
    pub dotfile_allow: crate::cache::DotfileAllow,
    /// Directory index names, in the order tried.
    pub index_files: Vec<String>,
    /// Media type for unknown extensions.
    pub default_type: String,
    pub metrics: bool,
    pub access_log: Option<PathBuf>,
    pub access_log_format: LogFormat,
    /// The fields of a JSON access-log line, in order.
    pub access_log_fields: Vec<crate::metrics::access_log::Field>,
    /// Rebuild on changes under the root (inotify, else rescans).
    pub watch: bool,
    pub watch_debounce: Duration,
    pub rescan_interval: Duration,
    /// Longest a file still open for writing is held at its old version.
    pub write_settle_max: Duration,
    /// Fds kept open for large files (`cache::OpenFiles`).
    pub max_open_files: usize,
    /// Past this many files a start serves from disk while it loads.
    pub preload_max_files: u64,
    /// Files sent from disk up to this size get variants.
    pub compress_max_file_bytes: u64,
    /// `None`: no variants are built (sidecars are still used).
    pub compress: Option<crate::cache::CompressOptions>,
    pub cache_control: crate::cache::CacheControl,
    /// `Cache-Control` lines of error and redirect responses.
    pub status_cache_control: crate::cache::StatusCacheControl,
    /// Freshness cap (seconds) during a large root's fast start.
    pub fast_start_max_age: u64,
    /// Custom response headers by URL glob.
    pub headers: crate::cache::HeaderRules,
    /// Status code → page path relative to the root, `/`-separated.
    pub error_pages: Vec<(u16, String)>,
    pub spa_fallback: bool,
    /// TLS listeners and certificates; `None` without `tls_listen`.
    pub tls: Option<crate::tls::TlsSettings>,
    /// Automatic HTTPS; `None` without `acme_domains`.
    pub acme: Option<crate::acme::AcmeSettings>,
    /// Connections one shard holds at most before it pauses accepting.
    pub max_connections_per_core: usize,
    /// `Strict-Transport-Security` value for TLS responses.
    pub hsts: Option<String>,
    /// Cleartext listeners redirect to HTTPS.
    pub redirect_https: bool,
    /// HTTP/2 by ALPN on TLS listeners.
    pub h2: bool,
    /// HTTP/2 with prior knowledge on cleartext listeners.
    pub h2c: bool,
    /// Cleartext listeners speak nothing but h2c.
    pub h2c_only: bool,
    pub h2_max_concurrent_streams: u32,
    /// HTTP/3 over QUIC; `None` without `h3`.
    pub quic: Option<super::QuicSettings>,
    /// Listeners expect a PROXY protocol header first.
    pub proxy_protocol: bool,
    /// Peers whose PROXY header or `real_ip_header` is believed.
    pub trusted_proxies: Vec<crate::proto::proxy::Cidr>,
    /// The header naming the client behind an L7 balancer.
    pub real_ip_header: Option<String>,
    /// The request-id response header.
    pub request_id_header: Option<String>,
    /// `[[sites]]`, in file order; the top level is the default site.
    pub sites: Vec<super::SiteConfig>,
    /// Every site's names → its index (`sites[i]` is `i + 1`; the default
    /// site, 0, has none).
    pub site_names: crate::http::host::Names<u32>,
    pub unknown_host: super::UnknownHost,
}

/// How connections are spread over the shards' listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// The kernel's `SO_REUSEPORT` hash of the flow.
    Hash,
    /// The shard on the CPU whose softirq handled the SYN (a classic BPF
    /// program on each reuseport group; see `shard::steer`).
    Cpu,
}

/// The shards' event source (`--io`; see `shard::io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackend {
    /// io_uring when a ring can be set up and passes its self-check, else
    /// epoll.
    Auto,
    Epoll,
    Uring,
}

/// Longest accepted duration for timeouts and intervals.
const MAX_DURATION: Duration = Duration::from_secs(86_400);

impl Config {
    /// Merge flags over the config file (if any) and validate.
    pub fn load(flags: Settings) -> anyhow::Result<Config> {
        let file = match &flags.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        Config::validate(flags.overlay(file), &affinity_cpus())
    }

    /// Validate settings; every error names the flag or key it came from.
    /// `allowed` is the process's CPU affinity mask. Host names in
    /// addresses are resolved here.
    ///
    /// Checked by group, each one a function: logs, compression, site
    /// rules, TLS, the root, addresses and CPUs, the `Server` header,
    /// limits, timeouts.
    pub fn validate(s: Settings, allowed: &[usize]) -> anyhow::Result<Config> {
        let logs = logs(&s)?;
        let compress = compress_options(&s)?;
        let site = site_rules(&s)?;
        let mut tls = tls_settings(&s)?;
        let mut acme_names = Vec::new();
        let (sites, site_names) = super::sites::sites(&s, tls.as_mut(), &mut acme_names)?;
        let unknown_host = super::sites::unknown_host(&s)?;
        let acme = super::acme::acme_settings(&s, tls.as_mut(), &acme_names)?;
        let https = https(&s, tls.is_some())?;
        let root = root(&s)?;
        let net = addresses_and_cpus(&s, tls.as_ref(), allowed)?;
        let server_line = server_line(&s)?;
        let limits = limits(&s, net.cpus.len())?;
        let times = timeouts(&s)?;
        let (proxy_protocol, trusted_proxies, real_ip_header) = proxy_settings(&s)?;
        Ok(Config {
            key_lines: s.key_lines.clone(),
            from_flags: s.from_flags.clone(),
            config_path: s.config.clone(),
            header_timeout: times.header_timeout,
            keepalive_timeout: times.keepalive_timeout,
            write_timeout: times.write_timeout,
            shutdown_grace: times.shutdown_grace,
            drain_delay: times.drain_delay,
            drain_idle_grace: times.drain_idle_grace,
            upgrade_binary: s.upgrade_binary.clone(),
            upgrade_timeout: times.upgrade_timeout,
            rescan_interval: times.rescan_interval,
            root,
            listen: net.listen,
            cpus: net.cpus,
            admin: net.admin,
            backlog: net.backlog,
            steer: net.steer,
            io: match s.io.as_deref() {
                None | Some("auto") => IoBackend::Auto,
                Some("epoll") => IoBackend::Epoll,
                Some("uring") => IoBackend::Uring,
                Some(other) => bail!(
                    "{}: `{other}` is not one of `auto`, `epoll`, `uring`",
                    s.name("io")
                ),
            },
            server_line,
            max_requests_per_connection: limits.max_requests_per_connection,
            max_ranges: limits.max_ranges,
            max_head_bytes: limits.max_head_bytes,
            max_uri_bytes: limits.max_uri_bytes,
            max_discard_bytes: limits.max_discard_bytes,
            sendfile_threshold: limits.sendfile_threshold,
            sendfile: s.sendfile.unwrap_or(false),
            cache_max_bytes: limits.cache_max_bytes,
            dotfile_allow: site.dotfile_allow,
            index_files: site.index_files,
            default_type: site.default_type,
            metrics: s.metrics.unwrap_or(true),
            access_log: logs.access_log,
            access_log_format: logs.access_log_format,
            access_log_fields: logs.access_log_fields,
            watch: s.watch.unwrap_or(true),
            watch_debounce: times.watch_debounce,
            write_settle_max: times.write_settle_max,
            max_open_files: limits.max_open_files,
            preload_max_files: limits.preload_max_files,
            compress_max_file_bytes: limits.compress_max_file_bytes,
            compress,
            cache_control: site.cache_control,
            status_cache_control: site.status_cache_control,
            fast_start_max_age: times.fast_start_max_age,
            headers: site.headers,
            error_pages: site.error_pages,
            spa_fallback: s.spa_fallback.unwrap_or(false),
            max_connections_per_core: limits.max_connections_per_core,
            hsts: https.hsts,
            redirect_https: https.redirect_https,
            h2: s.h2.unwrap_or(true),
            h2c: s.h2c.unwrap_or(true),
            h2c_only: match (s.h2c.unwrap_or(true), s.h2c_only.unwrap_or(false)) {
                (false, true) => bail!(
                    "{} needs h2c: it is off ({})",
                    s.name("h2c_only"),
                    s.name("h2c")
                ),
                (_, only) => only,
            },
            h2_max_concurrent_streams: limits.h2_max_concurrent_streams,
            quic: super::tls::quic_settings(&s, tls.as_ref())?,
            proxy_protocol,
            trusted_proxies,
            real_ip_header,
            request_id_header: request_id_header(&s)?,
            tls,
            acme,
            sites,
            site_names,
            unknown_host,
        })
    }

    /// Where `key` was given, as validation's errors name it (``flag
    /// `--listen` ``, or ``config file F, line L: key `listen` ``), for an
    /// error found after validation (a bind, the root's permissions, the
    /// access log's directory); `None` for a default.
    pub fn origin(&self, key: &str) -> Option<String> {
        if self.from_flags.contains(key) {
            return Some(format!("flag `--{}`", key.replace('_', "-")));
        }
        let lines = self.key_lines.as_ref()?;
        lines.line_of(key).map(|_| lines.name(key))
    }

    pub fn build_options(&self) -> crate::cache::BuildOptions {
        crate::cache::BuildOptions {
            root: self.root.clone(),
            cache_max_bytes: self.cache_max_bytes,
            sendfile_threshold: self.sendfile_threshold,
            server_line: self.server_line.clone(),
            dotfile_allow: self.dotfile_allow.clone(),
            index_files: self.index_files.clone(),
            default_type: self.default_type.clone(),
            compress: self.compress,
            compress_configured: self.compress,
            fast_start_max_age: self.fast_start_max_age,
            headers: self.headers.clone(),
            status_cache_control: self.status_cache_control.clone(),
            cache_control: self.cache_control.clone(),
            error_pages: self.error_pages.clone(),
            spa_fallback: self.spa_fallback,
            open_files: std::sync::Arc::new(crate::cache::OpenFiles::new(self.max_open_files)),
            preload_max_files: self.preload_max_files,
            compress_max_file_bytes: self.compress_max_file_bytes,
            budget: None,
        }
    }

    pub fn watch_options(&self) -> crate::cache::watch::WatchOptions {
        crate::cache::watch::WatchOptions {
            debounce: self.watch_debounce,
            rescan_interval: self.rescan_interval,
            write_settle_max: self.write_settle_max,
        }
    }
}

/// `root`: a directory this user can reach.
pub(super) fn root(s: &Settings) -> anyhow::Result<PathBuf> {
    let root = s
        .root
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT));
    if s.root.is_none() && !root.is_dir() {
        return Err(no_root(s));
    }
    match std::fs::metadata(&root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!(
            "{}: {} is not a directory; point `root` at the directory that holds the site",
            s.name("root"),
            root.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{}: {} does not exist; create it, or point `root` at the site's directory",
            s.name("root"),
            root.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
            "{}: {} cannot be reached by this user (a parent directory is not searchable); \
             `chmod o+x` each parent, or run as a user that can",
            s.name("root"),
            root.display()
        ),
        Err(e) => bail!("{}: {}: {e}", s.name("root"), root.display()),
    }
    Ok(root)
}

/// No root was named and the default, the example site that `cargo run`
/// serves from a checkout, is not here (an installed binary): say how to
/// name one rather than that `examples/site` does not exist.
fn no_root(s: &Settings) -> anyhow::Error {
    let cwd = std::env::current_dir().map_or_else(|_| ".".to_owned(), |d| d.display().to_string());
    let default = format!(
        "without one it serves ./{DEFAULT_ROOT}, the example site of a source checkout, \
         and {cwd} has none"
    );
    match &s.config {
        Some(file) => anyhow::anyhow!(
            "config file {}: no `root` key: add one such as `root = \"/srv/www\"`, or pass \
             `--root DIR`; {default}",
            file.display()
        ),
        None => anyhow::anyhow!(
            "no document root: pass `--root DIR` (e.g. `--root /srv/www`), or `--config FILE` \
             with `root = \"DIR\"` in it; {default}"
        ),
    }
}

/// What [`addresses_and_cpus`] validates.
struct Addresses {
    listen: Vec<SocketAddr>,
    admin: SocketAddr,
    backlog: u32,
    steer: Steer,
    cpus: Vec<usize>,
}

/// `listen` and `admin` resolved, no two listeners on one port, and the
/// CPUs (one shard each) with how connections are spread over them.
fn addresses_and_cpus(
    s: &Settings,
    tls: Option<&crate::tls::TlsSettings>,
    allowed: &[usize],
) -> anyhow::Result<Addresses> {
    let listen = match &s.listen {
        Some(l) if l.is_empty() => {
            bail!("{}: at least one address is needed", s.name("listen"))
        }
        Some(l) => {
            let mut out: Vec<SocketAddr> = Vec::new();
            for a in l {
                for addr in a
                    .resolve()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", s.name("listen")))?
                {
                    if !out.contains(&addr) {
                        out.push(addr);
                    }
                }
            }
            out
        }
        None => vec![DEFAULT_LISTEN.parse().expect("valid default")],
    };
    let admin = match &s.admin {
        Some(a) => a
            .resolve()
            .map_err(|e| anyhow::anyhow!("{}: {e}", s.name("admin")))?[0],
        None => DEFAULT_ADMIN.parse().expect("valid default"),
    };
    let tls_listen: &[SocketAddr] = tls.map_or(&[], |t| t.listen.as_slice());
    if let Some(clash) = listen
        .iter()
        .chain(tls_listen)
        .find(|l| overlaps(**l, admin))
    {
        // With the default admin address, the listener that took its
        // port is the key that was set.
        let key = match (&s.admin, listen.contains(clash)) {
            (Some(_), _) => "admin",
            (None, true) => "listen",
            (None, false) => "tls_listen",
        };
        bail!(
            "{}: {admin} is the admin address and also a listen address ({clash}); \
             the admin listener needs its own port",
            s.name(key)
        );
    }
    // Shards share each port with SO_REUSEPORT, so the same port in both
    // lists would split connections between TLS and cleartext silently.
    for t in tls_listen {
        if let Some(clash) = listen.iter().find(|l| overlaps(**l, *t)) {
            bail!(
                "{}: {t} is also a cleartext listen address ({clash}); TLS needs its own port",
                s.name("tls_listen")
            );
        }
    }
    let cpus = match s.cores.as_deref() {
        None => allowed.to_vec(),
        Some(spec) => parse_cores(spec, allowed).with_context(|| s.name("cores"))?,
    };
    if cpus.is_empty() {
        bail!("{}: no CPU available", s.name("cores"));
    }
    Ok(Addresses {
        listen,
        admin,
        backlog: s.backlog.unwrap_or(DEFAULT_BACKLOG).max(1),
        steer: match s.steer.as_deref() {
            None | Some("hash") => Steer::Hash,
            Some("cpu") => Steer::Cpu,
            Some(other) => bail!("{}: `{other}` is not one of `hash`, `cpu`", s.name("steer")),
        },
        cpus,
    })
}

/// `server_header` rendered as its line (empty: no header).
fn server_line(s: &Settings) -> anyhow::Result<Vec<u8>> {
    let server = s
        .server_header
        .clone()
        .unwrap_or_else(|| DEFAULT_SERVER_HEADER.to_owned());
    if server.bytes().any(|b| b < 0x20 || b == 0x7f) {
        bail!(
            "{}: control characters are not allowed",
            s.name("server_header")
        );
    }
    Ok(if server.is_empty() {
        Vec::new()
    } else {
        format!("Server: {server}\r\n").into_bytes()
    })
}

/// What [`limits`] validates.
struct Limits {
    max_connections_per_core: usize,
    max_head_bytes: usize,
    max_uri_bytes: usize,
    max_requests_per_connection: u32,
    max_ranges: usize,
    max_discard_bytes: u64,
    sendfile_threshold: u64,
    cache_max_bytes: u64,
    max_open_files: usize,
    preload_max_files: u64,
    compress_max_file_bytes: u64,
    h2_max_concurrent_streams: u32,
}

/// Sizes and counts: connections per shard (by default from
/// `RLIMIT_NOFILE`, shared by `shards`), request limits, memory and fds.
fn limits(s: &Settings, shards: usize) -> anyhow::Result<Limits> {
    let max_connections_per_core = match s.max_connections_per_core {
        None => default_max_connections(
            crate::sys::nofile_limit(),
            s.max_open_files
                .unwrap_or(crate::cache::open_files::DEFAULT_MAX_OPEN_FILES),
            shards,
        ),
        Some(0) => bail!("{}: must be at least 1", s.name("max_connections_per_core")),
        Some(n) => n,
    };
    let max_head_bytes = s
        .max_head_bytes
        .map_or(DEFAULT_MAX_HEAD_BYTES as u64, |b| b.0);
    if !(256..=1024 * 1024).contains(&max_head_bytes) {
        bail!(
            "{}: must be between 256 and 1MiB (1048576)",
            s.name("max_head_bytes")
        );
    }
    let max_uri_bytes = s
        .max_uri_bytes
        .map_or(DEFAULT_MAX_URI_BYTES as u64, |b| b.0);
    if max_uri_bytes < 16 {
        bail!("{}: must be at least 16", s.name("max_uri_bytes"));
    }
    if max_uri_bytes >= max_head_bytes {
        // Name the one that was set: a lowered head limit with the
        // default URI limit is the head limit's error.
        let key = match (s.max_uri_bytes, s.max_head_bytes) {
            (None, Some(_)) => "max_head_bytes",
            _ => "max_uri_bytes",
        };
        bail!(
            "{}: max_uri_bytes ({max_uri_bytes}) must be below max_head_bytes \
             ({max_head_bytes}), or 414 could never be sent",
            s.name(key)
        );
    }
    let max_requests = s
        .max_requests_per_connection
        .unwrap_or(DEFAULT_MAX_REQUESTS_PER_CONNECTION);
    if max_requests == 0 {
        bail!(
            "{}: must be at least 1",
            s.name("max_requests_per_connection")
        );
    }
    let max_ranges = s.max_ranges.unwrap_or(DEFAULT_MAX_RANGES);
    if max_ranges == 0 {
        bail!("{}: must be at least 1", s.name("max_ranges"));
    }
    Ok(Limits {
        max_connections_per_core,
        max_head_bytes: max_head_bytes as usize,
        max_uri_bytes: max_uri_bytes as usize,
        max_requests_per_connection: max_requests,
        max_ranges,
        max_discard_bytes: s
            .max_discard_bytes
            .map_or(DEFAULT_MAX_DISCARD_BYTES, |b| b.0),
        sendfile_threshold: s
            .sendfile_threshold
            .map_or(DEFAULT_SENDFILE_THRESHOLD, |b| b.0)
            .max(1),
        cache_max_bytes: s
            .cache_max_bytes
            .map_or_else(|| default_cache_max_bytes(cgroup_memory_max()), |b| b.0),
        max_open_files: match s.max_open_files {
            None => crate::cache::open_files::DEFAULT_MAX_OPEN_FILES,
            Some(0) => bail!("{}: must be at least 1", s.name("max_open_files")),
            Some(n) => n,
        },
        preload_max_files: s
            .preload_max_files
            .unwrap_or(crate::cache::DEFAULT_PRELOAD_MAX_FILES),
        compress_max_file_bytes: s
            .compress_max_file_bytes
            .map_or(crate::cache::DEFAULT_COMPRESS_MAX_FILE_BYTES, |b| b.0),
        h2_max_concurrent_streams: match s.h2_max_concurrent_streams {
            Some(0) => bail!(
                "{}: must be at least 1",
                s.name("h2_max_concurrent_streams")
            ),
            v => v.unwrap_or(crate::proto::h2::DEFAULT_MAX_CONCURRENT_STREAMS),
        },
    })
}

/// What [`timeouts`] validates.
struct Timeouts {
    header_timeout: Duration,
    keepalive_timeout: Duration,
    write_timeout: Duration,
    shutdown_grace: Duration,
    drain_delay: Duration,
    drain_idle_grace: Duration,
    upgrade_timeout: Duration,
    rescan_interval: Duration,
    watch_debounce: Duration,
    write_settle_max: Duration,
    /// Seconds.
    fast_start_max_age: u64,
}

/// Timeouts and intervals, each more than 0 and at most [`MAX_DURATION`]
/// unless its own range says otherwise.
fn timeouts(s: &Settings) -> anyhow::Result<Timeouts> {
    let watch_debounce = s
        .watch_debounce_ms
        .map_or(DEFAULT_WATCH_DEBOUNCE, |d| d.value);
    if !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&watch_debounce) {
        bail!(
            "{}: must be between 1ms and 10s",
            s.name("watch_debounce_ms")
        );
    }
    let duration = |key: &'static str, v: Option<DurationValue<Secs>>, default: Duration| {
        let d = v.map_or(default, |d| d.value);
        if d.is_zero() || d > MAX_DURATION {
            bail!("{}: must be more than 0 and at most 24h", s.name(key));
        }
        Ok(d)
    };
    Ok(Timeouts {
        header_timeout: duration("header_timeout", s.header_timeout, DEFAULT_HEADER_TIMEOUT)?,
        keepalive_timeout: duration(
            "keepalive_timeout",
            s.keepalive_timeout,
            DEFAULT_KEEPALIVE_TIMEOUT,
        )?,
        write_timeout: duration("write_timeout", s.write_timeout, DEFAULT_WRITE_TIMEOUT)?,
        shutdown_grace: duration("shutdown_grace", s.shutdown_grace, DEFAULT_SHUTDOWN_GRACE)?,
        drain_delay: match s.drain_delay.map_or(Duration::ZERO, |d| d.value) {
            d if d <= MAX_DRAIN_DELAY => d,
            _ => bail!("{}: must be at most 1h", s.name("drain_delay")),
        },
        // Half the grace at most, so the lingering close that follows
        // has time to see the client's FIN before the hard deadline.
        drain_idle_grace: duration(
            "drain_idle_grace",
            s.drain_idle_grace,
            DEFAULT_DRAIN_IDLE_GRACE,
        )?
        .min(duration("shutdown_grace", s.shutdown_grace, DEFAULT_SHUTDOWN_GRACE)? / 2),
        upgrade_timeout: duration(
            "upgrade_timeout",
            s.upgrade_timeout,
            DEFAULT_UPGRADE_TIMEOUT,
        )?,
        rescan_interval: duration(
            "rescan_interval",
            s.rescan_interval,
            DEFAULT_RESCAN_INTERVAL,
        )?,
        watch_debounce,
        write_settle_max: duration(
            "write_settle_max",
            s.write_settle_max,
            DEFAULT_WRITE_SETTLE_MAX,
        )?,
        fast_start_max_age: duration(
            "fast_start_max_age",
            s.fast_start_max_age,
            DEFAULT_FAST_START_MAX_AGE,
        )?
        .as_secs(),
    })
}

/// `compress*` and the three levels, range-checked.
fn compress_options(s: &Settings) -> anyhow::Result<Option<crate::cache::CompressOptions>> {
    let d = crate::cache::CompressOptions::default();
    let opts = crate::cache::CompressOptions {
        min_bytes: s.compress_min_bytes.map_or(d.min_bytes, |b| b.0),
        brotli_level: s.brotli_level.unwrap_or(d.brotli_level),
        gzip_level: s.gzip_level.unwrap_or(d.gzip_level),
        zstd_level: s.zstd_level.unwrap_or(d.zstd_level),
        fast_above: s.compress_fast_above.map_or(d.fast_above, |b| b.0),
    };
    if opts.brotli_level > 11 {
        bail!(
            "{}: must be between 0 and 11 (11: smallest files, slowest build)",
            s.name("brotli_level")
        );
    }
    if !(1..=9).contains(&opts.gzip_level) {
        bail!(
            "{}: must be between 1 and 9 (9: smallest files, slowest build)",
            s.name("gzip_level")
        );
    }
    if !(1..=22).contains(&opts.zstd_level) {
        bail!(
            "{}: must be between 1 and 22 (19 and up: smallest files, slowest build)",
            s.name("zstd_level")
        );
    }
    Ok(s.compress.unwrap_or(true).then_some(opts))
}

/// Two addresses that cannot both be bound: the same port, and the same
/// IP or one of them the wildcard.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// `proxy_protocol`, `trusted_proxies` and `real_ip_header`. A PROXY
/// header or forwarded address is believed from listed peers only (nginx's
/// `set_real_ip_from`): either setting without `trusted_proxies` is an
/// error that says how to trust every peer, rather than a silent default
/// that lets any client choose the address it is logged under.
fn proxy_settings(
    s: &Settings,
) -> anyhow::Result<(bool, Vec<crate::proto::proxy::Cidr>, Option<String>)> {
    let trusted = s
        .trusted_proxies
        .iter()
        .flatten()
        .map(|c| {
            c.trim()
                .parse::<crate::proto::proxy::Cidr>()
                .map_err(|e| anyhow::anyhow!("{}: {e}", s.name("trusted_proxies")))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let proxy_protocol = s.proxy_protocol.unwrap_or(false);
    for (key, on) in [
        ("proxy_protocol", proxy_protocol),
        ("real_ip_header", s.real_ip_header.is_some()),
    ] {
        if on && trusted.is_empty() {
            bail!(
                "{}: needs `trusted_proxies`, the load balancers' addresses \
                 (e.g. [\"10.0.0.0/8\"]; [\"0.0.0.0/0\", \"::/0\"] trusts every peer)",
                s.name(key)
            );
        }
    }
    if let Some(name) = &s.real_ip_header {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            bail!(
                "{}: must be a header name such as `X-Forwarded-For`",
                s.name("real_ip_header")
            );
        }
    }
    Ok((proxy_protocol, trusted, s.real_ip_header.clone()))
}
