//! The `/status` page in a real browser: headless Chromium loads it from a
//! two-shard server under load, lets it poll `/status.json`, and the test
//! reads back from the DOM what the chart drew for each core, and, on a
//! server with `[[sites]]`, the Sites table.
//!
//! Skips with a loud `SKIP: chromium not installed` where there is no
//! Chromium; `.ci/run` installs it.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use std::time::Duration;

use serde_json::Value;
use support::{
    allowed_cpus, browser, example_site, find_program, loud, poll_until, Load, Server, TempDir,
};

/// Virtual time the page gets to run: about five polls of status.json.
const VIRTUAL_TIME_MS: u32 = 5000;

/// GET from the admin listener (it closes after each answer): (head, body).
fn admin_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read admin answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head");
    (head.to_owned(), body.to_owned())
}

/// Runs headless Chromium (no QUIC) on `url` with `mode`.
fn chromium(program: &Path, profile: &TempDir, mode: &str, url: &str) -> String {
    browser::chromium(
        program,
        profile,
        &["--disable-quic", "--window-size=1200,800"],
        VIRTUAL_TIME_MS,
        mode,
        url,
    )
}

/// The text content of the element whose start tag contains `id="{id}"`.
fn element_text<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let start = at + dom[at..].find('>')? + 1;
    let end = start + dom[start..].find('<')?;
    Some(&dom[start..end])
}

/// `data-{name}="…"` values of the rows of the hidden #series table.
fn series_rows(dom: &str) -> Vec<(String, usize, f64)> {
    let at = dom.find("id=\"series\"").expect("#series table in DOM");
    let table = &dom[at..at + dom[at..].find("</table>").expect("end of #series")];
    let attr = |row: &str, name: &str| -> String {
        let key = format!("data-{name}=\"");
        let from = row.find(&key).map(|i| i + key.len()).unwrap_or(0);
        row[from..from + row[from..].find('"').unwrap_or(0)].to_owned()
    };
    table
        .split("<tr ")
        .skip(1)
        .map(|row| {
            (
                attr(row, "core"),
                attr(row, "samples").parse().unwrap_or(0),
                attr(row, "max").parse().unwrap_or(0.0),
            )
        })
        .collect()
}

/// Headless Chromium loads /status from a two-shard server under load; the
/// page's chart drew a line for core 0 and core 1, each from samples of
/// which at least one is above zero, the canvas holds pixels in the line
/// colours, and the tiles and table show the server's figures.
#[test]
fn status_page_draws_requests_per_second_for_each_core_in_chromium() {
    let Some(browser) = find_program(&["chromium", "chromium-browser"]) else {
        loud("SKIP: chromium not installed");
        return;
    };
    if allowed_cpus().len() < 2 {
        loud("SKIP: fewer than 2 CPUs allowed; --cores 2 needs two");
        return;
    }
    let server = Server::start(&example_site(), &["--cores", "2"]);
    let admin = server.admin_addr();

    // The page is self-contained: no external scripts, styles or fonts.
    let (head, page) = admin_get(admin, "/status");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/html"),
        "{head}"
    );
    for external in [
        "<script src",
        "<link",
        "http://",
        "https://",
        "@import",
        "url(",
    ] {
        assert!(
            !page.contains(external),
            "/status refers outside itself: {external:?}"
        );
    }
    assert!(page.contains("<canvas"), "no canvas");

    let load = Load::start(server.addr(), 6, &[("/bench/100.txt", 200)]);
    // Precondition: status.json itself reports traffic on both cores.
    let mut status = Value::Null;
    let both_busy = poll_until(Duration::from_secs(10), || {
        status = serde_json::from_str(&admin_get(admin, "/status.json").1).unwrap();
        status["cores"]
            .as_array()
            .is_some_and(|c| c.len() == 2 && c.iter().all(|c| c["rps"].as_f64() > Some(0.0)))
    });
    assert!(both_busy, "load never reached both cores: {status:#}");

    let profile = TempDir::new("chromium");
    let url = format!("http://{admin}/status");
    let dom = chromium(&browser, &profile, "--dump-dom", &url);
    if let Ok(path) = std::env::var("SHARDHTTPD_STATUS_SCREENSHOT") {
        chromium(&browser, &profile, &format!("--screenshot={path}"), &url);
        eprintln!("status page screenshot: {path}");
    }
    load.stop();

    let chart_json = element_text(&dom, "chart-data")
        .unwrap_or_else(|| panic!("no #chart-data in the DOM:\n{dom}"));
    let chart: Value = serde_json::from_str(chart_json)
        .unwrap_or_else(|e| panic!("#chart-data is not JSON ({e}): {chart_json}"));
    assert!(
        chart["drawn"].as_u64() >= Some(2),
        "the page drew fewer than two polls: {chart}"
    );
    for core in ["0", "1"] {
        let samples: Vec<f64> = chart["cores"][core]
            .as_array()
            .unwrap_or_else(|| panic!("no series for core {core}: {chart}"))
            .iter()
            .map(|v| v.as_f64().expect("numeric sample"))
            .collect();
        assert!(!samples.is_empty(), "core {core} drew no samples: {chart}");
        assert!(
            samples.iter().any(|&v| v > 0.0),
            "core {core} drew only zeros: {chart}"
        );
        assert!(
            samples.iter().all(|v| v.is_finite() && *v >= 0.0),
            "{chart}"
        );
    }
    assert_eq!(
        chart["cores"].as_object().map(|c| c.len()),
        Some(2),
        "{chart}"
    );
    assert!(
        chart["ink"].as_i64() >= Some(40),
        "the lines put (almost) no pixels on the canvas: {chart}"
    );

    let rows = series_rows(&dom);
    assert_eq!(
        rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["0", "1"],
        "{rows:?}"
    );
    for (core, n, max) in &rows {
        assert!(*n >= 1 && *max > 0.0, "core {core}: {n} samples, max {max}");
    }

    // Tiles and the per-core table show the server's figures.
    let requests: u64 = element_text(&dom, "t-requests")
        .expect("#t-requests")
        .replace(',', "")
        .parse()
        .expect("requests tile is a number");
    assert!(requests > 0, "requests tile");
    assert_eq!(element_text(&dom, "t-generation"), Some("1"));
    assert_eq!(element_text(&dom, "ready"), Some("ready"));
    let cores_table = &dom[dom.find("id=\"cores\"").expect("#cores")..];
    let table = &cores_table[..cores_table.find("</table>").unwrap()];
    let body = &table[table.find("<tbody>").expect("tbody")..];
    assert_eq!(body.matches("<tr>").count(), 2, "one row per core: {body}");
    assert!(body.contains("running"), "{body}");
}

