//! Settings: CLI flags and a TOML file name the same settings (flags win),
//! validated once into a [`Config`] that nothing downstream second-guesses.
//! Values with units and addresses are parsed by the types in [`units`].

mod acme;
mod help;
mod host;
mod locate;
mod logs;
pub use logs::log_options;
mod site;
mod sites;
pub use sites::{SiteConfig, SiteSettings, UnknownHost};
mod suggest;
mod tls;
pub use tls::{QuicSettings, DEFAULT_RETRY_ABOVE, DEFAULT_SOCKET_BUFFER};
pub mod units;
mod validate;
mod values;

pub use help::help_defaults;

pub use host::*;
pub use locate::KeyLines;

pub use suggest::suggest_flag;
pub use validate::*;
pub use values::{CacheControlRule, CacheControlRules, HeaderRule, TlsPair};

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{FromArgMatches, Parser};
use serde::Deserialize;

use suggest::{misplaced_in_table, operator_words};
use units::{format_duration, format_size, Address, DurationValue, Millis, Secs, Size};
use values::{error_cache_control_table, error_pages_table, one_or_many_strings};

/// Default document root: the bundled example site.
pub const DEFAULT_ROOT: &str = "examples/site";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9180";
/// Listen backlog; the kernel clamps it to `net.core.somaxconn`.
pub const DEFAULT_BACKLOG: u32 = 4096;
/// Longest `request_id_header` name accepted.
pub const REQUEST_ID_NAME_MAX: usize = 64;
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
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// nginx's `send_timeout`: a reader that takes nothing for this long is dropped.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a draining shard keeps a keep-alive connection that is between
/// requests open for its next request (answered with `Connection: close`)
/// before it parts with a lingering close. A client in the middle of a
/// sequence of requests sends the next one within a round trip (plus its
/// own processing) of the last response; 1 s covers WAN round trips (tens to
/// hundreds of milliseconds) with room to spare, and a connection silent
/// for longer is idle. Measured with wrk across upgrades: back to back,
/// every connection's next request came within 51 ms of the drain; with
/// 100–900 ms pauses between requests, all came within the grace (timer
/// ticks are 250 ms, so the grace ends 1–1.25 s after the drain starts).
pub const DEFAULT_DRAIN_IDLE_GRACE: Duration = Duration::from_secs(1);
/// Longest `drain_delay`: endpoint removal takes seconds, not hours.
pub const MAX_DRAIN_DELAY: Duration = Duration::from_secs(3600);
/// How long the new process of a SIGUSR2 upgrade has to say it is ready
/// (its snapshot built, every shard in its loop) before the old one gives up.
pub const DEFAULT_UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);
/// Files at least this large are sent with `sendfile` from an fd.
pub const DEFAULT_SENDFILE_THRESHOLD: u64 = 1024 * 1024;
/// Memory for bodies held in the snapshot (lowered under a cgroup memory
/// limit: [`default_cache_max_bytes`]).
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
pub const DEFAULT_SERVER_HEADER: &str = "shardhttpd";
/// Quiet time after a change under the root before the snapshot is rebuilt:
/// long enough to batch a deploy's burst of events, short enough to show
/// changes well within a second.
pub const DEFAULT_WATCH_DEBOUNCE: Duration = Duration::from_millis(50);
/// Rescan period without inotify, and retry period after a failed rebuild.
pub const DEFAULT_RESCAN_INTERVAL: Duration = Duration::from_secs(2);
/// A file written in place is published once its writer closes it, or
/// after this long without a close (a log-like file never closes).
pub const DEFAULT_WRITE_SETTLE_MAX: Duration = Duration::from_secs(10);
/// Freshness cap for compressible files served before their variants exist:
/// long enough that a CDN does not revalidate on every request during a
/// large root's first minutes, short enough that it soon stores the
/// compressed variants instead of the identity body.
pub const DEFAULT_FAST_START_MAX_AGE: Duration = Duration::from_secs(60);
/// The type of files whose extension names no known type (RFC 9110 §8.3:
/// unknown data is octet-stream).
pub const DEFAULT_TYPE: &str = "application/octet-stream";
pub const DEFAULT_INDEX_FILES: &[&str] = &["index.html"];

/// Exit status for a configuration or environment error found before
/// serving (bad key or flag, unusable root, address in use, missing
/// permission). Clap's own usage errors use it too.
pub const EXIT_CONFIG: u8 = 2;

/// What `--help` says after the options.
const AFTER_HELP: &str = "\
Durations take units (\"500ms\", \"60s\", \"1m\", \"1h\"); sizes take \"64KiB\",
\"1MiB\", \"1GiB\". A bare number keeps the unit in the option's name or help.

