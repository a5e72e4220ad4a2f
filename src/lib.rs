//! shardhttpd: a per-core sharded static-file HTTP/1.1 server.
//!
//! The request path through the crate:
//!
//! - [`config`]: CLI flags + TOML file → one validated [`config::Config`].
//! - [`cache`]: the immutable [`cache::Snapshot`] of the document root (bodies,
//!   pre-rendered heads, validators), rebuilt and swapped through `ArcSwap`.
//! - [`shard`]: one pinned thread per CPU with its own `SO_REUSEPORT` listener,
//!   epoll loop, timer wheel and Date cache.
//! - [`conn`]: the per-connection state machine, buffers and output queue;
//!   `conn::tls` is the TLS transport under it.
//! - [`h2`]: HTTP/2 as a sans-I/O frame layer beside HTTP/1 (HPACK by
//!   `loona-hpack`), answered by the same `conn::respond`.
//! - [`tls`]: the shared rustls configuration: certificates chosen by SNI
//!   and reloaded in place, session tickets.
//! - [`http`]: pure HTTP/1.x code: request parsing, path normalisation,
//!   conditional and range evaluation, response heads.
//! - [`upgrade`]: the SIGUSR2 binary upgrade by listener handover; [`notify`]
//!   the systemd notification protocol; [`activation`] systemd's sockets.
//! - [`sys`]: the only module allowed `unsafe`: thin wrappers over epoll,
//!   eventfd, `sendfile`, `send(MSG_MORE)`.
#![deny(unsafe_code)]

pub mod acme;
pub mod activation;
pub mod cache;
pub mod config;
pub mod conn;
pub mod h2;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod preflight;
pub mod reload;
pub mod server;
pub mod shard;
pub mod sys;
pub mod tls;
pub mod upgrade;
