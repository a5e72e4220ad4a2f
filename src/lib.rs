//! shardhttpd: a per-core sharded static-file HTTP/1.1 and HTTP/2 server.
//!
//! The request path through the crate:
//!
//! - [`config`]: CLI flags + TOML file → one validated [`config::Config`].
//! - [`cache`]: the immutable [`cache::Snapshot`] of the document root (bodies,
//!   pre-rendered heads, validators), rebuilt and swapped through `ArcSwap`.
//! - [`shard`]: one pinned thread per CPU with its own `SO_REUSEPORT` listener,
//!   epoll loop, timer wheel and Date cache.
//! - [`conn`]: the per-connection state machine and buffers; `conn::tls` is
//!   the TLS transport under it.
//! - [`proto`]: the protocols, sans-I/O: HTTP/1 responses written out,
//!   HTTP/2 frames and HPACK.
//! - [`serve`]: the semantics layer: a parsed request → a typed
//!   [`serve::Response`], for every protocol.
//! - [`io`]: the output queue every protocol writes into.
//! - [`tls`]: the shared rustls configuration: certificates chosen by SNI
//!   and reloaded in place, session tickets.
//! - [`http`]: pure HTTP code: HTTP/1 request parsing, path normalisation,
//!   conditional and range evaluation.
//! - [`upgrade`]: the SIGUSR2 binary upgrade by listener handover; [`notify`]
//!   the systemd notification protocol; [`activation`] systemd's sockets.
//! - [`sys`]: the only module allowed `unsafe`: thin wrappers over epoll,
//!   eventfd, `sendfile`, `send(MSG_MORE)`.
#![deny(unsafe_code)]

pub mod acme;
pub mod activation;
pub mod cache;
pub mod challenge;
pub mod config;
pub mod conn;
pub use shardhttpd_http as http;
pub mod io;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod preflight;
pub mod proto;
pub mod quic;
pub mod reload;
pub mod serve;
pub mod server;
pub mod shard;
pub mod sys;
pub mod tls;
pub mod upgrade;