Every option but --config and --check is also a key of the config file, with
`_` for `-`; a flag overrides the file. Keys of the file only: cache_control,
error_cache_control, error_pages, headers, sites, tls_certificates (README,
\"Configuration\"; `[[sites]]`: README, \"Sites\").

Exit status:
  0  stopped cleanly (SIGTERM/SIGINT), or --check found nothing wrong
  1  a fatal error while serving
  2  a configuration or environment error found before serving: a bad flag,
     key or value, an unusable root or access-log path, an address already in
     use or needing a capability (ports below 1024: CAP_NET_BIND_SERVICE)

Signals: SIGHUP reloads the configuration (a changed, valid file is applied
by handover to a new process; a bad edit is refused and logged; unchanged:
the snapshot is rebuilt), SIGUSR1 reopens the access log, SIGUSR2 upgrades
the binary by handing the listening sockets to a new process, SIGTERM/SIGINT
drain and exit.

systemd socket activation: sockets passed in LISTEN_FDS serve the configured
listen, tls_listen or admin address they are bound to; one that no configured
address names refuses the start (exit status 2).";

/// Every setting, as given by flags or by the file; `None` means "not given".
/// Flag names are the kebab-case of the TOML keys. Each option's default is
/// added to its help by [`Settings::command`] from [`help_defaults`].
#[derive(Debug, Default, Clone, Parser, Deserialize)]
#[command(
    name = "shardhttpd",
    version,
    about = "Per-core sharded static-file HTTP server",
    after_help = AFTER_HELP
)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// TOML config file; flags override its keys.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Check the configuration and the environment (root readable, addresses
    /// free and permitted, access log writable) without serving, then exit.
    #[arg(long)]
    #[serde(skip)]
    pub check: bool,
    /// Keys given on the command line (filled by [`Settings::overlay`]), so an
    /// error names the flag the operator typed rather than the file key.
    #[arg(skip)]
    #[serde(skip)]
    pub from_flags: BTreeSet<&'static str>,
    /// Where the config file set each key (filled by
    /// [`Settings::from_file`]), so an error names the file and line.
    #[arg(skip)]
    #[serde(skip)]
    pub key_lines: Option<std::sync::Arc<KeyLines>>,
    /// Before every key an error names: `sites[1].` for a site's settings.
    #[arg(skip)]
    #[serde(skip)]
    pub key_prefix: String,

    /// Document root.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Address to listen on (`host:port`, e.g. `0.0.0.0:80`, `[::]:80`,
    /// `localhost:8080`); repeat for several. Port 0 picks one. In the file:
    /// one string or a list.
    #[arg(long, value_name = "ADDR")]
    #[serde(default, deserialize_with = "units::string_or_list")]
    pub listen: Option<Vec<Address>>,
    /// CPUs to run shards on: a count (`4`) or a list (`0-3,6`).
    #[arg(long, value_name = "SPEC")]
    #[serde(default, deserialize_with = "values::count_or_cpu_list")]
    pub cores: Option<String>,
    /// Admin listener (metrics, health, status).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<Address>,
    /// Listen backlog per shard socket.
    #[arg(long, value_name = "N")]
    pub backlog: Option<u32>,
    /// Which shard accepts a connection: `hash` (the kernel's reuseport flow
    /// hash) or `cpu` (the shard on the CPU that handled its SYN).
    #[arg(long, value_name = "hash|cpu")]
    pub steer: Option<String>,
    /// The shards' event source: `uring` (io_uring, one ring per shard:
    /// multishot accept polls, multishot receives into a shared buffer
    /// ring and sends, submitted and reaped by one `io_uring_enter` per
    /// loop turn), `epoll`, or `auto`: io_uring when a ring sets up with
    /// what the loop needs and passes a self-check, else epoll (as under a
    /// container's seccomp profile, where `io_uring_setup` fails with
    /// EPERM). A forced `uring` that cannot be had fails the start.
    #[arg(long, value_name = "auto|epoll|uring")]
    pub io: Option<String>,
    /// `Server` header value; empty turns it off.
    #[arg(long, value_name = "STR")]
    pub server_header: Option<String>,
    /// Requests served on one connection before `Connection: close`.
    #[arg(long, value_name = "N")]
    pub max_requests_per_connection: Option<u32>,
    /// Most ranges honoured in one request before answering 200 (ranges
    /// that add up to more than the file get 200 too).
    #[arg(long, value_name = "N")]
    pub max_ranges: Option<usize>,
    /// Largest request head (431 beyond).
    #[arg(long, value_name = "SIZE")]
    pub max_head_bytes: Option<Size>,
    /// Longest request target (414 beyond).
    #[arg(long, value_name = "SIZE")]
    pub max_uri_bytes: Option<Size>,
    /// Largest request body that is read and discarded: a larger
    /// Content-Length is a 413; a chunked body (its bytes on the wire)
    /// that grows past it closes the connection after the answer.
    #[arg(long, value_name = "SIZE")]
    pub max_discard_bytes: Option<Size>,
    /// Time to receive a whole request head (408 beyond); bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub header_timeout: Option<DurationValue<Secs>>,
    /// How long an idle keep-alive connection is kept; bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub keepalive_timeout: Option<DurationValue<Secs>>,
    /// How long a response may make no progress before the connection is
    /// dropped; bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub write_timeout: Option<DurationValue<Secs>>,
    /// Time to finish in-flight responses on SIGTERM/SIGINT; bare number:
    /// seconds.
    #[arg(long, value_name = "DURATION")]
    pub shutdown_grace: Option<DurationValue<Secs>>,
    /// After SIGTERM, keep accepting and serving this long while /readyz
    /// already fails, so load balancers stop routing here first; every
    /// response meanwhile says `Connection: close`, so keep-alive clients
    /// move too; bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub drain_delay: Option<DurationValue<Secs>>,
    /// While draining (SIGTERM, or after a SIGUSR2 handover), how long a
    /// keep-alive connection between requests is kept for its next request,
    /// which is answered with `Connection: close`; a connection silent that
    /// long is then closed without losing a request in flight (write side
    /// first, then what arrives is read and dropped). At most half of
    /// shutdown_grace; bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub drain_idle_grace: Option<DurationValue<Secs>>,
    /// Binary started by SIGUSR2 (default: this executable's path as
    /// resolved at start, so a binary replaced on disk is the one started).
    #[arg(long, value_name = "PATH")]
    pub upgrade_binary: Option<PathBuf>,
    /// How long the new process of a SIGUSR2 upgrade has to become ready;
    /// bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub upgrade_timeout: Option<DurationValue<Secs>>,
    /// Files at least this large are sent from their fd, not memory.
    #[arg(long, value_name = "SIZE")]
    pub sendfile_threshold: Option<Size>,
    /// Send those files zero-copy with sendfile. Safe only when files are
    /// replaced by rename, never rewritten in place; off by default, when
    /// they go through a verified copy instead.
    #[arg(long, value_name = "BOOL")]
    pub sendfile: Option<bool>,
    /// Memory for bodies held in the snapshot.
    #[arg(long, value_name = "SIZE")]
    pub cache_max_bytes: Option<Size>,
    /// Serve every file and directory whose name starts with a dot
    /// (deprecated: `--dotfile-allow` names the ones to serve).
    #[arg(long, value_name = "BOOL")]
    pub serve_dotfiles: Option<bool>,
    /// Names starting with a dot that are served, as globs; repeat for
    /// several. A pattern without `/` matches the name at any depth, one
    /// with `/` the path from the root.
    #[arg(long, value_name = "GLOB")]
    pub dotfile_allow: Option<Vec<String>>,
    /// Directory index files, tried in order; repeat for several.
    #[arg(long, value_name = "NAME")]
    pub index_files: Option<Vec<String>>,
    /// Content-Type of files whose extension has no known type.
    #[arg(long, value_name = "TYPE")]
    pub default_type: Option<String>,
    /// Count requests into Prometheus metrics.
    #[arg(long, value_name = "BOOL")]
    pub metrics: Option<bool>,
    /// Access log file; its directory must exist.
    #[arg(long, value_name = "PATH")]
    pub access_log: Option<PathBuf>,
    /// Access log format: `combined` (nginx's, byte for byte, as goaccess
    /// and other log tools read it), `combined_timed` (combined, then
    /// `"$host" $request_time_us "$request_id" $msec`), or `json` (one
    /// object a line, fields chosen by `access_log_fields`).
    #[arg(long, value_name = "FORMAT")]
    pub access_log_format: Option<String>,
    /// The fields of a `json` access-log line, in order (a list in the
    /// file; comma-separated or repeated as a flag): `time` (UTC, with
    /// milliseconds), `remote_addr`, `method`, `uri`, `protocol`, `status`,
    /// `bytes`, `referer`, `user_agent`, `tls_version`, `tls_cipher`,
    /// `host` (`Host`, or `:authority` on HTTP/2), `request_time_us` (from
    /// the request's first byte, or its HEADERS frame, to the response
    /// queued), `request_id`.
    #[arg(long, value_name = "FIELD", value_delimiter = ',')]
    pub access_log_fields: Option<Vec<String>>,
    /// Error log (stderr) format: `text`, or `json` (one object a line:
    /// timestamp, level, pid, target, message and the event's fields).
    /// Configuration errors before the start use it too.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Error log level: `error`, `warn`, `info`, `debug`, `trace`, or
    /// directives such as `info,shardhttpd::cache=debug`. Over the file's
    /// `log_level`; `RUST_LOG` applies only when neither names a level.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Rebuild the snapshot when files under the root change.
    #[arg(long, value_name = "BOOL")]
    pub watch: Option<bool>,
    /// Quiet time after a change before a rebuild starts; bare number:
    /// milliseconds.
    #[arg(long, value_name = "DURATION")]
    pub watch_debounce_ms: Option<DurationValue<Millis>>,
    /// Time between rescans when inotify is unavailable, and before retrying
    /// a failed rebuild; bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub rescan_interval: Option<DurationValue<Secs>>,
    /// How long a file written in place (IN_MODIFY without IN_CLOSE_WRITE)
    /// is kept at its previous version before it is published anyway; bare
    /// number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub write_settle_max: Option<DurationValue<Secs>>,
    /// Most fds kept open for files sent from disk (opened on demand, LRU).
    #[arg(long, value_name = "N")]
    pub max_open_files: Option<usize>,
    /// A root with more files than this starts serving them from disk as
    /// soon as it is walked, and reads them into memory in the background
    /// (0: every root starts that way).
    #[arg(long, value_name = "N")]
    pub preload_max_files: Option<u64>,
    /// Build brotli, zstd and gzip variants of compressible files.
    #[arg(long, value_name = "BOOL")]
    pub compress: Option<bool>,
    /// Smallest file that is compressed.
    #[arg(long, value_name = "SIZE")]
    pub compress_min_bytes: Option<Size>,
    /// brotli quality, 0-11.
    #[arg(long, value_name = "N")]
    pub brotli_level: Option<u32>,
    /// gzip level, 1-9.
    #[arg(long, value_name = "N")]
    pub gzip_level: Option<u32>,
    /// zstd level, 1-22.
    #[arg(long, value_name = "N")]
    pub zstd_level: Option<i32>,
    /// Files sent from disk (at least `sendfile_threshold`) up to this size
    /// are compressed too (at the fast levels at most), and their
    /// precompressed sidecars used; larger ones always go as identity.
    #[arg(long, value_name = "SIZE")]
    pub compress_max_file_bytes: Option<Size>,
    /// Roots holding more in-memory body bytes than this are compressed at
    /// the fast levels (brotli 5, gzip 6, zstd 9) so their variants are
    /// ready in minutes rather than hours; `0` never does.
    #[arg(long, value_name = "SIZE")]
    pub compress_fast_above: Option<Size>,
    /// `Cache-Control` by URL glob (config file only): a table
    /// `{ "*.html" = "no-cache" }` (longest glob wins) or an array of
    /// `{ glob, value }` tables (first match wins).
    #[arg(skip)]
    pub cache_control: Option<CacheControlRules>,
    /// `Cache-Control` for files no rule matches.
    #[arg(long, value_name = "VALUE")]
    pub cache_control_default: Option<String>,
    /// `Cache-Control` of error responses by status or class (config file
    /// only), e.g. `{ 404 = "public, max-age=10", "5xx" = "no-store" }`.
    /// Only 403, 404, 500, 503, `4xx` and `5xx`. Default: none.
    #[arg(skip)]
    #[serde(default, deserialize_with = "error_cache_control_table")]
    pub error_cache_control: Option<BTreeMap<String, String>>,
    /// `Cache-Control` of the 301 from `/dir` to `/dir/`.
    #[arg(long, value_name = "VALUE")]
    pub redirect_cache_control: Option<String>,
    /// Freshness at most for compressible files served before their
    /// compressed variants are built (a large root's fast start); bare
    /// number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub fast_start_max_age: Option<DurationValue<Secs>>,
    /// Custom response headers by URL glob (config file only): an array of
    /// `{ glob, set = { Name = "value" } }` tables; every matching rule
    /// applies, a later one's value for a name wins.
    #[arg(skip)]
    pub headers: Option<Vec<HeaderRule>>,
    /// Error status → page relative to the root (config file only), e.g.
    /// `{ 404 = "404.html" }`. Default: `404.html` when the root has one.
    #[arg(skip)]
    #[serde(default, deserialize_with = "error_pages_table")]
    pub error_pages: Option<BTreeMap<String, String>>,
    /// Serve `/index.html` (200) for unknown paths without an extension.
    #[arg(long, value_name = "BOOL")]
    pub spa_fallback: Option<bool>,
    /// Virtual hosts (config file only): `[[sites]]` tables of `names`
    /// (exact and `*.` wildcards), `root`, their own response rules and
    /// certificates (README, "Sites"). The top level is the default site.
    #[arg(skip)]
    pub sites: Option<Vec<SiteSettings>>,
    /// What a request for a name no site claims gets: `default` (the
    /// default site answers), `421` (Misdirected Request) or `404`.
    #[arg(long, value_name = "POLICY")]
    pub unknown_host: Option<String>,
    /// Address to serve HTTPS on; repeat for several. Needs a certificate
    /// (`--tls-cert`/`--tls-key` or `[[tls_certificates]]`).
    #[arg(long, value_name = "ADDR")]
    #[serde(default, deserialize_with = "units::string_or_list")]
    pub tls_listen: Option<Vec<Address>>,
    /// PEM certificate chain (leaf first) for the TLS listeners.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert` (RSA, ECDSA P-256/P-384 or Ed25519).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// More certificate/key pairs chosen by SNI from their subjectAltNames
    /// (config file only): `[[tls_certificates]]` tables of `cert`, `key`.
    #[arg(skip)]
    pub tls_certificates: Option<Vec<TlsPair>>,
    /// Session-ticket keys shared by replicas: 1 to 4 keys of exactly 32
    /// random bytes, concatenated; the first seals, all open. Rotate it
    /// (prepend a new key, drop the oldest, replace by rename); it is
    /// reread on change. Default: a random key per 6 h period, forgotten
    /// after the next.
    #[arg(long, value_name = "FILE")]
    pub tls_ticket_key_file: Option<PathBuf>,
    /// Most open connections per shard; past it a shard stops accepting
    /// (connections wait in the kernel's queue) until one closes.
    #[arg(long, value_name = "N")]
    pub max_connections_per_core: Option<usize>,
    /// `Strict-Transport-Security` value added to successful TLS responses,
    /// e.g. `max-age=31536000; includeSubDomains` (a `[[headers]]` rule's
    /// value replaces it for the files the rule matches).
    #[arg(long, value_name = "VALUE")]
    pub hsts: Option<String>,
    /// Cleartext listeners answer every request with a 301 to the same host
    /// and path over HTTPS (on the first `tls_listen` port).
    #[arg(long, value_name = "BOOL")]
    pub redirect_https: Option<bool>,
    /// HTTP/2 over TLS: TLS listeners offer ALPN `h2` before `http/1.1`.
    #[arg(long, value_name = "BOOL")]
    pub h2: Option<bool>,
    /// HTTP/2 over cleartext with prior knowledge (h2c): cleartext
    /// listeners take a connection that opens with the HTTP/2 client
    /// preface as HTTP/2 (no `Upgrade: h2c`, which RFC 9113 dropped).
    #[arg(long, value_name = "BOOL")]
    pub h2c: Option<bool>,
    /// Cleartext listeners speak only h2c: every connection is HTTP/2
    /// with prior knowledge, and one that does not open with the client
    /// preface gets GOAWAY PROTOCOL_ERROR instead of an HTTP/1 answer (an
    /// origin port for a CDN or load balancer that speaks h2c). Needs h2c.
    #[arg(long, value_name = "BOOL")]
    pub h2c_only: Option<bool>,
    /// Most concurrent streams per HTTP/2 connection
    /// (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with
    /// REFUSED_STREAM.
    #[arg(long, value_name = "N")]
    pub h2_max_concurrent_streams: Option<u32>,
    /// HTTP/3 over QUIC on UDP: one socket per shard on each `tls_listen`
    /// address (or `quic_listen`), with the TLS certificates; TLS
    /// responses advertise it with `Alt-Svc` (README, "HTTP/3").
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub h3: Option<bool>,
    /// UDP addresses for HTTP/3 instead of the `tls_listen` addresses;
    /// repeat for several. Needs h3.
    #[arg(long, value_name = "ADDR")]
    #[serde(default, deserialize_with = "units::string_or_list")]
    pub quic_listen: Option<Vec<Address>>,
    /// Every new QUIC connection proves its address with a stateless Retry
    /// first (one more round trip). Without it, Retry is used only while a
    /// shard sees more than `quic_retry_above` handshakes a second.
    #[arg(long, value_name = "BOOL")]
    pub quic_retry: Option<bool>,
    /// New QUIC handshakes a second, per shard, above which new
    /// connections must pass a stateless Retry (an address-spoofing flood
    /// then costs a packet, not a handshake).
    #[arg(long, value_name = "N")]
    pub quic_retry_above: Option<u32>,
    /// The send and the receive buffer each QUIC socket asks the kernel
    /// for (capped by `net.core.wmem_max` and `rmem_max`): room for
    /// bursts to and from many clients.
    #[arg(long, value_name = "SIZE")]
    pub quic_socket_buffer: Option<Size>,
    /// Segmentation offload on the QUIC sockets: up to 40 datagrams of a
    /// connection in one send (GSO) and a flow's datagrams in one receive
    /// (GRO). Off: one datagram per send and per receive, for a NIC or
    /// tunnel that mishandles them (nginx's `quic_gso`).
    #[arg(long, value_name = "BOOL")]
    pub quic_gso: Option<bool>,
    /// Every listener (cleartext and TLS) expects a PROXY protocol header
    /// (v1 or v2, as HAProxy `send-proxy`, AWS NLB and ingress controllers
    /// send it) before anything else, and logs the client address it
    /// carries. A connection without a valid header within
    /// `header_timeout`, or from a peer outside `trusted_proxies`, is
    /// closed. Needs `trusted_proxies`.
    #[arg(long, value_name = "BOOL")]
    pub proxy_protocol: Option<bool>,
    /// Addresses of the load balancers whose PROXY header or
    /// `real_ip_header` is believed, as CIDRs (`10.0.0.0/8`, `::1/128`) or
    /// addresses; repeat for several. `0.0.0.0/0` and `::/0` trust any peer.
    #[arg(long, value_name = "CIDR")]
    pub trusted_proxies: Option<Vec<String>>,
    /// Request header carrying the client address from an L7 balancer,
    /// e.g. `X-Forwarded-For`: for requests from `trusted_proxies`, the
    /// rightmost address in it that is not trusted is the client's (nginx's
    /// `real_ip_recursive on`). Needs `trusted_proxies`.
    #[arg(long, value_name = "NAME")]
    pub real_ip_header: Option<String>,
    /// Response header carrying a request id, e.g. `X-Request-Id`, on
    /// every response (errors included) and in the access log: the one a
    /// peer in `trusted_proxies` sent is kept, any other request gets a new
    /// one (32 hex digits, as nginx's `$request_id`).
    #[arg(long, value_name = "NAME")]
    pub request_id_header: Option<String>,
    /// Automatic HTTPS (ACME, RFC 8555): names to obtain and renew a
    /// certificate for, one certificate each; repeat for several. Needs
    /// `tls_listen`; no wildcards (they need DNS-01).
    #[arg(long, value_name = "NAME")]
    #[serde(default, deserialize_with = "one_or_many_strings")]
    pub acme_domains: Option<Vec<String>>,
    /// Contact address given to the ACME CA for expiry and policy mail.
    #[arg(long, value_name = "ADDRESS")]
    pub acme_email: Option<String>,
    /// ACME directory URL. Let's Encrypt's staging CA, for trying a setup
    /// without its rate limits, is
    /// `https://acme-staging-v02.api.letsencrypt.org/directory`.
    #[arg(long, value_name = "URL")]
    pub acme_directory: Option<String>,
    /// PEM file of the root certificates that the ACME directory's HTTPS is
    /// checked against instead of the bundled Mozilla roots (a private CA,
    /// a test CA).
    #[arg(long, value_name = "FILE")]
    pub acme_ca_roots: Option<PathBuf>,
    /// Where the ACME account key, the certificates and the lock file live
    /// (a directory of this user's, mode 0700; see SECURITY.md).
    #[arg(long, value_name = "DIR")]
    pub acme_state_dir: Option<PathBuf>,
    /// How the CA checks control of a name: `tls-alpn-01` (on the TLS
    /// listener, which must be port 443 for a public CA) or `http-01` (on a
    /// cleartext listener, port 80 for a public CA).
    #[arg(long, value_name = "TYPE")]
    pub acme_challenge: Option<String>,
    /// External Account Binding key id, for CAs that need one (ZeroSSL,
    /// Google Trust Services, many private CAs); with `acme_eab_hmac_key`.
    #[arg(long, value_name = "KID")]
    pub acme_eab_kid: Option<String>,
    /// External Account Binding HMAC key, base64url as the CA gives it.
    #[arg(long, value_name = "KEY")]
    pub acme_eab_hmac_key: Option<String>,
    /// First wait after a failed ACME order; each further failure doubles
    /// it (with ±25% jitter) up to 6 h. Bare number: seconds.
    #[arg(long, value_name = "DURATION")]
    pub acme_retry_min: Option<DurationValue<Secs>>,
}

