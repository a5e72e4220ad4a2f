//! The access log: both formats parse, lines from concurrent shards never
//! interleave, and SIGUSR1 reopens the file for logrotate.

use crate::support;

use std::fs;
use std::thread;

use support::access_log::{lines, wait_for_lines, FLUSHED_WITHIN};
use support::{poll_until, request, Server, Site};

/// One combined-format line, split into its fields.
#[derive(Debug)]
struct Combined {
    addr: String,
    time: String,
    request: String,
    status: u16,
    bytes: u64,
    referer: String,
    agent: String,
}

/// `addr - - [time] "request" status bytes "referer" "agent"`; quotes inside
/// fields are escaped as `\x22`, so splitting on `"` is exact.
fn parse_combined(line: &str) -> Result<Combined, String> {
    let err = || format!("not a combined line: {line:?}");
    let (addr, rest) = line.split_once(" - - [").ok_or_else(err)?;
    let (time, rest) = rest.split_once("] \"").ok_or_else(err)?;
    let (request, rest) = rest.split_once("\" ").ok_or_else(err)?;
    let (status, rest) = rest.split_once(' ').ok_or_else(err)?;
    let (bytes, rest) = rest.split_once(" \"").ok_or_else(err)?;
    let (referer, rest) = rest.split_once("\" \"").ok_or_else(err)?;
    let agent = rest.strip_suffix('"').ok_or_else(err)?;
    if [request, referer, agent].iter().any(|f| f.contains('"')) {
        return Err(err());
    }
    Ok(Combined {
        addr: addr.to_owned(),
        time: time.to_owned(),
        request: request.to_owned(),
        status: status.parse().map_err(|_| err())?,
        bytes: bytes.parse().map_err(|_| err())?,
        referer: referer.to_owned(),
        agent: agent.to_owned(),
    })
}

#[test]
fn combined_format_lines_parse() {
    let site = Site::new("alog-combined");
    let log = site.base().join("access.log");
    let server = Server::start(&site.root, &["--access-log", log.to_str().unwrap()]);
    let r = server.send(&request(
        "GET",
        "/style.css?v=1",
        &[
            ("Referer", "http://example.test/"),
            ("User-Agent", "probe \"quoted\""),
        ],
    ));
    assert_eq!(r.status, 200);
    let css_len = r.body.len() as u64;
    assert_eq!(server.get("/missing").status, 404);
    assert_eq!(server.send("GARBAGE\r\n\r\n").status, 400);

    let got = wait_for_lines(&log, 3);
    let parsed: Vec<Combined> = got
        .iter()
        .map(|l| parse_combined(l).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let css = parsed
        .iter()
        .find(|c| c.request == "GET /style.css?v=1 HTTP/1.1")
        .expect("the style.css line");
    assert_eq!(css.addr, "127.0.0.1");
    assert_eq!((css.status, css.bytes), (200, css_len));
    assert_eq!(css.referer, "http://example.test/");
    assert_eq!(css.agent, "probe \\x22quoted\\x22", "quotes are escaped");
    // [30/Nov/2026:15:04:17 +0000]
    assert_eq!(css.time.len(), 26, "{:?}", css.time);
    assert!(css.time.ends_with(" +0000"), "{:?}", css.time);
    assert!(parsed
        .iter()
        .any(|c| c.request == "GET /missing HTTP/1.1" && c.status == 404 && c.agent == "-"));
    assert!(
        parsed
            .iter()
            .any(|c| c.request == "- - -" && c.status == 400),
        "an unparsable request is logged too: {got:?}"
    );
}

#[test]
fn json_format_lines_parse() {
    let site = Site::new("alog-json");
    let log = site.base().join("access.json");
    let server = Server::start(
        &site.root,
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            "json",
        ],
    );
    let r = server.send(&request(
        "HEAD",
        "/index.html",
        &[("User-Agent", "a\"b\\c é")],
    ));
    assert_eq!(r.status, 200);
    let got = wait_for_lines(&log, 1);
    let v: serde_json::Value =
        serde_json::from_str(&got[0]).unwrap_or_else(|e| panic!("not JSON: {e}: {:?}", got[0]));
    assert_eq!(v["remote_addr"], "127.0.0.1");
    assert_eq!(v["method"], "HEAD");
    assert_eq!(v["uri"], "/index.html");
    assert_eq!(v["protocol"], "HTTP/1.1");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes"], 0, "HEAD sends no body");
    assert_eq!(v["user_agent"], "a\"b\\c é");
    let time = v["time"].as_str().expect("time");
    // 2026-11-30T15:04:17.123Z: UTC with milliseconds
    assert_eq!(time.len(), 24, "{time}");
    assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
    assert!(time[20..23].bytes().all(|b| b.is_ascii_digit()), "{time}");
}

#[test]
fn concurrent_shards_never_interleave_within_a_line() {
    let site = Site::new("alog-concurrent");
    let log = site.base().join("access.log");
    let server = Server::start(
        &site.root,
        &["--access-log", log.to_str().unwrap(), "--cores", "2"],
    );
    let addr = server.addr();
    const THREADS: usize = 8;
    const PER_THREAD: usize = 250;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            thread::spawn(move || {
                for i in 0..PER_THREAD {
                    // New connections, so the kernel spreads them over both
                    // shards; a long, distinct target per request makes a
                    // torn line detectable.
                    let mut c = support::Conn::connect(addr);
                    let path = format!("/digits.txt?thread={t}&i={i}&pad={}", "x".repeat(200));
                    c.send(support::get(&path).as_bytes());
                    let r = c.read_response_to("GET").expect("response");
                    assert_eq!(r.status, 200);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client thread");
    }
    let got = wait_for_lines(&log, THREADS * PER_THREAD);
    assert_eq!(got.len(), THREADS * PER_THREAD, "one line per request");
    let mut seen = std::collections::HashSet::new();
    for line in &got {
        let c = parse_combined(line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.status, 200);
        assert!(
            c.request
                .ends_with(&format!("{} HTTP/1.1", "x".repeat(200))),
            "{line}"
        );
        assert!(seen.insert(c.request.clone()), "duplicate line {line}");
    }
}

#[test]
fn sigusr1_reopens_the_file() {
    let site = Site::new("alog-reopen");
    let log = site.base().join("access.log");
    let rotated = site.base().join("access.log.1");
    let server = Server::start(&site.root, &["--access-log", log.to_str().unwrap()]);

    assert_eq!(server.get("/index.html?before").status, 200);
    wait_for_lines(&log, 1);
    // logrotate: rename, then signal. Until the signal the server keeps
    // writing to the renamed file.
    fs::rename(&log, &rotated).expect("rotate");
    assert_eq!(server.get("/index.html?between").status, 200);
    assert!(
        poll_until(FLUSHED_WITHIN, || lines(&rotated).len() >= 2),
        "lines before the signal go to the renamed file"
    );
    server.signal("USR1");
    assert!(
        poll_until(FLUSHED_WITHIN, || log.exists()),
        "SIGUSR1 creates a new file\n{}",
        server.log_text()
    );
    assert_eq!(server.get("/index.html?after").status, 200);
    let fresh = wait_for_lines(&log, 1);
    assert!(fresh[0].contains("?after"), "{fresh:?}");
    let old = lines(&rotated);
    assert!(old.iter().all(|l| !l.contains("?after")), "{old:?}");
    assert!(
        old[0].contains("?before") && old[1].contains("?between"),
        "{old:?}"
    );
}
