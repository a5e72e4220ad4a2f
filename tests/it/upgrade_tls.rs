//! The SIGUSR2 upgrade hands over the HTTPS listeners too: TLS clients that
//! open a new connection (and handshake) per request, and TLS keep-alive
//! clients, run through two upgrades without a failed handshake or request,
//! and the new process owns the TLS port afterwards.

use crate::support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rustls::ClientConfig;
use support::tls::{Ca, TlsServer, Wire};
use support::upgrade::{listening_pids, process_gone, signal, status_pid, Successors};
use support::{get, poll_until, Site};

const UPGRADE_DEADLINE: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    /// A keep-alive connection the old process closed as idle between two
    /// requests (nothing of the response arrived): RFC 9112 §9.3.1 lets a
    /// client retry then, and the retry must succeed.
    retried: AtomicU64,
    errors: Mutex<Vec<String>>,
}

fn one_request(
    wire: &mut Option<Wire>,
    addr: SocketAddr,
    client: &Arc<ClientConfig>,
    keepalive: bool,
    counts: &Counts,
) {
    let fail = |what: String| counts.errors.lock().unwrap().push(what);
    let reused = wire.is_some();
    let mut w = match wire.take() {
        Some(w) => w,
        None => match Wire::try_tls(addr, client, "localhost") {
            Ok(w) => w,
            Err(e) => return fail(format!("handshake: {e}")),
        },
    };
    let raw = if keepalive {
        get("/index.html")
    } else {
        "GET /index.html HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".to_owned()
    };
    // A reused connection may have been closed by the draining server
    // since its last answer: the request then fails to send, or reads as
    // closed, and is retried on a new connection, as any client does.
    if let Err(e) = w.try_send(raw.as_bytes()) {
        if reused {
            counts.retried.fetch_add(1, Ordering::Relaxed);
            return one_request(wire, addr, client, keepalive, counts);
        }
        return fail(format!("send: {e}"));
    }
    match w.read_response_to("GET") {
        Ok(r) if r.status == 200 && r.body == support::INDEX_HTML => {
            counts.ok.fetch_add(1, Ordering::Relaxed);
            let closing = r
                .header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close"));
            if keepalive && !closing {
                *wire = Some(w);
            }
        }
        Ok(r) => fail(format!("wrong answer: {r:?}")),
        Err(e) if reused && e.starts_with("closed with 0 bytes") => {
            counts.retried.fetch_add(1, Ordering::Relaxed);
            one_request(wire, addr, client, keepalive, counts);
        }
        Err(e) => fail(e),
    }
}

#[test]
fn tls_listeners_are_handed_over_without_a_failed_handshake() {
    let site = Site::new("upgrade-tls");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let mut tls = TlsServer::start(&site.root, &ca, &leaf, &["--cores", "2"]);
    let successors = Successors::default();
    let (addr, admin) = (tls.tls_addr, tls.server.admin_addr());
    let first = tls.server.pid();
    assert_eq!(listening_pids(addr.port()), BTreeSet::from([first]));

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (stop, counts, client) = (
                Arc::clone(&stop),
                Arc::clone(&counts),
                Arc::clone(&tls.client),
            );
            thread::spawn(move || {
                let keepalive = t % 2 == 0;
                let mut wire = None;
                while !stop.load(Ordering::Relaxed) {
                    one_request(&mut wire, addr, &client, keepalive, &counts);
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(1));

    let mut pid = first;
    for round in 1..=2 {
        signal(pid, "USR2");
        assert!(
            poll_until(UPGRADE_DEADLINE, || process_gone(pid)),
            "round {round}: old process {pid} still running\n{}",
            tls.server.log_text()
        );
        let new = status_pid(admin).expect("status.json after the upgrade");
        successors.push(new);
        assert_ne!(new, pid, "round {round}");
        assert_eq!(
            listening_pids(addr.port()),
            BTreeSet::from([new]),
            "round {round}: the new process owns the TLS listeners\n{}",
            tls.server.log_text()
        );
        pid = new;
        thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let errors = counts.errors.lock().unwrap();
    let ok = counts.ok.load(Ordering::Relaxed);
    eprintln!(
        "TLS through two upgrades: {ok} answered, {} keep-alive retries, {} errors",
        counts.retried.load(Ordering::Relaxed),
        errors.len()
    );
    assert!(errors.is_empty(), "{errors:#?}\n{}", tls.server.log_text());
    assert!(ok > 0, "no request answered");
    // The new process still completes fresh handshakes.
    let mut w = Wire::tls(addr, &tls.client, "localhost");
    assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    let status = tls.server.try_wait().expect("first process exited");
    assert!(status.success(), "first process exit: {status}");
    signal(pid, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(pid)));
}
