//! The systemd notification protocol, with the test playing systemd's part:
//! `NOTIFY_SOCKET` names a datagram socket the test reads, and the server
//! must send `READY=1` once serving, `MAINPID=<new pid>` from the new process
//! of a SIGUSR2 upgrade, and `STOPPING=1` when a drain starts.

use crate::support;

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

use support::upgrade::{process_gone, signal, status_pid, Proc, Successors};
use support::{bin, poll_until, Site, TempDir};

/// Datagrams received until one contains `want`, or the deadline.
fn receive_until(
    socket: &UnixDatagram,
    want: &str,
    deadline: Duration,
    seen: &mut Vec<String>,
) -> bool {
    let end = Instant::now() + deadline;
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        socket
            .set_read_timeout(Some(
                end.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        match socket.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let hit = msg.lines().any(|l| l == want);
                seen.push(msg);
                if hit {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn sd_notify_ready_then_mainpid_after_upgrade_then_stopping() {
    let site = Site::new("notify");
    let dir = TempDir::new("notify-socket");
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["--root", &site.root.display().to_string()])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--cores",
            "1",
        ])
        .env("NOTIFY_SOCKET", &path)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info");
    let proc = Proc::spawn(cmd);
    let successors = Successors::default();
    let old = proc.child.id();
    let mut seen = Vec::new();

    assert!(
        receive_until(&socket, "READY=1", Duration::from_secs(10), &mut seen),
        "no READY=1: {seen:?}\n{}",
        proc.log_text()
    );
    // READY comes once serving: the listener answers now.
    let addr = proc.addr("listening addr=");
    let admin = proc.addr("admin endpoint addr=");
    assert_eq!(
        support::Conn::connect(addr)
            .roundtrip(&support::get("/index.html"))
            .status,
        200
    );

    signal(old, "USR2");
    let mut mainpid = None;
    let end = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    while mainpid.is_none() && Instant::now() < end {
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if let Ok(n) = socket.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            mainpid = msg
                .lines()
                .find_map(|l| l.strip_prefix("MAINPID="))
                .and_then(|p| p.parse::<u32>().ok());
            // The new process says MAINPID= and READY=1 together.
            if mainpid.is_some() {
                assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
            }
            seen.push(msg);
        }
    }
    let new = mainpid.unwrap_or_else(|| panic!("no MAINPID=: {seen:?}\n{}", proc.log_text()));
    successors.push(new);
    assert_ne!(new, old);
    assert!(poll_until(Duration::from_secs(20), || process_gone(old)));
    assert_eq!(
        status_pid(admin),
        Some(new),
        "the new process serves the admin socket"
    );
    // The old process handed over: it must not have said STOPPING=1, which
    // systemd would take for the service stopping.
    assert!(!seen.iter().any(|m| m.contains("STOPPING=1")), "{seen:?}");

    signal(new, "TERM");
    assert!(
        receive_until(&socket, "STOPPING=1", Duration::from_secs(10), &mut seen),
        "no STOPPING=1: {seen:?}\n{}",
        proc.log_text()
    );
    assert!(poll_until(Duration::from_secs(20), || process_gone(new)));
}