/// Field-by-field "flag if given, else file", remembering which keys came
/// from flags.
macro_rules! overlay {
    ($flags:ident, $file:ident; $($field:ident),* $(,)?) => {{
        let mut from_flags = BTreeSet::new();
        $(if $flags.$field.is_some() { from_flags.insert(stringify!($field)); })*
        Settings {
            config: $flags.config,
            check: $flags.check,
            from_flags,
            key_lines: $file.key_lines,
            key_prefix: String::new(),
            $($field: $flags.$field.or($file.$field),)*
        }
    }};
}

impl Settings {
    /// The clap command with every default in the help.
    pub fn command() -> clap::Command {
        let defaults = help_defaults();
        let mut cmd = Settings::command_raw();
        for (id, default) in defaults {
            cmd = cmd.mut_arg(id, |a| {
                let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                a.help(format!("{help} [default: {default}]"))
            });
        }
        cmd
    }

    fn command_raw() -> clap::Command {
        <Settings as clap::CommandFactory>::command()
    }

    /// Parse the process's arguments. The error is clap's (`--help` and
    /// `--version` come this way too), with the nearest flag as a tip;
    /// its usage errors exit with [`EXIT_CONFIG`].
    pub fn from_args() -> Result<Settings, clap::Error> {
        let matches = Settings::command()
            .try_get_matches()
            .map_err(suggest_flag)?;
        Settings::from_arg_matches(&matches)
    }

