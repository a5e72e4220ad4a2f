//! Configuration: `--check`, TOML files with unknown keys or bad values, and
//! flags winning over the file.

use crate::support;

use std::process::{Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::*;

/// Runs the binary to completion (10 s deadline) and returns its output.
fn run(args: &[&str]) -> Output {
    let mut child = command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shardhttpd");
    let end = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= end {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{args:?} still running after 10 s; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(POLL_STEP);
    }
    child.wait_with_output().expect("output")
}

fn write_config(site: &Site, text: &str) -> String {
    let path = write_file(site.base(), "shardhttpd.toml", text.as_bytes());
    path.display().to_string()
}

fn toml_root(site: &Site) -> String {
    format!("root = {:?}\n", site.root.display().to_string())
}

#[test]
fn check_accepts_a_valid_config() {
    let site = Site::new("check-ok");
    let cfg = write_config(
        &site,
        &format!(
            "{}listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\nmax_ranges = 8\n\
             header_timeout = 2.5\nserver_header = \"x\"\nserve_dotfiles = false\n",
            toml_root(&site)
        ),
    );
    let out = run(&["--config", &cfg, "--check"]);
    assert!(
        out.status.success(),
        "--check on a valid config: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_names_an_unknown_key() {
    let site = Site::new("check-unknown");
    let cfg = write_config(&site, &format!("{}bogus_setting = 1\n", toml_root(&site)));
    let out = run(&["--config", &cfg, "--check", "--admin", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "unknown key accepted: {stderr}");
    assert!(
        stderr.contains("bogus_setting"),
        "stderr should name the key: {stderr}"
    );
}

#[test]
fn check_names_a_bad_value() {
    let site = Site::new("check-bad");
    for (line, key) in [
        ("max_uri_bytes = 100000", "max_uri_bytes"),
        ("max_ranges = 0", "max_ranges"),
        ("header_timeout = -1", "header_timeout"),
        (
            "max_requests_per_connection = \"many\"",
            "max_requests_per_connection",
        ),
    ] {
        let cfg = write_config(&site, &format!("{}{line}\n", toml_root(&site)));
        let out = run(&["--config", &cfg, "--check", "--admin", "127.0.0.1:0"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line}: accepted: {stderr}");
        assert!(
            stderr.contains(key),
            "{line}: stderr should name {key}: {stderr}"
        );
    }
}

#[test]
fn check_rejects_a_bad_flag_value() {
    let site = Site::new("check-flag");
    let root = site.root.display().to_string();
    let out = run(&["--root", &root, "--max-uri-bytes", "100000", "--check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {stderr}");
    assert!(
        stderr.contains("max_uri_bytes") || stderr.contains("max-uri-bytes"),
        "{stderr}"
    );

    let missing = site.base().join("no-such-root").display().to_string();
    let out = run(&["--root", &missing, "--check"]);
    assert!(!out.status.success(), "missing root accepted");
}

#[test]
fn file_settings_apply_and_flags_override_them() {
    let site = Site::new("override");
    let cfg = write_config(
        &site,
        &format!("{}server_header = \"fromfile\"\n", toml_root(&site)),
    );
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "--config",
            &cfg,
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };

    let server = Server::spawn(&args(&[]), 1);
    let r = server.get("/index.html");
    assert_eq!(r.status, 200, "root from the file: {r:?}");
    assert_eq!(r.must("server"), "fromfile");
    drop(server);

    let server = Server::spawn(&args(&["--server-header", "fromflag"]), 1);
    let r = server.get("/index.html");
    assert_eq!(r.must("server"), "fromflag");
}

/// Issue 27: every configuration error names the file and line where the
/// key is (value errors found after parsing too, as parse errors do) and
/// says what to write instead. One row per message.
#[test]
fn errors_name_the_file_and_line_and_say_how_to_fix_it() {
    let site = Site::new("check-located");
    let missing = site.base().join("no-such-root").display().to_string();
    let root = toml_root(&site);
    let cases: Vec<(String, usize, &str)> = vec![
        // A value the parser takes, refused afterwards.
        (
            format!("# site\nroot = {missing:?}\n"),
            2,
            "key `root`: ",
        ),
        (
            format!("{root}compress = true\nbrotli_level = 12\n"),
            3,
            "key `brotli_level`: must be between 0 and 11",
        ),
        (
            format!("{root}max_ranges = 0\n"),
            2,
            "key `max_ranges`: must be at least 1",
        ),
        // Issue 36: an entry of a table at its own line.
        (
            format!("{root}[error_pages]\n200 = \"ok.html\"\n"),
            3,
            "key `error_pages.200`: `200` is not a 4xx or 5xx status",
        ),
        (
            format!("{root}error_pages = {{ 404 = \"../x.html\" }}\n"),
            2,
            "key `error_pages.404`: `../x.html` must be a file path relative to the root",
        ),
        // serde's type error, in an operator's words.
        (
            format!("{root}max_ranges = \"lots\"\n"),
            2,
            "key `max_ranges`: takes a whole number of 0 or more, e.g. `16`, not the string \"lots\"",
        ),
        (
            format!("{root}max_ranges = \"8\"\n"),
            2,
            "not the string \"8\"; write it without quotes",
        ),
        // A top-level key after a table belongs to the table.
        (
            format!(
                "{root}[[headers]]\nglob = \"*\"\nset = {{ X-A = \"b\" }}\nkeepalive_timeout = 5\n"
            ),
            5,
            "key `keepalive_timeout` after `[[headers]]` belongs to that table; move it above `[[headers]]`",
        ),
    ];
    for (text, line, want) in &cases {
        let cfg = write_config(&site, text);
        let out = run(&["--config", &cfg, "--check", "--admin", "127.0.0.1:0"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        let at = format!("config file {cfg}, line {line}: ");
        assert!(stderr.contains(&at), "{text}: names {at:?}: {stderr}");
        assert!(stderr.contains(want), "{text}: says {want:?}: {stderr}");
        assert!(
            !stderr.contains("did you mean `keepalive_timeout`"),
            "{text}: {stderr}"
        );
    }
    // The root's message says what to do about it.
    let cfg = write_config(&site, &format!("root = {missing:?}\n"));
    let out = run(&["--config", &cfg, "--check", "--admin", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not exist; create it, or point `root` at"),
        "{stderr}"
    );
    // The same value as a flag is named as the flag.
    let out = run(&["--config", &cfg, "--root", &missing, "--check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("flag `--root`: "), "{stderr}");
}

/// A key that does not match its certificate is named by file and line
/// (issue 27), the line of the `key =` itself (issue 36).
#[test]
fn a_key_that_does_not_match_its_certificate_is_located() {
    let site = Site::new("check-keypair");
    let ca = support::tls::Ca::new();
    let a = ca.leaf(site.base(), "a", &["localhost"]);
    let b = ca.leaf(site.base(), "b", &["localhost"]);
    let cfg = write_config(
        &site,
        &format!(
            "{}tls_listen = \"127.0.0.1:0\"\n\n[[tls_certificates]]\ncert = {:?}\nkey = {:?}\n\n\
             [[tls_certificates]]\ncert = {:?}\nkey = {:?}\n",
            toml_root(&site),
            a.cert.display().to_string(),
            a.key.display().to_string(),
            a.cert.display().to_string(),
            b.key.display().to_string(),
        ),
    );
    let out = run(&["--config", &cfg, "--check", "--admin", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "config file {cfg}, line 10: key `tls_certificates[1].key`: the key in"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("give the key the certificate was issued for"),
        "{stderr}"
    );
}

/// Runs `--check` on a config file of `text` and returns its stderr, which
/// must say exit status 2.
fn check_refuses(site: &Site, text: &str) -> (String, String) {
    let cfg = write_config(site, text);
    let out = run(&["--config", &cfg, "--check"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
    (cfg, stderr)
}

/// Issue 36: an error that involves two keys points at the one the file
/// sets (`tls_listen` without a certificate is `tls_listen`'s error, not
/// that of the `tls_cert` nobody wrote), and a syntax error names the
/// column too. One row per message: the text, the line (and column), what
/// it says.
#[test]
fn issue36_every_error_names_the_line_of_a_key_the_file_sets() {
    let site = Site::new("check-cross-key");
    let root = toml_root(&site);
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("{root}listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ntls_listen = \"127.0.0.1:0\"\n"),
            "line 4: key `tls_listen`: ",
            "needs a certificate: `tls_cert` and `tls_key`, `[[tls_certificates]]`, or `acme_domains`",
        ),
        (
            format!("{root}admin = \"127.0.0.1:0\"\ntls_cert = \"c.pem\"\n"),
            "line 3: key `tls_cert`: ",
            "needs `tls_key` too",
        ),
        (
            format!("{root}admin = \"127.0.0.1:0\"\ntls_key = \"k.pem\"\n"),
            "line 3: key `tls_key`: ",
            "needs `tls_cert` too",
        ),
        (
            format!("{root}admin = \"127.0.0.1:0\"\n[[tls_certificates]]\ncert = \"c.pem\"\nkey = \"k.pem\"\n"),
            "line 3: key `tls_certificates`: ",
            "needs `tls_listen`, the address to serve HTTPS on",
        ),
        (
            format!("{root}admin = \"127.0.0.1:0\"\nmax_head_bytes = 300\n"),
            "line 3: key `max_head_bytes`: ",
            "max_uri_bytes (4096) must be below max_head_bytes (300)",
        ),
        (
            format!("{root}listen = \"127.0.0.1:9180\"\n"),
            "line 2: key `listen`: ",
            "127.0.0.1:9180 is the admin address and also a listen address",
        ),
        (
            format!("{root}admin = \"127.0.0.1:0\"\nacme_eab_kid = \"kid\"\nacme_domains = \"example.com\"\n\
                     tls_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\n"),
            "line 3: key `acme_eab_kid`: ",
            "needs `acme_eab_hmac_key` too",
        ),
        // TOML syntax: the column shows which character is wrong.
        (
            format!("{root}max_ranges = = 3\n"),
            "line 2, column 14: ",
            "TOML syntax: invalid string; expected",
        ),
        (
            format!("{root}server_header = \"a\" b\n"),
            "line 2, column 21: ",
            "TOML syntax: expected newline",
        ),
    ];
    for (text, at, want) in &cases {
        let (cfg, stderr) = check_refuses(&site, text);
        let at = format!("config file {cfg}, {at}");
        assert!(stderr.contains(&at), "{text}: names {at:?}: {stderr}");
        assert!(stderr.contains(want), "{text}: says {want:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{text}: one line: {stderr}");
    }
}

/// Issue 36: a bad `[[headers]]` entry is found at the bad key's line (the
/// glob, or the header name in either spelling of `set`), not at the
/// table's header line.
#[test]
fn issue36_a_bad_headers_entry_points_at_its_key() {
    let site = Site::new("check-headers-line");
    let head = format!("{}admin = \"127.0.0.1:0\"\n", toml_root(&site));
    let good = "[[headers]]\nglob = \"*.css\"\nset = { X-A = \"1\" }\n\n";
    let cases = [
        (
            format!("{head}{good}[[headers]]\nglob = \"[*\"\nset = {{ X-B = \"2\" }}\n"),
            8,
            "key `headers[1].glob`: glob `[*`",
        ),
        (
            format!("{head}{good}[[headers]]\nglob = \"*\"\nset = {{ \"Bad Name\" = \"2\" }}\n"),
            9,
            "key `headers[1].set.Bad Name`: `Bad Name` is not a header name",
        ),
        (
            format!(
                "{head}{good}[[headers]]\nglob = \"*\"\n[headers.set]\nX-Ok = \"1\"\n\"Bad Name\" = \"2\"\n"
            ),
            11,
            "key `headers[1].set.Bad Name`: `Bad Name` is not a header name",
        ),
    ];
    for (text, line, want) in &cases {
        let (cfg, stderr) = check_refuses(&site, text);
        let at = format!("config file {cfg}, line {line}: ");
        assert!(stderr.contains(&at), "{text}: names {at:?}: {stderr}");
        assert!(stderr.contains(want), "{text}: says {want:?}: {stderr}");
    }
}

/// Issue 36: `cores` in the file takes what `--cores` takes, a count or a
/// CPU list; a negative number is refused at its line.
#[test]
fn issue36_cores_in_the_file_takes_a_count_or_a_list() {
    let site = Site::new("check-cores");
    let head = format!(
        "{}listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n",
        toml_root(&site)
    );
    // A string without `-` or `,` is a count, as the flag's is.
    for cores in ["cores = 1", "cores = \"0-0\"", "cores = \"1\""] {
        let cfg = write_config(&site, &format!("{head}{cores}\n"));
        let out = run(&["--config", &cfg, "--check"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{cores}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("1 shard(s) on CPUs [0]"),
            "{cores}: {stdout}"
        );
    }
    let (cfg, stderr) = check_refuses(&site, &format!("{head}cores = -1\n"));
    assert!(
        stderr.contains(&format!(
            "config file {cfg}, line 4: key `cores`: takes a count of CPUs, e.g. `4`, \
             or a CPU list in quotes"
        )),
        "{stderr}"
    );
}

/// Issue 36: with neither `--root` nor a config file, a binary started
/// away from a source checkout says how to name a root, not that
/// `examples/site` does not exist; from the checkout it serves the
/// example site, as README's first command does.
#[test]
fn issue36_no_root_says_how_to_name_one() {
    let site = Site::new("check-no-root");
    let args = [
        "--check",
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
    ];
    let out = command()
        .args(args)
        .current_dir(site.base())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no document root: pass `--root DIR`")
            && stderr.contains("or `--config FILE` with `root = \"DIR\"`"),
        "{stderr}"
    );
    assert!(!stderr.contains("does not exist"), "{stderr}");
    // A file without `root` is told to add it.
    let cfg = write_config(&site, "listen = \"127.0.0.1:0\"\n");
    let out = command()
        .args(["--config", &cfg])
        .args(args)
        .current_dir(site.base())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("config file {cfg}: no `root` key: add one")),
        "{stderr}"
    );
    // From the checkout, the default is the bundled site.
    let out = command()
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("root examples/site"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 36: what `--check` finds after validation (an address another
/// process holds, the access log's missing directory) names the line of
/// the key too, or the flag that gave it.
#[test]
fn issue36_errors_the_check_finds_name_the_key_that_gave_them() {
    let site = Site::new("check-located-env");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy = busy.local_addr().unwrap().to_string();
    let missing = site.base().join("no-such-dir").join("access.log");
    let root = toml_root(&site);
    let cases = [
        (
            format!("{root}listen = \"127.0.0.1:0\"\nadmin = {busy:?}\n"),
            "line 3: key `admin`: ",
            format!("admin address {busy} is already in use"),
        ),
        (
            format!(
                "{root}listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\naccess_log = {:?}\n",
                missing.display().to_string()
            ),
            "line 4: key `access_log`: ",
            "directory".to_owned(),
        ),
    ];
    for (text, at, want) in &cases {
        let (cfg, stderr) = check_refuses(&site, text);
        let at = format!("config file {cfg}, {at}");
        assert!(stderr.contains(&at), "{text}: names {at:?}: {stderr}");
        assert!(stderr.contains(want), "{text}: says {want:?}: {stderr}");
    }
    let cfg = write_config(&site, &format!("{root}listen = \"127.0.0.1:0\"\n"));
    let out = run(&["--config", &cfg, "--check", "--admin", &busy]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("flag `--admin`: admin address {busy}")),
        "{stderr}"
    );
}
