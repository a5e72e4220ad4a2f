//! The access log's newer fields: host, request time, request id and
//! millisecond timestamps, in the JSON format (fields chosen and ordered by
//! `access_log_fields`) and in `combined_timed`, over HTTP/1, HTTP/2 (h2c
//! and over TLS) and TLS; the default combined line stays nginx's, as jq
//! and goaccess read them; `request_id_header` kept from a trusted proxy
//! and made for anyone else, on every response; `real_ip_header` on h2.

use crate::http2::{h2_site, Both};
use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::access_log::wait_for_lines;
use support::h2::{curl, Target};
use support::tls::Transport;
use support::{installed, loud, request, Server, Site};

/// The JSON keys of a default line, in order.
const ALL_FIELDS: [&str; 15] = [
    "time",
    "remote_addr",
    "method",
    "uri",
    "protocol",
    "status",
    "bytes",
    "referer",
    "user_agent",
    "tls_version",
    "tls_cipher",
    "host",
    "request_time_us",
    "request_id",
    "site",
];

/// A JSON line's keys in the order written (serde_json's map sorts them).
fn keys_in_order(line: &str) -> Vec<String> {
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {e}: {line}"));
    let mut keys: Vec<(usize, String)> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(|k| {
            let at = line
                .find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} in {line}"));
            (at, k.clone())
        })
        .collect();
    keys.sort();
    keys.into_iter().map(|(_, k)| k).collect()
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {e}: {line}"))
}

/// `2026-12-03T06:27:37.123Z`, as milliseconds since the epoch.
fn ms_of(time: &str) -> u64 {
    let b = time.as_bytes();
    assert_eq!(b.len(), 24, "{time}");
    assert!(
        time.ends_with('Z') && b[10] == b'T' && b[19] == b'.',
        "{time}"
    );
    let n = |r: std::ops::Range<usize>| -> i64 {
        time[r]
            .parse()
            .unwrap_or_else(|_| panic!("bad time {time}"))
    };
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    secs as u64 * 1000 + n(20..23) as u64
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn is_made_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A GET with `host` as its Host header.
fn get_with_host(path: &str, host: &str, headers: &[(&str, &str)]) -> String {
    let mut s = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s + "\r\n"
}

/// A server on `site` writing the JSON access log to `log`, with `extra`
/// flags after those.
fn json_log_server(site: &Site, log: &Path, extra: &[&str]) -> Server {
    let log = log.display().to_string();
    let mut args = vec!["--access-log", &log, "--access-log-format", "json"];
    args.extend(extra);
    Server::start(&site.root, &args)
}

fn curl_or_skip(what: &str) -> bool {
    if !installed("curl") {
        loud(&format!("SKIP: {what}: curl not installed"));
        return false;
    }
    true
}

/// Every field of the default JSON line, for h1 and h2 over cleartext and
/// TLS: in order, the time with milliseconds, the host each protocol
/// names, a plausible request time, and the id the response carried.
#[test]
fn json_lines_carry_every_field_over_h1_h2_and_tls() {
    if !curl_or_skip("access log fields over h2") {
        return;
    }
    let site = h2_site("alogf-json");
    let log = site.base().join("access.json");
    let log_s = log.display().to_string();
    let both = Both::start(
        &site,
        &[
            "--access-log",
            &log_s,
            "--access-log-format",
            "json",
            "--request-id-header",
            "X-Request-Id",
        ],
    );
    let before = now_ms();
    let mut sent = Vec::new(); // (uri, host, protocol, tls, request id)
    for t in [Transport::Plain, Transport::Tls] {
        let uri = format!("/index.html?h1-{t:?}");
        let r = both.tls.wire(t).roundtrip(&get_with_host(
            &uri,
            "site.test:8080",
            &[("Referer", "http://r.test/")],
        ));
        assert_eq!(r.status, 200);
        let id = r.must("X-Request-Id").to_owned();
        sent.push((
            uri,
            "site.test:8080".to_owned(),
            "HTTP/1.1",
            t == Transport::Tls,
            id,
        ));
    }
    for target in both.targets() {
        let uri = format!("/index.html?h2-{}", target.name().replace(' ', "-"));
        let c = curl(&target, &uri, &["-A", "curl-h2"]);
        assert_eq!(c.response.status, 200, "{}", c.log);
        let id = c.response.must("x-request-id").to_owned();
        let host = match target.is_tls() {
            true => format!("localhost:{}", target.addr.port()),
            false => target.addr.to_string(),
        };
        sent.push((uri, host, "HTTP/2.0", target.is_tls(), id));
    }
    let got = wait_for_lines(&log, sent.len());
    let after = now_ms();
    for (uri, host, protocol, tls, id) in &sent {
        assert!(is_made_id(id), "{uri}: made id {id:?}");
        let line = got
            .iter()
            .find(|l| json(l)["uri"] == uri.as_str())
            .unwrap_or_else(|| panic!("no line for {uri}: {got:#?}"));
        assert_eq!(keys_in_order(line), ALL_FIELDS, "{line}");
        let v = json(line);
        let ms = ms_of(v["time"].as_str().unwrap());
        assert!(before - 1000 <= ms && ms <= after + 1000, "{line}");
        assert_eq!(v["remote_addr"], "127.0.0.1", "{line}");
        assert_eq!(v["method"], "GET");
        assert_eq!(v["protocol"], *protocol, "{line}");
        assert_eq!(v["status"], 200);
        assert!(v["bytes"].as_u64().unwrap() > 0, "{line}");
        assert_eq!(v["host"], host.as_str(), "{line}");
        let us = v["request_time_us"].as_u64().expect("a number");
        assert!(us < 5_000_000, "{line}");
        assert_eq!(v["request_id"], id.as_str(), "{line}");
        assert_eq!(
            v["tls_version"].as_str().unwrap().starts_with("TLSv1."),
            *tls,
            "{line}"
        );
        assert_eq!(
            v["tls_cipher"].as_str().unwrap().is_empty(),
            !*tls,
            "{line}"
        );
    }
    let h1 = got.iter().find(|l| l.contains("h1-Plain")).unwrap();
    assert_eq!(json(h1)["referer"], "http://r.test/");
    let h2 = got.iter().find(|l| l.contains("h2-h2c")).unwrap();
    assert_eq!(json(h2)["user_agent"], "curl-h2");
    // Distinct ids, across shards and protocols.
    let mut ids: Vec<_> = sent.iter().map(|s| s.4.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), sent.len(), "{sent:?}");
    if installed("jq") {
        let out = Command::new("jq")
            .args(["-e", "-s", "map(.request_time_us, .status) | length"])
            .arg(&log)
            .output()
            .expect("run jq");
        assert!(out.status.success(), "jq: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            (2 * sent.len()).to_string()
        );
    } else {
        loud("SKIP: jq not installed: JSON lines checked with serde_json only");
    }
}