    /// Whether `args` (without the program name) ask for `--log-format
    /// json`, read without clap: for a command line that clap refuses,
    /// whose error should still come out as a JSON line.
    pub fn json_log_requested(args: &[std::ffi::OsString]) -> bool {
        let mut args = args.iter().map(|a| a.to_str().unwrap_or_default());
        let mut json = false;
        while let Some(arg) = args.next() {
            if arg == "--" {
                break;
            }
            let value = match arg.strip_prefix("--log-format") {
                Some("") => args.next(),
                Some(rest) => rest.strip_prefix('='),
                None => continue,
            };
            // The last one given wins, as clap would have it.
            json = value == Some("json");
        }
        json
    }

    /// A clap error as one line for a log: its `error:` and `tip:` lines,
    /// without the usage and help pointers that a terminal reader gets.
    pub fn usage_error_line(e: &clap::Error) -> String {
        let rendered = e.render().to_string();
        let lines: Vec<&str> = rendered
            .lines()
            .map(str::trim)
            .filter_map(|l| {
                l.strip_prefix("error: ")
                    .or_else(|| l.starts_with("tip: ").then_some(l))
            })
            .collect();
        if lines.is_empty() {
            rendered.trim().to_owned()
        } else {
            format!("command line: {}", lines.join("; "))
        }
    }

