//! The defaults `--help` shows for each flag, rendered from the same
//! constants the validation uses.

use super::*;

/// Each flag's default as `--help` shows it, by argument id (the field
/// name). A new flag needs an entry here; a unit test checks that every
/// flag has one.
pub fn help_defaults() -> Vec<(&'static str, String)> {
    let mut defaults = serving_defaults();
    defaults.extend(tls_and_protocol_defaults());
    defaults
}

/// The defaults of listening, limits, the snapshot and responses.
fn serving_defaults() -> Vec<(&'static str, String)> {
    let c = crate::cache::CompressOptions::default();
    vec![
        ("root", DEFAULT_ROOT.into()),
        ("listen", DEFAULT_LISTEN.into()),
        ("cores", "every CPU in the affinity mask".into()),
        ("admin", DEFAULT_ADMIN.into()),
        ("backlog", DEFAULT_BACKLOG.to_string()),
        ("steer", "hash".into()),
        ("io", "auto".into()),
        ("server_header", DEFAULT_SERVER_HEADER.into()),
        (
            "max_requests_per_connection",
            DEFAULT_MAX_REQUESTS_PER_CONNECTION.to_string(),
        ),
        ("max_ranges", DEFAULT_MAX_RANGES.to_string()),
        ("max_head_bytes", format_size(DEFAULT_MAX_HEAD_BYTES as u64)),
        ("max_uri_bytes", format_size(DEFAULT_MAX_URI_BYTES as u64)),
        ("max_discard_bytes", format_size(DEFAULT_MAX_DISCARD_BYTES)),
        ("header_timeout", format_duration(DEFAULT_HEADER_TIMEOUT)),
        (
            "keepalive_timeout",
            format_duration(DEFAULT_KEEPALIVE_TIMEOUT),
        ),
        ("write_timeout", format_duration(DEFAULT_WRITE_TIMEOUT)),
        ("shutdown_grace", format_duration(DEFAULT_SHUTDOWN_GRACE)),
        ("drain_delay", "0s".into()),
        (
            "drain_idle_grace",
            format_duration(DEFAULT_DRAIN_IDLE_GRACE),
        ),
        (
            "upgrade_binary",
            "this executable, as resolved at start".into(),
        ),
        ("upgrade_timeout", format_duration(DEFAULT_UPGRADE_TIMEOUT)),
        (
            "sendfile_threshold",
            format_size(DEFAULT_SENDFILE_THRESHOLD),
        ),
        ("sendfile", "false".into()),
        ("cache_max_bytes", format_size(DEFAULT_CACHE_MAX_BYTES)),
        ("serve_dotfiles", "false".into()),
        (
            "dotfile_allow",
            crate::cache::DEFAULT_DOTFILE_ALLOW.join(", "),
        ),
        ("index_files", DEFAULT_INDEX_FILES.join(", ")),
        ("default_type", DEFAULT_TYPE.into()),
        ("metrics", "true".into()),
        ("access_log", "none (no access log)".into()),
        ("access_log_format", "combined".into()),
        (
            "access_log_fields",
            crate::metrics::access_log::Field::ALL
                .map(crate::metrics::access_log::Field::name)
                .join(", "),
        ),
        ("log_format", "text".into()),
        ("log_level", "info".into()),
        ("watch", "true".into()),
        ("watch_debounce_ms", format_duration(DEFAULT_WATCH_DEBOUNCE)),
        ("rescan_interval", format_duration(DEFAULT_RESCAN_INTERVAL)),
        (
            "write_settle_max",
            format_duration(DEFAULT_WRITE_SETTLE_MAX),
        ),
        (
            "max_open_files",
            crate::cache::open_files::DEFAULT_MAX_OPEN_FILES.to_string(),
        ),
        (
            "preload_max_files",
            crate::cache::DEFAULT_PRELOAD_MAX_FILES.to_string(),
        ),
        ("compress", "true".into()),
        ("compress_min_bytes", format_size(c.min_bytes)),
        ("brotli_level", c.brotli_level.to_string()),
        ("gzip_level", c.gzip_level.to_string()),
        ("zstd_level", c.zstd_level.to_string()),
        ("compress_fast_above", format_size(c.fast_above)),
        (
            "compress_max_file_bytes",
            format_size(crate::cache::DEFAULT_COMPRESS_MAX_FILE_BYTES),
        ),
        (
            "cache_control_default",
            "none (no Cache-Control header)".into(),
        ),
        ("redirect_cache_control", "none".into()),
        (
            "fast_start_max_age",
            format_duration(DEFAULT_FAST_START_MAX_AGE),
        ),
        ("spa_fallback", "false".into()),
        ("unknown_host", "default".into()),
    ]
}

/// The defaults of TLS, the protocols above HTTP/1.1, ACME and what a
/// proxy in front may say.
fn tls_and_protocol_defaults() -> Vec<(&'static str, String)> {
    vec![
        ("tls_listen", "none (no TLS listener)".into()),
        ("hsts", "none (no Strict-Transport-Security)".into()),
        ("redirect_https", "false".into()),
        ("h2", "true".into()),
        ("h2c", "true".into()),
        ("h2c_only", "false".into()),
        ("h3", "false".into()),
        ("quic_listen", "the tls_listen addresses".into()),
        ("quic_retry", "false".into()),
        ("quic_retry_above", super::DEFAULT_RETRY_ABOVE.to_string()),
        (
            "quic_socket_buffer",
            format_size(super::DEFAULT_SOCKET_BUFFER),
        ),
        ("quic_gso", "true".into()),
        (
            "h2_max_concurrent_streams",
            crate::proto::h2::DEFAULT_MAX_CONCURRENT_STREAMS.to_string(),
        ),
        (
            "max_connections_per_core",
            "(RLIMIT_NOFILE - 64 - max_open_files) / shards, at least 64".into(),
        ),
        ("proxy_protocol", "false".into()),
        ("acme_domains", "none (no ACME)".into()),
        ("acme_email", "none".into()),
        ("acme_directory", crate::acme::LETS_ENCRYPT.into()),
        ("acme_ca_roots", "the bundled Mozilla roots".into()),
        (
            "acme_state_dir",
            format!(
                "$STATE_DIRECTORY/acme, else {}",
                crate::acme::DEFAULT_STATE_DIR
            ),
        ),
        (
            "acme_challenge",
            "tls-alpn-01 with a TLS listener on port 443, else http-01".into(),
        ),
        ("acme_eab_kid", "none".into()),
        ("acme_eab_hmac_key", "none".into()),
        (
            "acme_retry_min",
            format_duration(crate::acme::DEFAULT_RETRY_MIN),
        ),
        ("trusted_proxies", "none".into()),
        (
            "real_ip_header",
            "none (the connection's address is logged)".into(),
        ),
        ("request_id_header", "none (no request id)".into()),
        ("tls_cert", "none".into()),
        ("tls_key", "none".into()),
        (
            "tls_ticket_key_file",
            "none (a random key per 6 h period, forgotten after the next)".into(),
        ),
    ]
}