/// `access_log_fields` writes exactly the fields it lists, in its order;
/// the request id is empty without `request_id_header`.
#[test]
fn access_log_fields_choose_and_order_the_json_keys() {
    let site = Site::new("alogf-choose");
    let log = site.base().join("access.json");
    let server = json_log_server(
        &site,
        &log,
        &["--access-log-fields", "status,uri,request_id,host"],
    );
    let r = server.send(&get_with_host("/index.html", "a.test", &[]));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Request-Id"), None, "off by default");
    let got = wait_for_lines(&log, 1);
    assert_eq!(
        got[0],
        r#"{"status":200,"uri":"/index.html","request_id":"","host":"a.test"}"#
    );
}

fn check(site: &Site, toml: &str) -> (bool, String) {
    let path = support::write_file(site.base(), "shardhttpd.toml", toml.as_bytes());
    let out = support::command()
        .args(["--config", path.to_str().unwrap(), "--check"])
        .args(["--admin", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .expect("run --check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An unknown field name, or fields for a format that has none, is an
/// error naming the file and line; so is a bad `request_id_header`.
#[test]
fn access_log_field_errors_name_the_file_and_line() {
    let site = Site::new("alogf-errors");
    let root = format!("root = {:?}\n", site.root.display().to_string());
    let (ok, stderr) = check(
        &site,
        &format!(
            "{root}access_log_format = \"json\"\n\naccess_log_fields = [\"time\", \"statsu\"]\n"
        ),
    );
    assert!(!ok, "accepted: {stderr}");
    assert!(
        stderr.contains("shardhttpd.toml, line 4: key `access_log_fields`")
            && stderr.contains("unknown field `statsu`")
            && stderr.contains("request_time_us"),
        "{stderr}"
    );
    let (ok, stderr) = check(&site, &format!("{root}access_log_fields = [\"time\"]\n"));
    assert!(!ok, "accepted: {stderr}");
    assert!(
        stderr.contains("line 2: key `access_log_fields`") && stderr.contains("json"),
        "{stderr}"
    );
    let (ok, stderr) = check(&site, &format!("{root}request_id_header = \"X Id\"\n"));
    assert!(!ok, "accepted: {stderr}");
    assert!(
        stderr.contains("line 2: key `request_id_header`"),
        "{stderr}"
    );
    let (ok, stderr) = check(
        &site,
        &format!(
            "{root}access_log_format = \"combined_timed\"\nrequest_id_header = \"X-Request-Id\"\n"
        ),
    );
    assert!(ok, "{stderr}");
}

/// One combined line: `addr - - [time] "request" status bytes "referer"
/// "agent"`, and what follows it.
fn split_combined(line: &str) -> Option<(Vec<&str>, &str)> {
    let (addr, rest) = line.split_once(" - - [")?;
    let (time, rest) = rest.split_once("] \"")?;
    let (req, rest) = rest.split_once("\" ")?;
    let (status, rest) = rest.split_once(' ')?;
    let (bytes, rest) = rest.split_once(" \"")?;
    let (referer, rest) = rest.split_once("\" \"")?;
    let (agent, tail) = rest.split_once('"')?;
    Some((vec![addr, time, req, status, bytes, referer, agent], tail))
}

/// goaccess's report of `log` read with `format`: (total, valid) requests.
fn goaccess(log: &Path, format: &str) -> (u64, u64) {
    let out = Command::new("goaccess")
        .arg(log)
        .arg(format!("--log-format={format}"))
        .args(["--date-format=%d/%b/%Y", "--time-format=%T", "-o", "json"])
        .stdin(Stdio::null())
        .output()
        .expect("run goaccess");
    assert!(
        out.status.success(),
        "goaccess {format}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("goaccess JSON");
    let g = &v["general"];
    (
        g["total_requests"].as_u64().unwrap(),
        g["valid_requests"].as_u64().unwrap(),
    )
}

/// The default stays nginx's combined, byte for byte; `combined_timed`
/// appends `"$host" $request_time_us "$request_id" $msec`; goaccess reads
/// both (the timed one with its default COMBINED format too).
#[test]
fn combined_stays_combined_and_timed_appends_four_fields() {
    let site = Site::new("alogf-combined");
    let plain_log = site.base().join("plain.log");
    let timed_log = site.base().join("timed.log");
    let plain = Server::start(&site.root, &["--access-log", plain_log.to_str().unwrap()]);
    let timed = Server::start(
        &site.root,
        &[
            "--access-log",
            timed_log.to_str().unwrap(),
            "--access-log-format",
            "combined_timed",
            "--request-id-header",
            "X-Request-Id",
        ],
    );
    let req = get_with_host("/index.html?q=1", "c.test", &[("User-Agent", "ua")]);
    let r = plain.send(&req);
    assert_eq!(r.status, 200);
    let len = r.body.len();
    let before = now_ms();
    let r = timed.send(&req);
    let id = r.must("X-Request-Id").to_owned();
    assert_eq!(timed.get("/missing").status, 404);
    let after = now_ms();

    let got = wait_for_lines(&plain_log, 1);
    let (fields, tail) = split_combined(&got[0]).unwrap_or_else(|| panic!("{got:?}"));
    assert_eq!(tail, "", "nothing after the user agent: {got:?}");
    assert_eq!(fields[0], "127.0.0.1");
    assert_eq!(fields[2], "GET /index.html?q=1 HTTP/1.1");
    assert_eq!(fields[3..], ["200", &len.to_string(), "-", "ua"]);
    assert_eq!(fields[1].len(), 26, "seconds, as nginx's $time_local");

    let got = wait_for_lines(&timed_log, 2);
    // Two shards: the lines come in either order.
    let line = |req: &str| {
        got.iter()
            .filter_map(|l| split_combined(l))
            .find(|(f, _)| f[2] == req)
            .unwrap_or_else(|| panic!("{req}: {got:?}"))
    };
    let (fields, tail) = line("GET /index.html?q=1 HTTP/1.1");
    assert_eq!(fields[3..], ["200", &len.to_string(), "-", "ua"]);
    // ` "c.test" 123 "id" 1764743257.123`
    let tail = tail
        .strip_prefix(" \"c.test\" ")
        .unwrap_or_else(|| panic!("{tail:?}"));
    let (us, rest) = tail.split_once(' ').unwrap();
    assert!(us.parse::<u64>().unwrap() < 5_000_000, "{tail}");
    let (quoted_id, msec) = rest.split_once(' ').unwrap();
    assert_eq!(quoted_id, format!("\"{id}\""));
    let (s, ms) = msec.split_once('.').unwrap();
    assert_eq!(ms.len(), 3, "{msec}");
    let at = s.parse::<u64>().unwrap() * 1000 + ms.parse::<u64>().unwrap();
    assert!(
        before <= at + 1 && at <= after + 1,
        "{msec} not in {before}..{after}"
    );
    let (_, tail404) = line("GET /missing HTTP/1.1");
    assert!(tail404.starts_with(" \"test\" "), "{tail404}");

    if !installed("goaccess") {
        loud("SKIP: goaccess not installed (apt-get install goaccess)");
        return;
    }
    assert_eq!(goaccess(&plain_log, "COMBINED"), (1, 1));
    assert_eq!(goaccess(&timed_log, "COMBINED"), (2, 2));
    assert_eq!(
        goaccess(
            &timed_log,
            r#"%h %^[%d:%t %^] "%r" %s %b "%R" "%u" "%v" %D "%^" %^"#
        ),
        (2, 2)
    );
}

/// An id from a trusted proxy is kept, over HTTP/1 and HTTP/2; from any
/// other peer it is replaced by one made here. Errors carry it too.
#[test]
fn request_id_is_kept_from_a_trusted_proxy_and_made_for_others() {
    let site = h2_site("alogf-ids");
    let log = site.base().join("trusted.json");
    let other_log = site.base().join("untrusted.json");
    let start = |trusted: &str, log: &Path| {
        json_log_server(
            &site,
            log,
            &[
                "--request-id-header",
                "X-Request-Id",
                "--trusted-proxies",
                trusted,
            ],
        )
    };
    let trusted = start("127.0.0.1/32", &log);
    let untrusted = start("10.0.0.0/8", &other_log);

    let ask =
        |s: &Server, path: &str| s.send(&request("GET", path, &[("X-Request-Id", "lb-4f2a-9")]));
    let r = ask(&trusted, "/index.html?t");
    assert_eq!(r.must("X-Request-Id"), "lb-4f2a-9");
    assert_eq!(r.header_count("X-Request-Id"), 1);
    let r = ask(&trusted, "/missing?t");
    assert_eq!((r.status, r.must("X-Request-Id")), (404, "lb-4f2a-9"));
    let r = ask(&untrusted, "/index.html?u");
    let made = r.must("X-Request-Id").to_owned();
    assert!(is_made_id(&made), "{made}");
    // Errors before a request can be parsed, and methods refused.
    let r = trusted.send("GET / HTTP/9.9\r\n\r\n");
    assert_eq!(r.status, 505);
    assert!(is_made_id(r.must("X-Request-Id")));
    let r = trusted.send(&request("POST", "/index.html", &[("Content-Length", "0")]));
    assert_eq!(r.status, 405);
    assert!(is_made_id(r.must("X-Request-Id")));
    let r = trusted.send(&request("HEAD", "/index.html", &[]));
    assert!(is_made_id(r.must("X-Request-Id")), "none sent: one made");

    let over_h2 = curl_or_skip("request ids over h2");
    if over_h2 {
        let h = ["-H", "X-Request-Id: lb-h2-77"];
        let c = curl(&Target::h2c(trusted.plain_addr()), "/index.html?t2", &h);
        assert_eq!(c.response.must("x-request-id"), "lb-h2-77", "{}", c.log);
        let c = curl(&Target::h2c(trusted.plain_addr()), "/nope?t2", &h);
        assert_eq!(c.response.status, 404);
        assert_eq!(c.response.must("x-request-id"), "lb-h2-77");
        let c = curl(&Target::h2c(untrusted.plain_addr()), "/index.html?u2", &h);
        let made_h2 = c.response.must("x-request-id");
        assert!(is_made_id(made_h2) && made_h2 != made, "{made_h2}");
    }
    // Every line the trusted server wrote (five over HTTP/1, two over h2):
    // shards flush on their own ticks, so the first five to arrive need
    // not include the lines looked up below.
    let mut got = wait_for_lines(&log, if over_h2 { 7 } else { 5 });
    got.extend(wait_for_lines(&other_log, 1));
    let id_of = |uri: &str| {
        got.iter()
            .map(|l| json(l))
            .find(|v| v["uri"] == uri)
            .unwrap_or_else(|| panic!("{uri}: {got:#?}"))["request_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(id_of("/index.html?t"), "lb-4f2a-9");
    assert_eq!(id_of("/index.html?u"), made);
    assert!(is_made_id(&id_of("-")), "the 505's line has its id");
}

/// With one shard, lines come in the order answered: their millisecond
/// timestamps never go back, and they do advance.
#[test]
fn millisecond_timestamps_are_monotone() {
    let site = Site::new("alogf-monotone");
    let log = site.base().join("access.json");
    let server = json_log_server(
        &site,
        &log,
        &["--access-log-fields", "time,uri", "--cores", "1"],
    );
    const N: usize = 60;
    for i in 0..N {
        assert_eq!(server.get(&format!("/index.html?{i}")).status, 200);
        if i % 10 == 0 {
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    let got = wait_for_lines(&log, N);
    let times: Vec<u64> = got
        .iter()
        .map(|l| ms_of(json(l)["time"].as_str().unwrap()))
        .collect();
    for (i, w) in times.windows(2).enumerate() {
        assert!(w[0] <= w[1], "line {i} {} after {}", got[i + 1], got[i]);
    }
    assert!(times[N - 1] > times[0], "{got:?}");
}

/// The request time runs from the head's first byte: a head trickled
/// over 800 ms shows at least 600 ms; one sent whole shows much less.
#[test]
fn request_time_counts_a_trickled_head() {
    // Two gaps of 400 ms; the server reads the first piece some time after
    // it is sent (on a loaded machine, tens of ms), so at least 600 ms.
    const GAP: Duration = Duration::from_millis(400);
    const TRICKLE: Duration = Duration::from_millis(600);
    let site = Site::new("alogf-trickle");
    let log = site.base().join("access.json");
    let server = json_log_server(&site, &log, &["--access-log-fields", "uri,request_time_us"]);
    let mut c = server.connect();
    c.send(b"GET /index.html?slow HTTP/1.1\r\nHost: t");
    std::thread::sleep(GAP);
    c.send(b".test\r\nUser-Agent: x\r\n");
    std::thread::sleep(GAP);
    c.send(b"\r\n");
    let r = c.read_response_to("GET").expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(server.get("/index.html?fast").status, 200);
    let got = wait_for_lines(&log, 2);
    let us = |q: &str| {
        got.iter()
            .map(|l| json(l))
            .find(|v| v["uri"] == format!("/index.html?{q}"))
            .unwrap_or_else(|| panic!("{q}: {got:?}"))["request_time_us"]
            .as_u64()
            .unwrap()
    };
    let slow = us("slow");
    assert!(
        slow >= TRICKLE.as_micros() as u64 && slow < 10_000_000,
        "{slow} µs for a head trickled over {TRICKLE:?}"
    );
    assert!(us("fast") < TRICKLE.as_micros() as u64 / 2, "{got:?}");
}

/// `real_ip_header` names the client of HTTP/2 requests from a trusted
/// peer too (it applied to HTTP/1 only).
#[test]
fn real_ip_header_applies_to_http2() {
    if !curl_or_skip("real_ip_header over h2") {
        return;
    }
    let site = h2_site("alogf-realip");
    let log = site.base().join("access.json");
    let server = json_log_server(
        &site,
        &log,
        &[
            "--access-log-fields",
            "remote_addr,protocol,uri",
            "--trusted-proxies",
            "127.0.0.1/32",
            "--real-ip-header",
            "X-Forwarded-For",
        ],
    );
    let t = Target::h2c(server.plain_addr());
    let xff = [
        "-H",
        "X-Forwarded-For: 198.51.100.9, 203.0.113.7, 127.0.0.1",
    ];
    assert_eq!(curl(&t, "/index.html?h2", &xff).response.status, 200);
    assert_eq!(curl(&t, "/index.html?plain", &[]).response.status, 200);
    let r = server.send(&request(
        "GET",
        "/index.html?h1",
        &[("X-Forwarded-For", "198.51.100.9, 203.0.113.7")],
    ));
    assert_eq!(r.status, 200);
    let got = wait_for_lines(&log, 3);
    let want = [
        r#"{"remote_addr":"203.0.113.7","protocol":"HTTP/2.0","uri":"/index.html?h2"}"#,
        r#"{"remote_addr":"127.0.0.1","protocol":"HTTP/2.0","uri":"/index.html?plain"}"#,
        r#"{"remote_addr":"203.0.113.7","protocol":"HTTP/1.1","uri":"/index.html?h1"}"#,
    ];
    for w in want {
        assert!(got.iter().any(|l| l == w), "{w} not in {got:#?}");
    }
}