    /// Parse `args` (without the program name) as the command line; a
    /// reload reads the process's own arguments again this way.
    pub fn try_from_args(args: &[std::ffi::OsString]) -> Result<Settings, clap::Error> {
        let argv =
            std::iter::once(std::ffi::OsString::from("shardhttpd")).chain(args.iter().cloned());
        let matches = Settings::command().try_get_matches_from(argv)?;
        Settings::from_arg_matches(&matches)
    }

    /// Flags in `self` win over the same keys in `file`.
    pub fn overlay(self, file: Settings) -> Settings {
        let flags = self;
        overlay!(flags, file;
            root, listen, cores, admin, backlog, steer, io, server_header,
            max_requests_per_connection, max_ranges, max_head_bytes, max_uri_bytes,
            max_discard_bytes, header_timeout, keepalive_timeout, write_timeout,
            shutdown_grace, drain_delay, drain_idle_grace, upgrade_binary, upgrade_timeout, sendfile_threshold, sendfile, cache_max_bytes, serve_dotfiles,
            metrics, access_log, access_log_format, access_log_fields, log_format, log_level,
            watch, watch_debounce_ms, rescan_interval, write_settle_max, max_open_files,
            preload_max_files, compress, compress_min_bytes,
            brotli_level, gzip_level, zstd_level, compress_fast_above, compress_max_file_bytes, cache_control, cache_control_default,
            error_pages, spa_fallback, sites, unknown_host, dotfile_allow, index_files, default_type,
            error_cache_control, redirect_cache_control, fast_start_max_age, headers,
            tls_listen, tls_cert, tls_key, tls_certificates, tls_ticket_key_file,
            max_connections_per_core, hsts, redirect_https, h2, h2c, h2c_only, h2_max_concurrent_streams,
            h3, quic_listen, quic_retry, quic_retry_above, quic_socket_buffer, quic_gso,
            proxy_protocol, trusted_proxies, real_ip_header, request_id_header,
            acme_domains, acme_email, acme_directory, acme_ca_roots, acme_state_dir,
            acme_challenge, acme_eab_kid, acme_eab_hmac_key, acme_retry_min,
        )
    }

