//! systemd socket activation (issue 27) with `systemd-socket-activate` in
//! front of the real binary: the passed socket is the one that answers
//! (connections made before the server ran are served), a socket that no
//! configured address names refuses the start, `ReusePort=yes` lets the
//! other shards bind beside the passed socket, and a SIGUSR2 upgrade hands
//! the passed socket on. Also `--check` after an upgrade: the address is
//! held by the running shardhttpd, named by its new pid.

use crate::support;

use std::fs;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::Duration;

use support::upgrade::{
    assert_answered, listening_pids, listening_sockets, process_gone, queue_requests, signal,
    upgrade, Proc, Successors, UPGRADE_DEADLINE,
};
use support::{bin, free_port, loud, poll_until, Server, Site};

/// `systemd-socket-activate`, or a loud skip.
fn activator() -> Option<PathBuf> {
    let found = support::find_program(&["systemd-socket-activate"]);
    if found.is_none() {
        loud("SKIP: systemd-socket-activate not installed (Debian package systemd)");
    }
    found
}

/// `systemd-socket-activate` listening on `127.0.0.1:port` (with `flags`),
/// which execs the server with `args` on the first connection. Its
/// environment is its own: only what `-E` names is passed on.
fn activated(tool: &PathBuf, port: u16, flags: &[&str], args: &[String]) -> Command {
    let mut cmd = Command::new(tool);
    cmd.args(["-E", "NO_COLOR=1", "-E", "RUST_LOG=info", "-l"])
        .arg(format!("127.0.0.1:{port}"))
        .args(flags)
        .arg("--")
        .arg(bin())
        .args(args);
    cmd
}

/// [`activated`] for a server configured to listen on the address of the
/// socket it is passed.
fn activated_on(tool: &PathBuf, port: u16, flags: &[&str], site: &Site) -> Command {
    activated(tool, port, flags, &args(site, &format!("127.0.0.1:{port}")))
}

fn args(site: &Site, listen: &str) -> Vec<String> {
    vec![
        "--root".into(),
        site.root.display().to_string(),
        "--listen".into(),
        listen.into(),
        "--admin".into(),
        "127.0.0.1:0".into(),
    ]
}

/// Once something listens on `port`, opens `n` connections and sends a
/// request on each; the streams, to read the answers from.
fn queue_when_listening(port: u16, n: usize) -> thread::JoinHandle<Vec<TcpStream>> {
    thread::spawn(move || {
        assert!(
            poll_until(Duration::from_secs(10), || listening_sockets(port) > 0),
            "nothing listens on {port}"
        );
        queue_requests(SocketAddr::from(([127, 0, 0, 1], port)), n)
    })
}

fn environ(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/environ"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', "\n"))
        .unwrap_or_default()
}

#[test]
fn the_passed_socket_answers_connections_made_before_the_server_ran() {
    let Some(tool) = activator() else { return };
    let site = Site::new("sockact-first");
    let port = free_port();
    // systemd-socket-activate execs the server on the first connection:
    // these are queued before the server process exists.
    let queued = queue_when_listening(port, 5);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let cmd = activated_on(&tool, port, &[], &site);
    let server = Server::spawn_command(cmd, 1);
    assert_eq!(server.addr(), addr);
    assert_answered(queued.join().unwrap(), "queued before the server ran");
    let resp = server.get("/digits.txt");
    assert_eq!(resp.status, 200);
    // Without ReusePort=yes, no socket joined it: every shard accepts from
    // the one socket systemd-socket-activate made, which it holds alone.
    assert_eq!(listening_sockets(port), 1, "{}", server.log_text());
    assert_eq!(
        listening_pids(port),
        std::collections::BTreeSet::from([server.pid()])
    );
    assert!(
        server
            .wait_for_log("every shard accepts from this one socket", Duration::ZERO)
            .is_some(),
        "{}",
        server.log_text()
    );
}

/// Runs the activated server to its exit (one connection makes the tool
/// exec it); its exit code and log.
fn refused(cmd: Command, port: u16, datagram: bool) -> (Option<i32>, String) {
    let mut proc = Proc::spawn(cmd);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if datagram {
        // Nothing tells when the UDP socket is bound: wait for the tool's
        // own line, then send.
        assert!(
            proc.wait_for_log("Listening on", Duration::from_secs(10))
                .is_some(),
            "{}",
            proc.log_text()
        );
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .send_to(b"x", addr)
            .unwrap();
    } else {
        assert!(poll_until(Duration::from_secs(10), || listening_sockets(
            port
        ) > 0));
        let _conn = TcpStream::connect(addr).unwrap();
    }
    let status = proc.wait_exit(support::READY_DEADLINE);
    thread::sleep(Duration::from_millis(100));
    (status.and_then(|s| s.code()), proc.log_text())
}

#[test]
fn a_passed_socket_the_configuration_does_not_name_refuses_the_start() {
    let Some(tool) = activator() else { return };
    let site = Site::new("sockact-mismatch");
    let port = free_port();
    let other = free_port();
    // Bound to an address no `listen`, `tls_listen` or `admin` names.
    let cmd = activated(
        &tool,
        port,
        &[],
        &args(&site, &format!("127.0.0.1:{other}")),
    );
    let (code, log) = refused(cmd, port, false);
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains(&format!("bound to 127.0.0.1:{port}"))
            && log.contains(&format!("listen 127.0.0.1:{other}"))
            && log.contains("ListenStream="),
        "{log}"
    );

    // Named `admin` (FileDescriptorName=) but configured as `listen`.
    let port = free_port();
    let cmd = activated_on(&tool, port, &["--fdname=admin"], &site);
    let (code, log) = refused(cmd, port, false);
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("gives to `listen`, not `admin`") && log.contains("FileDescriptorName="),
        "{log}"
    );

    // Not a TCP listener at all.
    let port = free_port();
    let cmd = activated_on(&tool, port, &["--datagram"], &site);
    let (code, log) = refused(cmd, port, true);
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("not a listening TCP socket"), "{log}");
}