/// With `[[sites]]` the page shows a Sites table, one row per site with
/// its requests (the default site first); without, the section stays
/// hidden.
#[test]
fn status_page_lists_the_sites_in_chromium() {
    let Some(browser) = find_program(&["chromium", "chromium-browser"]) else {
        loud("SKIP: chromium not installed");
        return;
    };
    let dir = TempDir::new("status-sites");
    for (site, body) in [("default", "d"), ("a", "a")] {
        support::write_file(dir.path(), &format!("{site}/index.html"), body.as_bytes());
    }
    let config = support::write_file(
        dir.path(),
        "sites.toml",
        format!(
            "root = \"{0}/default\"\n[[sites]]\nnames = \"a.test\"\nroot = \"{0}/a\"\n",
            dir.path().display()
        )
        .as_bytes(),
    );
    let server = Server::with_config(&config, &["--cores", "1"]);
    let admin = server.admin_addr();
    for _ in 0..3 {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let published = poll_until(Duration::from_secs(10), || {
        let status: Value = serde_json::from_str(&admin_get(admin, "/status.json").1).unwrap();
        status["sites"][1]["requests"].as_u64() == Some(3)
    });
    assert!(
        published,
        "status.json never counted a.test's three requests"
    );

    let profile = TempDir::new("chromium-sites");
    let dom = chromium(
        &browser,
        &profile,
        "--dump-dom",
        &format!("http://{admin}/status"),
    );
    let section = &dom[dom.find("id=\"sites-section\"").expect("#sites-section")..];
    let head = &section[..section.find('>').unwrap()];
    assert!(
        !head.contains("hidden"),
        "the Sites section is hidden: {head}"
    );
    let table = &section[..section.find("</table>").unwrap()];
    let body = &table[table.find("<tbody>").expect("tbody")..];
    let rows: Vec<&str> = body.split("<tr>").skip(1).collect();
    assert_eq!(rows.len(), 2, "one row per site: {body}");
    assert!(
        rows[0].starts_with("<td>default</td><td>0</td>"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].starts_with("<td>a.test</td><td>3</td>"),
        "{}",
        rows[1]
    );

    // A server without sites keeps the section hidden.
    let plain = Server::start(&example_site(), &["--cores", "1"]);
    let dom = chromium(
        &browser,
        &profile,
        "--dump-dom",
        &format!("http://{}/status", plain.admin_addr()),
    );
    let section = &dom[dom.find("id=\"sites-section\"").expect("#sites-section")..];
    let head = &section[..section.find('>').unwrap()];
    assert!(head.contains("hidden"), "{head}");
}