    /// How an error names `key`: the flag when it was given as one, else
    /// the file key.
    pub fn name(&self, key: &'static str) -> String {
        if self.from_flags.contains(key) {
            format!("flag `--{}`", key.replace('_', "-"))
        } else {
            self.name_path(key)
        }
    }

    /// How an error names a part of a file-only table key, such as
    /// `headers[1].set.X-Bad`: by file and line when a file sets it.
    pub fn name_path(&self, path: &str) -> String {
        let path = format!("{}{path}", self.key_prefix);
        match &self.key_lines {
            Some(lines) => lines.name(&path),
            None => format!("config key `{path}`"),
        }
    }

    /// Read a TOML file into settings. Errors name the file, the line and
    /// the key, in an operator's words rather than the parser's.
    pub fn from_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let what = match e.kind() {
                std::io::ErrorKind::NotFound => "does not exist".to_owned(),
                std::io::ErrorKind::PermissionDenied => "is not readable by this user".to_owned(),
                _ => format!("cannot be read: {e}"),
            };
            anyhow::anyhow!("config file {} {what}", path.display())
        })?;
        let mut settings = Settings::from_toml(&text)
            .map_err(|e| anyhow::anyhow!("config file {}{e}", path.display()))?;
        settings.key_lines = Some(std::sync::Arc::new(KeyLines::scan(path, &text)));
        Ok(settings)
    }

    /// Parse TOML text; the error reads `, line N: …` (to follow a file
    /// name), or `, line N, column C: …` for a syntax error, where the
    /// line alone may not show what is wrong.
    pub fn from_toml(text: &str) -> Result<Settings, String> {
        // Syntax first, on its own: a data error (a type, an unknown key)
        // is about the key on its line, a syntax error about one character.
        if let Err(e) = toml::from_str::<toml::Table>(text) {
            let (line, column) = e.span().map_or((0, 0), |s| line_and_column(text, s.start));
            let message = e.message().trim_end().replace('\n', "; ");
            return Err(if line == 0 {
                format!(": {message}")
            } else {
                format!(", line {line}, column {column}: TOML syntax: {message}")
            });
        }
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let line = inner
                .span()
                .map(|s| {
                    let before = &text.as_bytes()[..s.start.min(text.len())];
                    format!(
                        ", line {}",
                        before.iter().filter(|&&b| b == b'\n').count() + 1
                    )
                })
                .unwrap_or_default();
            let message = misplaced_in_table(&key, inner.message())
                .unwrap_or_else(|| operator_words(inner.message()));
            if key == "." || key.is_empty() || message.starts_with("key `") {
                format!("{line}: {message}")
            } else {
                format!("{line}: key `{key}`: {message}")
            }
        })
    }
}

