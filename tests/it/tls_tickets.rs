//! Session-ticket keys (issue 24): replicas sharing `tls_ticket_key_file`
//! resume each other's sessions; the file is reread when the operator
//! rotates it (the first key seals, every key opens); a key dropped from
//! it no longer opens its tickets, and the file of a past period cannot
//! open a current ticket. A file that others than its owner (and group)
//! may read, that they may write, or that holds a key of 32 zero bytes is
//! refused (issue 35). The random keys' periods are unit-tested with a
//! clock the tests control (`src/tls/tickets.rs`).

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, HandshakeKind, SupportedProtocolVersion};
use support::tls::*;
use support::*;

const VERSIONS: [&SupportedProtocolVersion; 2] = [&rustls::version::TLS13, &rustls::version::TLS12];

/// One request over a new connection; how its handshake went.
fn handshake(server: &TlsServer, client: &Arc<ClientConfig>) -> Option<HandshakeKind> {
    let mut w = Wire::tls(server.tls_addr, client, "localhost");
    assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    w.session().unwrap().handshake_kind()
}

/// `n` keys of 32 bytes, each filled with its byte.
fn keys(ks: &[u8]) -> Vec<u8> {
    ks.iter().flat_map(|&k| [k; 32]).collect()
}

/// A key file beside the site, mode 600 as README asks.
fn key_file(site: &Site, name: &str, bytes: &[u8]) -> PathBuf {
    let path = site.write(&format!("../{name}"), bytes);
    chmod(&path, 0o600);
    path
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Replace the key file by rename, as the README says to rotate it (mode
/// 600: `umask 077`).
fn rotate(path: &Path, bytes: &[u8]) {
    rotate_with_mode(path, bytes, 0o600);
}

fn rotate_with_mode(path: &Path, bytes: &[u8], mode: u32) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    chmod(&tmp, mode);
    std::fs::rename(&tmp, path).unwrap();
}

/// What `--check` says of `file` as the ticket key file: whether it
/// passed, and its stderr.
fn check(site: &Site, leaf: &Leaf, file: &Path) -> (bool, String) {
    let out = command()
        .args(["--check", "--root", &site.root.display().to_string()])
        .args(["--tls-listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&leaf.cert)
        .arg("--tls-key")
        .arg(&leaf.key)
        .arg("--tls-ticket-key-file")
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rotations(server: &Server) -> f64 {
    rotations_by(server, "success")
}

fn rotations_by(server: &Server, result: &str) -> f64 {
    let mut w = Wire::plain(server.admin_addr());
    let text = w
        .roundtrip("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        .body_str();
    let prefix = format!("shardhttpd_tls_ticket_key_rotations_total{{result=\"{result}\"}}");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Two servers given the same `tls_ticket_key_file` resume each other's
/// sessions (replicas behind one load balancer); a server with another
/// key does a full handshake instead. The files hold exactly one key of
/// the documented 32 bytes.
#[test]
fn replicas_sharing_a_ticket_key_file_resume_each_others_sessions() {
    let site = Site::new("tls-ticket-file");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let shared = key_file(&site, "ticket.key", &[0x5a; 32]);
    let other = key_file(&site, "other.key", &[0xa5; 32]);
    let shared_s = shared.display().to_string();
    let other_s = other.display().to_string();
    let a = TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &["--tls-ticket-key-file", &shared_s],
    );
    let b = TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &["--tls-ticket-key-file", &shared_s],
    );
    let c = TlsServer::start(&site.root, &ca, &leaf, &["--tls-ticket-key-file", &other_s]);
    for version in VERSIONS {
        let client = ca.client(&[version]);
        assert_eq!(handshake(&a, &client), Some(HandshakeKind::Full));
        assert_eq!(
            handshake(&b, &client),
            Some(HandshakeKind::Resumed),
            "{version:?}: a session from replica A did not resume on B"
        );
        let client = ca.client(&[version]);
        handshake(&a, &client);
        assert_eq!(
            handshake(&c, &client),
            Some(HandshakeKind::Full),
            "{version:?}: a ticket opened with another key"
        );
    }
    // Not a whole number of 32-byte keys: refused at start.
    for bad in [&b"too short"[..], &[1; 48], &[1; 33], &[1; 5 * 32]] {
        let file = key_file(&site, "bad.key", bad);
        let (ok, text) = check(&site, &leaf, &file);
        assert!(!ok, "{} bytes accepted", bad.len());
        assert!(
            text.contains("tls_ticket_key_file") && text.contains("32"),
            "{text}"
        );
    }
}

/// The operator rotates the file twice, by rename: [K1] → [K2, K1] →
/// [K3, K2]. A K1 ticket resumes after the first rotation (every key
/// opens) and not after the second (K1 left the file and the process). A
/// replica still holding the past file [K1] cannot open a current ticket.
#[test]
fn rotated_key_file_drops_old_keys_and_a_past_file_opens_no_current_ticket() {
    let site = Site::new("tls-ticket-rotate");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let file = key_file(&site, "ticket.key", &keys(&[1]));
    let past = key_file(&site, "past.key", &keys(&[1]));
    let file_s = file.display().to_string();
    let past_s = past.display().to_string();
    let a = TlsServer::start(&site.root, &ca, &leaf, &["--tls-ticket-key-file", &file_s]);
    let p = TlsServer::start(&site.root, &ca, &leaf, &["--tls-ticket-key-file", &past_s]);
    // Per version, two clients holding a ticket sealed with K1.
    let k1: Vec<_> = VERSIONS
        .iter()
        .flat_map(|v| [ca.client(&[v]), ca.client(&[v])])
        .collect();
    for client in &k1 {
        assert_eq!(handshake(&a, client), Some(HandshakeKind::Full));
    }
    let rotated = |n: f64| {
        assert!(
            poll_until(Duration::from_secs(5), || rotations(&a.server) == n),
            "the key file change was not picked up\n{}",
            a.server.log_text()
        );
    };
    rotate(&file, &keys(&[2, 1]));
    rotated(1.0);
    for (i, client) in k1.iter().enumerate().step_by(2) {
        assert_eq!(
            handshake(&a, client),
            Some(HandshakeKind::Resumed),
            "client {i}: the previous key no longer opens"
        );
    }
    rotate(&file, &keys(&[3, 2]));
    rotated(2.0);
    // The dashboard's key-age panel reads this gauge.
    let text = Wire::plain(a.server.admin_addr())
        .roundtrip("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        .body_str();
    let changed: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("shardhttpd_tls_ticket_key_changed_timestamp_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ticket key gauge\n{text}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - changed).abs() < 60.0, "changed {changed}, now {now}");
    for (i, client) in k1.iter().enumerate().skip(1).step_by(2) {
        assert_eq!(
            handshake(&a, client),
            Some(HandshakeKind::Full),
            "client {i}: a key dropped from the file still opened its ticket"
        );
    }
    for version in VERSIONS {
        let client = ca.client(&[version]);
        assert_eq!(handshake(&a, &client), Some(HandshakeKind::Full));
        assert_eq!(
            handshake(&p, &client),
            Some(HandshakeKind::Full),
            "{version:?}: the past period's key file opened a current ticket"
        );
    }
    // The replica holding the past file still resumes its own sessions.
    let client = ca.client(&[]);
    handshake(&p, &client);
    assert_eq!(handshake(&p, &client), Some(HandshakeKind::Resumed));
}

/// A key of 32 zero bytes is a placeholder, whose tickets anyone opens;
/// a key file other users may read (the default umask's 644) or its group
/// may write gives the keys away. Each is refused by `--check` and at
/// start, naming the file; before, each was accepted without a word.
#[test]
fn a_zero_key_or_a_key_file_open_to_others_is_refused() {
    let site = Site::new("tls-ticket-refused");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let zero = key_file(&site, "zero.key", &[0; 32]);
    let (ok, text) = check(&site, &leaf, &zero);
    assert!(!ok, "a zero key passed --check: {text}");
    assert!(
        text.contains("tls_ticket_key_file")
            && text.contains(&zero.display().to_string())
            && text.contains("zero"),
        "{text}"
    );
    let second = key_file(&site, "second-zero.key", &keys(&[7, 0]));
    let (ok, text) = check(&site, &leaf, &second);
    assert!(!ok && text.contains("key 2 of"), "{text}");
    for mode in [0o644, 0o604, 0o660] {
        let file = key_file(&site, "open.key", &[7; 32]);
        chmod(&file, mode);
        let (ok, text) = check(&site, &leaf, &file);
        assert!(!ok, "mode {mode:o} passed --check: {text}");
        assert!(
            text.contains("tls_ticket_key_file")
                && text.contains(&file.display().to_string())
                && text.contains(&format!("mode {mode:03o}")),
            "{text}"
        );
    }
    // A start is refused alike (the same check, before anything is built).
    let file = key_file(&site, "open.key", &[7; 32]);
    chmod(&file, 0o644);
    let mut start = command()
        .args(["--root", &site.root.display().to_string()])
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--tls-listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&leaf.cert)
        .arg("--tls-key")
        .arg(&leaf.key)
        .arg("--tls-ticket-key-file")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exited = poll_until(Duration::from_secs(10), || {
        start.try_wait().unwrap().is_some()
    });
    if !exited {
        let _ = start.kill();
    }
    let out = start.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        exited && !out.status.success(),
        "a 644 key file started: {text}"
    );
    assert!(text.contains("mode 644"), "{text}");
    // 600 and 640 pass.
    for mode in [0o600, 0o640] {
        chmod(&file, mode);
        let (ok, text) = check(&site, &leaf, &file);
        assert!(ok, "mode {mode:o} refused: {text}");
    }
}

/// Mode 640 (read through a group the service joins, deploy/README.md)
/// starts, with a warning; a rotation to a file other users may read is
/// refused and keeps the previous keys (a session sealed before still
/// resumes), counted as a failure.
#[test]
fn a_group_readable_key_file_is_warned_about_and_a_loose_rotation_keeps_the_keys() {
    let site = Site::new("tls-ticket-group");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let file = key_file(&site, "ticket.key", &keys(&[1]));
    chmod(&file, 0o640);
    let file_s = file.display().to_string();
    let a = TlsServer::start(&site.root, &ca, &leaf, &["--tls-ticket-key-file", &file_s]);
    assert!(
        a.server
            .wait_for_log("readable by its group", Duration::from_secs(5))
            .is_some_and(|l| l.contains("640")),
        "no warning\n{}",
        a.server.log_text()
    );
    let client = ca.client(&[]);
    assert_eq!(handshake(&a, &client), Some(HandshakeKind::Full));
    rotate_with_mode(&file, &keys(&[2, 1]), 0o644);
    assert!(
        poll_until(Duration::from_secs(5), || rotations_by(
            &a.server, "failure"
        ) == 1.0),
        "the refused rotation was not counted\n{}",
        a.server.log_text()
    );
    assert!(
        a.server.log_text().contains("mode 644"),
        "{}",
        a.server.log_text()
    );
    assert_eq!(
        handshake(&a, &client),
        Some(HandshakeKind::Resumed),
        "the previous keys were not kept"
    );
    assert_eq!(rotations(&a.server), 0.0);
}
