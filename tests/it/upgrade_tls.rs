//! The SIGUSR2 upgrade hands over the HTTPS listeners too: TLS clients that
//! open a new connection (and handshake) per request, and TLS keep-alive
//! clients, run through two upgrades without a failed handshake or request
//! (none retried; each closed connection ends with close_notify), and the
//! new process owns the TLS port afterwards.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use support::tls::{Ca, TlsServer, Wire};
use support::upgrade::{
    listening_pids, process_gone, signal, status_pid, Options, Successors, Traffic,
};
use support::{get, poll_until, Site};

const UPGRADE_DEADLINE: Duration = Duration::from_secs(20);

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

    // Keep-alive clients and a new connection (and handshake) per request;
    // nothing is retried.
    let paths = vec![("/index.html".to_owned(), support::INDEX_HTML.to_vec())];
    let opts = Options {
        tls: Some(Arc::clone(&tls.client)),
        ..Options::default()
    };
    let traffic = Traffic::with(addr, 2, 2, paths, opts);
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
    let tally = traffic.stop();
    eprintln!("TLS through two upgrades: {tally:?}");
    assert_eq!(tally.failures(), 0, "{tally:#?}\n{}", tls.server.log_text());
    assert!(tally.ok > 0, "no request answered");
    assert!(tally.told_to_close > 0, "{tally:?}");
    // The new process still completes fresh handshakes.
    let mut w = Wire::tls(addr, &tls.client, "localhost");
    assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    let status = tls.server.try_wait().expect("first process exited");
    assert!(status.success(), "first process exit: {status}");
    signal(pid, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(pid)));
}