/// The 1-based line and column (in characters) of byte `at` in `text`.
fn line_and_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
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
        assert_eq!(
            s.header_timeout.map(|d| d.value),
            Some(Duration::from_secs(2))
        );
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
                    watch_debounce_ms: Some(DurationValue::new(Duration::ZERO)),
                    ..base()
                },
            ),
            (
                "rescan_interval",
                Settings {
                    rescan_interval: Some(DurationValue::new(Duration::ZERO)),
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
            max_uri_bytes: Some(Size(100_000)),
            ..Settings::default()
        };
        let err = Config::validate(s, &[0]).unwrap_err();
        assert!(format!("{err:#}").contains("max_uri_bytes"), "{err:#}");
    }

    #[test]
    fn drain_idle_grace_is_at_most_half_the_shutdown_grace() {
        let grace = |idle: Option<u64>, shutdown: Option<u64>| {
            let s = Settings {
                root: Some(PathBuf::from(".")),
                drain_idle_grace: idle.map(|v| DurationValue::new(Duration::from_millis(v))),
                shutdown_grace: shutdown.map(|v| DurationValue::new(Duration::from_millis(v))),
                ..Settings::default()
            };
            Config::validate(s, &[0]).unwrap().drain_idle_grace
        };
        assert_eq!(grace(None, None), DEFAULT_DRAIN_IDLE_GRACE);
        assert_eq!(grace(Some(3000), None), Duration::from_secs(3));
        assert_eq!(grace(None, Some(1000)), Duration::from_millis(500));
        assert_eq!(grace(Some(4000), Some(6000)), Duration::from_secs(3));
        let zero = Settings {
            root: Some(PathBuf::from(".")),
            drain_idle_grace: Some(DurationValue::new(Duration::ZERO)),
            ..Settings::default()
        };
        let err = Config::validate(zero, &[0]).unwrap_err();
        assert!(format!("{err:#}").contains("drain_idle_grace"), "{err:#}");
    }

    #[test]
    fn every_flag_shows_its_default_in_help() {
        let defaults = help_defaults();
        for arg in Settings::command_raw().get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "config" | "check" | "help" | "version") {
                continue;
            }
            assert!(
                defaults.iter().any(|(d, _)| *d == id),
                "flag `{id}` has no entry in config::help_defaults()"
            );
        }
        let help = Settings::command().render_long_help().to_string();
        assert!(help.contains("[default: 1m]"), "{help}");
        assert!(help.contains("[default: 1GiB]"), "{help}");
        assert!(help.contains("Exit status"), "{help}");
    }

    #[test]
    fn an_error_names_the_flag_when_given_as_one() {
        let flags =
            Settings::try_parse_from(["shardhttpd", "--root", ".", "--max-uri-bytes", "100KiB"])
                .unwrap();
        let err = Config::validate(flags.overlay(Settings::default()), &[0]).unwrap_err();
        assert!(format!("{err:#}").contains("`--max-uri-bytes`"), "{err:#}");
        let file = Settings::from_toml("root = \".\"\nmax_uri_bytes = \"100KiB\"\n").unwrap();
        let err = Config::validate(Settings::default().overlay(file), &[0]).unwrap_err();
        assert!(
            format!("{err:#}").contains("config key `max_uri_bytes`"),
            "{err:#}"
        );
    }

    #[test]
    fn units_and_addresses_in_the_file() {
        let s = Settings::from_toml(
            "root = \".\"\nlisten = \"127.0.0.1:0\"\nkeepalive_timeout = \"1m\"\n\
             header_timeout = 2.5\nwatch_debounce_ms = 20\ncache_max_bytes = \"64KiB\"\n\
             admin = \"localhost:0\"\n",
        )
        .unwrap();
        let c = Config::validate(s, &[0]).unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:0".parse().unwrap()]);
        assert_eq!(c.keepalive_timeout, Duration::from_secs(60));
        assert_eq!(c.header_timeout, Duration::from_millis(2500));
        assert_eq!(c.watch_debounce, Duration::from_millis(20));
        assert_eq!(c.cache_max_bytes, 65_536);
        assert!(c.admin.ip().is_loopback());
    }

    #[test]
    fn file_errors_read_like_an_operator_wrote_them() {
        let cases: &[(&str, &str)] = &[
            (
                "[cache_control]\n\"*.html\" = \"no-cache\"\nspa_fallback = true\n",
                "key `spa_fallback` after `[cache_control]` belongs to that table; move it above",
            ),
            (
                "[[cache_control]]\nglob = \"*\"\nvalue = \"x\"\nmax_ranges = 3\n",
                "key `max_ranges` after `[[cache_control]]` belongs to that table",
            ),
            (
                "[error_pages]\n404 = \"404.html\"\nwatch = false\n",
                "key `watch` after `[error_pages]`",
            ),
            (
                "keepalive_timeout = \"10 parsecs\"\n",
                "key `keepalive_timeout`",
            ),
            ("max_head_bytes = \"8 KiB?\"\n", "key `max_head_bytes`"),
            (
                "keepalive_timout = 3\n",
                "did you mean `keepalive_timeout`?",
            ),
            ("listen = 8080\n", "key `listen`"),
        ];
        for (text, want) in cases {
            let err = Settings::from_toml(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(err.contains("line "), "{text:?}: {err}");
            assert!(!err.contains("untagged"), "{text:?}: {err}");
        }
    }

    /// Issue 36: a syntax error names the column; `cores` takes a count or
    /// a CPU list.
    #[test]
    fn syntax_errors_name_the_column_and_cores_takes_a_number() {
        let cases = [
            ("max_ranges = = 3\n", ", line 1, column 14: TOML syntax: "),
            ("root = \"x\"\n[x\n", ", line 2, column 3: TOML syntax: "),
            ("a = \"é\" b\n", ", line 1, column 9: TOML syntax: "),
        ];
        for (text, want) in cases {
            let err = Settings::from_toml(text).unwrap_err();
            assert!(err.starts_with(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{text:?}: {err}");
        }
        for (text, want) in [("cores = 4", "4"), ("cores = \"0-3,6\"", "0-3,6")] {
            let s = Settings::from_toml(text).unwrap();
            assert_eq!(s.cores.as_deref(), Some(want), "{text}");
        }
        for text in ["cores = -2", "cores = [0, 1]", "cores = true"] {
            let err = Settings::from_toml(text).unwrap_err();
            assert!(err.contains("key `cores`: takes a count"), "{text}: {err}");
        }
    }

    #[test]
    fn json_log_is_found_on_a_command_line_clap_refuses() {
        let yes = |args: &[&str]| {
            let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
            Settings::json_log_requested(&args)
        };
        assert!(yes(&["--log-format", "json", "--bogus"]));
        assert!(yes(&["--bogus", "--log-format=json"]));
        assert!(!yes(&["--log-format", "text", "--bogus"]));
        assert!(!yes(&["--log-format=json", "--log-format", "text"]));
        assert!(!yes(&["--", "--log-format=json"]));
        assert!(!yes(&["--log-format"]));
    }

    #[test]
    fn admin_cannot_share_a_listen_address() {
        for (listen, admin) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("127.0.0.1:8080", "0.0.0.0:8080"),
        ] {
            let s = Settings::from_toml(&format!(
                "root = \".\"\nlisten = \"{listen}\"\nadmin = \"{admin}\"\n"
            ))
            .unwrap();
            let err = Config::validate(s, &[0]).unwrap_err();
            assert!(format!("{err:#}").contains("admin"), "{err:#}");
        }
        let s = Settings::from_toml(
            "root = \".\"\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        assert!(
            Config::validate(s, &[0]).is_ok(),
            "port 0 twice is two ports"
        );
    }

    #[test]
    fn tls_cannot_share_a_cleartext_or_admin_port() {
        for (extra, key) in [
            ("listen = \"127.0.0.1:8443\"\n", "tls_listen"),
            ("admin = \"0.0.0.0:8443\"\n", "admin"),
        ] {
            let s = Settings::from_toml(&format!(
                "root = \".\"\ntls_listen = \"127.0.0.1:8443\"\ntls_cert = \"c.pem\"\n\
                 tls_key = \"k.pem\"\n{extra}"
            ))
            .unwrap();
            let err = format!("{:#}", Config::validate(s, &[0]).unwrap_err());
            assert!(err.contains(key) && err.contains("8443"), "{err}");
        }
    }

    #[test]
    fn root_that_is_missing_or_a_file() {
        let s = Settings::from_toml("root = \"/no/such/dir\"\n").unwrap();
        let err = format!("{:#}", Config::validate(s, &[0]).unwrap_err());
        assert!(err.contains("does not exist"), "{err}");
        let s = Settings::from_toml("root = \"Cargo.toml\"\n").unwrap();
        let err = format!("{:#}", Config::validate(s, &[0]).unwrap_err());
        assert!(err.contains("is not a directory"), "{err}");
    }
}