#[test]
fn an_upgrade_after_activation_hands_the_passed_socket_on() {
    let Some(tool) = activator() else { return };
    let site = Site::new("sockact-upgrade");
    let port = free_port();
    let queued = queue_when_listening(port, 1);
    let cmd = activated_on(&tool, port, &[], &site);
    let server = Server::spawn_command(cmd, 1);
    let successors = Successors::default();
    assert_answered(queued.join().unwrap(), "first");
    let admin = server.admin_addr();
    let old = server.pid();
    assert!(environ(old).contains("LISTEN_FDS=1"), "{}", environ(old));

    let new = upgrade(old, admin, &successors, &|| server.log_text());
    // The new process got the socket by handover, not by LISTEN_FDS: the
    // variables were not passed on.
    let env = environ(new);
    assert!(
        env.contains("SHARDHTTPD_LISTEN_FDS=") && !env.contains("LISTEN_FDS=1\n"),
        "{env}"
    );
    assert!(!env.lines().any(|l| l.starts_with("LISTEN_")), "{env}");
    // The same single socket, now held by the new process alone.
    assert_eq!(listening_sockets(port), 1);
    assert_eq!(
        listening_pids(port),
        std::collections::BTreeSet::from([new])
    );
    let resp = server.get("/digits.txt");
    assert_eq!(resp.status, 200);

    // `--check` next to it: the address is the running server's.
    let out = support::command()
        .args(args(&site, &format!("127.0.0.1:{port}")))
        .arg("--check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "listen address 127.0.0.1:{port} is held by the running shardhttpd (pid {new})"
        )),
        "{stdout}"
    );
    signal(new, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(new)));
}

/// Before: the claims went away with the old process, so `--check` found
/// the port "in use by another process" and exited 2 while the upgraded
/// server ran. The claims are handed over with the sockets.
#[test]
fn check_after_an_upgrade_names_the_new_process_and_passes() {
    let site = Site::new("sockact-check");
    let server = Server::start(&site.root, &[]);
    let successors = Successors::default();
    let (addr, admin, old) = (server.plain_addr(), server.admin_addr(), server.pid());
    let new = upgrade(old, admin, &successors, &|| server.log_text());
    // Many asks first: each `--check` connects to the claim socket, and
    // unanswered connections would fill its backlog (129) until the next
    // `connect` blocked for ever.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("shardhttpd/listen/{addr}");
        let unix = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        for _ in 0..300 {
            drop(std::os::unix::net::UnixStream::connect_addr(&unix).unwrap());
        }
        let _ = done_tx.send(());
    });
    assert!(
        done_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "connecting to the claim socket blocked: nobody answers the askers"
    );
    let out = support::command()
        .args(["--root", &site.root.display().to_string()])
        .args(["--listen", &addr.to_string(), "--admin", &admin.to_string()])
        .arg("--check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    for what in [
        format!("listen address {addr}"),
        format!("admin address {admin}"),
    ] {
        assert!(
            stdout.contains(&format!(
                "{what} is held by the running shardhttpd (pid {new}); a reload or upgrade"
            )),
            "{stdout}"
        );
    }
    // A second instance is still refused, naming the new process.
    let out = support::command()
        .args(["--root", &site.root.display().to_string()])
        .args(["--listen", &addr.to_string(), "--admin", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("already in use by another shardhttpd (pid {new})")),
        "{stderr}"
    );
    signal(new, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(new)));
}

/// `ReusePort=yes`: the passed socket has SO_REUSEPORT, so the other
/// shards bind their own sockets beside it. systemd-socket-activate cannot
/// set it, so a few lines of Python do what systemd does.
#[test]
fn with_reuse_port_the_other_shards_bind_beside_the_passed_socket() {
    let Some(python) = support::find_program(&["python3"]) else {
        loud("SKIP: python3 not installed");
        return;
    };
    if shardhttpd::config::affinity_cpus().len() < 2 {
        loud("SKIP: one CPU in the affinity mask; one shard binds nothing beside");
        return;
    }
    let site = Site::new("sockact-reuseport");
    let port = free_port();
    let script = r#"
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(128)
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES="listen")
os.execve(sys.argv[2], sys.argv[2:], env)
"#;
    let mut cmd = Command::new(python);
    cmd.env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .args(["-c", script, &port.to_string()])
        .arg(bin())
        .args(args(&site, &format!("127.0.0.1:{port}")))
        .args(["--cores", "0-1"]);
    let server = Server::spawn_command(cmd, 1);
    assert_eq!(listening_sockets(port), 2, "{}", server.log_text());
    assert!(
        server
            .wait_for_log("the other shards bind beside it", Duration::ZERO)
            .is_some(),
        "{}",
        server.log_text()
    );
    for _ in 0..10 {
        assert_eq!(server.get("/digits.txt").status, 200);
    }
}
