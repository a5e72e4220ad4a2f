//! Operator experience (issue 13): a second instance cannot share a port,
//! `--check` catches what would fail at start, exit codes, and the admin
//! listener answering while a slow first snapshot builds.

use crate::support;

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::privilege::{running_as_root, setpriv_nobody};
use support::*;

/// Runs `cmd` to completion (20 s deadline) and returns its output.
fn finish(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shardhttpd");
    let end = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= end {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what}: still running after 20 s; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(POLL_STEP);
    }
    child.wait_with_output().expect("output")
}

fn run(args: &[&str]) -> Output {
    let mut cmd = command();
    cmd.args(args);
    finish(cmd, &format!("{args:?}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command running the binary as an unprivileged user without
/// capabilities: as root, through `setpriv` (as nobody); otherwise as is.
/// `None` (after a loud SKIP) when that is not possible here.
fn unprivileged() -> Option<Command> {
    if !running_as_root() {
        return Some(command());
    }
    let mut cmd = setpriv_nobody("cannot drop root for the unprivileged checks")?;
    cmd.env("NO_COLOR", "1").env("RUST_LOG", "info");
    Some(cmd)
}

/// A site whose directories nobody can read, for the unprivileged runs.
fn world_readable(site: &Site) {
    use std::os::unix::fs::PermissionsExt;
    for dir in [site.base(), site.root.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn second_instance_on_the_same_port_is_refused() {
    let site = Site::new("second-instance");
    let first = Server::start(&site.root, &[]);
    let addr = first.addr().to_string();
    let root = site.root.display().to_string();
    let out = run(&["--root", &root, "--listen", &addr, "--admin", "127.0.0.1:0"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "second instance: {err}");
    assert!(err.contains(&addr), "the message names the address: {err}");
    assert!(err.contains("already in use"), "{err}");
    assert!(
        err.contains(&format!("shardhttpd (pid {})", first.pid())),
        "names the holder: {err}"
    );
    // The first one still serves, alone.
    assert_eq!(first.get("/index.html").status, 200);
}

#[test]
fn a_foreign_reuseport_listener_is_detected() {
    use socket2::{Domain, Socket, Type};
    let site = Site::new("foreign-reuseport");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let other = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    other.set_reuse_port(true).unwrap();
    other.bind(&addr.into()).unwrap();
    other.listen(16).unwrap();
    let root = site.root.display().to_string();
    let addr = addr.to_string();
    for check in [true, false] {
        let mut args = vec!["--root", &root, "--listen", &addr, "--admin", "127.0.0.1:0"];
        if check {
            args.push("--check");
        }
        let out = run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "check={check}: {err}");
        assert!(
            err.contains(&addr) && err.contains("already in use"),
            "{err}"
        );
    }
}

#[test]
fn privileged_port_without_capability_exits_2_naming_the_fix() {
    let site = Site::new("privileged");
    world_readable(&site);
    let root = site.root.display().to_string();
    for check in [true, false] {
        let Some(mut cmd) = unprivileged() else {
            return;
        };
        cmd.args([
            "--root",
            &root,
            "--listen",
            "127.0.0.1:81",
            "--admin",
            "127.0.0.1:0",
        ]);
        if check {
            cmd.arg("--check");
        }
        let out = finish(cmd, "privileged port");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "check={check}: {err}");
        assert!(err.contains("127.0.0.1:81"), "{err}");
        assert!(err.contains("CAP_NET_BIND_SERVICE"), "{err}");
    }
}

#[test]
fn check_refuses_an_admin_address_equal_to_a_listen_address() {
    let site = Site::new("check-admin");
    let root = site.root.display().to_string();
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let out = run(&[
        "--root", &root, "--listen", &addr, "--admin", &addr, "--check",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--admin") && err.contains(&addr), "{err}");
}

#[test]
fn check_refuses_an_unreadable_root() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new("check-unreadable");
    world_readable(&site);
    std::fs::set_permissions(&site.root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = site.root.display().to_string();
    let Some(mut cmd) = unprivileged() else {
        return;
    };
    cmd.args([
        "--root",
        &root,
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--check",
    ]);
    let out = finish(cmd, "unreadable root");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not readable") && err.contains(&root), "{err}");
}

#[test]
fn check_refuses_a_missing_access_log_directory() {
    let site = Site::new("check-log");
    let root = site.root.display().to_string();
    let log = site.base().join("no-such-dir/access.log");
    let log = log.display().to_string();
    let out = run(&[
        "--root",
        &root,
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--access-log",
        &log,
        "--check",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("does not exist") && err.contains("no-such-dir"),
        "{err}"
    );
}

#[test]
fn check_passes_and_notes_a_port_held_by_a_running_instance() {
    let site = Site::new("check-running");
    let server = Server::start(&site.root, &[]);
    let root = site.root.display().to_string();
    let addr = server.addr().to_string();
    let out = run(&[
        "--root",
        &root,
        "--listen",
        &addr,
        "--admin",
        "127.0.0.1:0",
        "--check",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout.contains(&addr) && stdout.contains("running shardhttpd"),
        "{stdout}"
    );
}

/// Issue 27: `--check` passed (with a note) when the admin port was taken,
/// then the start failed with exit 2. It fails as it does for `listen`,
/// naming the address and the fix; an admin port held by a running
/// shardhttpd (checking next to the running server) is still only a note.
#[test]
fn check_fails_when_the_admin_address_is_taken() {
    let site = Site::new("check-admin-busy");
    let root = site.root.display().to_string();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let out = run(&[
        "--root",
        &root,
        "--listen",
        "127.0.0.1:0",
        "--admin",
        &busy_addr,
        "--check",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("admin address {busy_addr} is already in use")),
        "{err}"
    );
    assert!(
        err.contains("ss -ltnp"),
        "says how to find the holder: {err}"
    );
    drop(busy);

    let server = Server::start(&site.root, &[]);
    let admin = server.admin_addr().to_string();
    let out = run(&[
        "--root",
        &root,
        "--listen",
        "127.0.0.1:0",
        "--admin",
        &admin,
        "--check",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout.contains(&format!(
            "admin address {admin} is held by the running shardhttpd (pid {})",
            server.pid()
        )),
        "{stdout}"
    );
}

/// Every exit status the documentation promises, one row per cause.
#[test]
fn exit_code_table() {
    let site = Site::new("exit-codes");
    let root = site.root.display().to_string();
    let bad_toml = write_file(site.base(), "bad.toml", b"max_ranges = \"many\"\n");
    let bad_toml = bad_toml.display().to_string();
    let missing = site.base().join("missing").display().to_string();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let base = ["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"];
    let table: &[(&str, Vec<&str>, i32)] = &[
        ("a valid --check", vec!["--root", &root, "--check"], 0),
        ("--help", vec!["--help"], 0),
        ("an unknown flag", vec!["--no-such-flag"], 2),
        (
            "a bad flag value",
            vec!["--root", &root, "--keepalive-timeout", "soon"],
            2,
        ),
        (
            "a bad key in the file",
            vec!["--root", &root, "--config", &bad_toml],
            2,
        ),
        ("a missing config file", vec!["--config", &missing], 2),
        ("a missing root", vec!["--root", &missing], 2),
        (
            "a listen address in use",
            vec!["--root", &root, "--listen", &busy_addr],
            2,
        ),
        (
            "an admin address in use",
            vec!["--root", &root, "--admin", &busy_addr],
            2,
        ),
    ];
    for (what, args, want) in table {
        let mut all: Vec<&str> = Vec::new();
        // Later flags win in clap only for single values; put base first so
        // a row's own --listen/--admin is the one used.
        for pair in base.chunks(2) {
            if !args.contains(&pair[0]) && !args.contains(&"--help") {
                all.extend(pair);
            }
        }
        all.extend(args.iter());
        let out = run(&all);
        assert_eq!(
            out.status.code(),
            Some(*want),
            "{what}: {all:?}\n{}",
            stderr(&out)
        );
    }
    // SIGTERM after serving: 0.
    let mut server = Server::start(&site.root, &[]);
    server.signal("TERM");
    let status = server.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(0), "SIGTERM");
    drop(busy);
}

#[test]
fn listen_as_one_string_and_durations_with_units() {
    let site = Site::new("units");
    let cfg = write_file(
        site.base(),
        "units.toml",
        format!(
            "root = {:?}\nlisten = \"localhost:0\"\nadmin = \"127.0.0.1:0\"\n\
             keepalive_timeout = \"1m\"\nheader_timeout = \"500ms\"\nshutdown_grace = \"2s\"\n\
             cache_max_bytes = \"64MiB\"\nsendfile_threshold = \"64KiB\"\n\
             watch_debounce_ms = \"20ms\"\n",
            site.root.display().to_string()
        )
        .as_bytes(),
    );
    let cfg = cfg.display().to_string();
    let server = Server::spawn(&["--config".to_string(), cfg], 1);
    assert!(server.addr().ip().is_loopback(), "{}", server.addr());
    assert_eq!(server.get("/index.html").status, 200);
    // header_timeout = "500ms": a silent connection gets 408 well before 5 s.
    let mut c = server.connect();
    c.send(b"GET / HTTP/1.1\r\n");
    let started = Instant::now();
    let r = c.read_response().expect("408");
    assert_eq!(r.status, 408, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// GET on the admin port; the status, or None if it does not answer.
fn admin_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut c = Conn::try_connect(addr).ok()?;
    c.try_send(get(path).as_bytes()).ok()?;
    c.read_response().ok().map(|r| r.status)
}

#[test]
fn readyz_is_503_while_the_first_snapshot_builds_then_200() {
    // Enough files that the first build takes a while even on a fast
    // machine; compression off so it is walking and reading, not CPU.
    let site = Site::new("slow-build");
    let body = vec![b'x'; 2048];
    for d in 0..60 {
        for f in 0..250 {
            write_file(&site.root, &format!("d{d}/f{f}.txt"), &body);
        }
    }
    let root = site.root.display().to_string();
    let mut child = command()
        .args([
            "--root",
            &root,
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--compress",
            "false",
            "--watch",
            "false",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    {
        let lines = std::sync::Arc::clone(&lines);
        thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                lines.lock().unwrap().push(strip_ansi(&l));
            }
        });
    }
    let find = |needle: &str| {
        lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .cloned()
    };
    let mut admin = None;
    assert!(
        poll_until(Duration::from_secs(10), || {
            admin = find("admin endpoint addr=")
                .and_then(|l| log_field(&l, "addr").and_then(|a| a.parse::<SocketAddr>().ok()));
            admin.is_some()
        }),
        "no admin line: {:?}",
        lines.lock().unwrap()
    );
    let admin = admin.unwrap();
    let (mut saw_503, mut healthz_during_build) = (false, false);
    let ready = poll_until(Duration::from_secs(120), || {
        let building = find("listening addr=").is_none();
        match admin_status(admin, "/readyz") {
            Some(503) if building => {
                saw_503 = true;
                healthz_during_build |= admin_status(admin, "/healthz") == Some(200)
                    && find("listening addr=").is_none();
                false
            }
            Some(200) => true,
            _ => false,
        }
    });
    // /readyz turns 200 once every shard runs, which can be just before
    // the server logs "listening" (and the reader thread has it).
    poll_until(Duration::from_secs(5), || find("listening addr=").is_some());
    let log = lines.lock().unwrap().join("\n");
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "/readyz never turned 200:\n{log}");
    assert!(
        saw_503,
        "/readyz was never 503 while building (build too fast?):\n{log}"
    );
    assert!(
        healthz_during_build,
        "/healthz did not answer during the build:\n{log}"
    );
    let building = log.find("building the first snapshot").expect("build line");
    let listening = log.find("listening addr=").expect("listening line");
    assert!(building < listening, "{log}");
}
