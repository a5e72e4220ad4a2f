//! Certificate hot reload under load: replacing the files switches new
//! handshakes to the new certificate within a second with no failed
//! request; a broken pair keeps the old one serving (logged and counted);
//! SIGHUP rereads; established connections are untouched.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::tls::*;
use support::*;

fn scrape(server: &Server) -> String {
    let mut w = Wire::plain(server.admin_addr());
    w.roundtrip("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        .body_str()
}

fn reloads(text: &str, result: &str) -> u64 {
    let key = format!("shardhttpd_tls_certificate_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Replace `leaf`'s files with `with`'s content by rename (as certbot and
/// Kubernetes do), key first.
fn replace(leaf: &Leaf, with: &Leaf) {
    for (dst, src) in [(&leaf.key, &with.key), (&leaf.cert, &with.cert)] {
        let tmp = dst.with_extension("tmp");
        std::fs::copy(src, &tmp).unwrap();
        std::fs::rename(&tmp, dst).unwrap();
    }
}

/// The certificate a full handshake gets now (a resumed one would report
/// the certificate of the session it resumes).
fn served_cert(server: &TlsServer) -> Vec<u8> {
    let mut cfg = (*server.client).clone();
    cfg.resumption = rustls::client::Resumption::disabled();
    let w = Wire::tls(server.tls_addr, &Arc::new(cfg), "localhost");
    w.session().unwrap().peer_certificates().unwrap()[0].to_vec()
}

#[test]
fn certificate_swap_under_load_fails_no_request() {
    let site = Site::new("tls-reload");
    let ca = Ca::new();
    let live = ca.leaf(site.base(), "live", &["localhost"]);
    let one = ca.leaf(site.base(), "one", &["localhost"]);
    let two = ca.leaf(site.base(), "two", &["localhost"]);
    replace(&live, &one);
    let server = TlsServer::start(&site.root, &ca, &live, &[]);
    assert!(served_cert(&server) == one.der);
    // A connection established before the swap.
    let mut before = server.wire(Transport::Tls);
    assert_eq!(before.roundtrip(&get("/index.html")).status, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let loaders: Vec<_> = (0..4)
        .map(|_| {
            let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
            let (addr, client) = (server.tls_addr, Arc::clone(&server.client));
            thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    // A new handshake every 5 requests.
                    let result = Wire::try_tls(addr, &client, "localhost").map(|mut w| {
                        (0..5).all(|_| {
                            w.send(get("/index.html").as_bytes());
                            matches!(w.read_response_to("GET"), Ok(r) if r.status == 200)
                        })
                    });
                    match result {
                        Ok(true) => ok.fetch_add(5, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));

    // 1. A good new pair: seen by new handshakes within 1 s.
    replace(&live, &two);
    let swapped = Instant::now();
    assert!(
        poll_until(Duration::from_secs(1), || served_cert(&server) == two.der),
        "new certificate not served within 1 s"
    );
    let took = swapped.elapsed();

    // 2. A broken pair (certificate without its key): the old one stays.
    std::fs::write(&live.cert, b"-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    assert!(
        server
            .server
            .wait_for_log("TLS certificate reload failed", Duration::from_secs(3))
            .is_some(),
        "{}",
        server.server.log_text()
    );
    assert!(served_cert(&server) == two.der);
    let text = scrape(&server.server);
    assert!(reloads(&text, "failure") >= 1, "{text}");

    // 3. Repaired, then SIGHUP rereads even without a change.
    replace(&live, &one);
    assert!(poll_until(Duration::from_secs(1), || served_cert(&server) == one.der));
    let successes = reloads(&scrape(&server.server), "success");
    server.server.signal("HUP");
    assert!(poll_until(Duration::from_secs(3), || {
        reloads(&scrape(&server.server), "success") > successes
    }));

    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for l in loaders {
        l.join().unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok > 100, "load too small to mean anything: {ok}");
    assert_eq!(failed, 0, "{failed} failed connections ({ok} requests ok)");
    // The connection from before still works, with its certificate.
    assert_eq!(before.roundtrip(&get("/style.css")).body, STYLE_CSS);
    assert!(
        before.session().unwrap().peer_certificates().unwrap()[0].as_ref() == one.der.as_slice()
    );
    eprintln!("new certificate served {took:?} after the files were replaced; {ok} requests ok");
}
