//! Load generators and their own output: wrk (the default; Lua scripts for
//! pipelining and HEAD), ab (for the rows the classic tables used it for,
//! where installed, and for HEAD, which wrk 4 cannot measure) and h2load
//! (the HTTP/2 rows: h2 over TLS and h2c, several streams per connection;
//! its per-request log gives the percentiles) and `shardbench h3load` (the
//! h3 rows, with h2load's flags, report and log). Each run is a pinned
//! child process that Ctrl-C kills.

use std::fs;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::procs::{self, Group};

/// Requests per pipelined write in the pipelining rows.
pub const PIPELINE_DEPTH: usize = 16;

/// Which program makes the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Wrk,
    Ab,
    H2load,
    /// This executable's `h3load`.
    H3load,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Wrk => "wrk",
            Tool::Ab => "ab",
            Tool::H2load => "h2load",
            Tool::H3load => "h3load",
        }
    }
}

/// How each request is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Persistent connections, one request in flight on each.
    KeepAlive,
    /// `Connection: close`: a new connection per request.
    Close,
    /// [`PIPELINE_DEPTH`] requests per write on persistent connections.
    Pipeline,
    /// GET with the exact `If-Modified-Since`: 304s.
    Ims,
    /// HEAD.
    Head,
    /// Keep-alive GET over TLS.
    TlsKeepAlive,
    /// `Connection: close` GET over TLS: a full handshake per request.
    TlsClose,
    /// HTTP/2 over TLS (ALPN h2), persistent connections, [`Spec::streams`]
    /// streams in flight on each.
    H2,
    /// HTTP/2 in cleartext with prior knowledge (h2c), as [`Mode::H2`].
    H2c,
    /// HTTP/3 on the TLS port's UDP twin, as [`Mode::H2`].
    H3,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::KeepAlive => "keep-alive",
            Mode::Close => "close",
            Mode::Pipeline => "pipeline16",
            Mode::Ims => "ims304",
            Mode::Head => "head",
            Mode::TlsKeepAlive => "tls-keep-alive",
            Mode::TlsClose => "tls-close",
            Mode::H2 => "h2",
            Mode::H2c => "h2c",
            Mode::H3 => "h3",
        }
    }

    pub fn is_tls(self) -> bool {
        matches!(
            self,
            Mode::TlsKeepAlive | Mode::TlsClose | Mode::H2 | Mode::H3
        )
    }

    pub fn is_h2(self) -> bool {
        matches!(self, Mode::H2 | Mode::H2c)
    }

    /// Streams on each connection: HTTP/2 and HTTP/3.
    pub fn multiplexed(self) -> bool {
        self.is_h2() || self == Mode::H3
    }
}

/// One load run's request.
pub struct Spec<'a> {
    pub tool: Tool,
    pub mode: Mode,
    pub port: u16,
    pub path: &'a str,
    pub concurrency: usize,
    /// Streams in flight per connection (h2load `-m`; 1 for HTTP/1).
    pub streams: usize,
    pub duration: Duration,
    pub client_cpus: &'a [usize],
    /// Value for `If-Modified-Since` in [`Mode::Ims`].
    pub last_modified: Option<&'a str>,
    /// Where scripts and raw output go.
    pub work: &'a Path,
    /// h2load only: a request count (`-n`) instead of the duration (`-D`).
    /// See [`H2LOAD_BY_COUNT`].
    pub requests: Option<u64>,
}

/// From this many connections up, an h2load cell runs a request count
/// (`-n`), not a duration (`-D`). h2load 1.52 in timing mode stops only the
/// clients whose session is up when the duration ends: a connection still
/// in its TLS handshake then (hundreds at `-c 1000` on a busy machine)
/// connects afterwards, is never stopped, and goes on sending requests for
/// ever, so `-N` (inactivity) never fires and h2load never exits. nginx
/// makes it hang the same way (the server is not at fault). With `-n`
/// every client runs to its share of the count.
pub const H2LOAD_BY_COUNT: usize = 500;

/// The request count for an h2load cell meant to last `secs` at `rate`
/// requests/s (this server's last h2 figure), at least 5 per connection;
/// 20 per connection when there is no figure yet.
pub fn h2load_requests(concurrency: usize, rate: Option<f64>, secs: f64) -> u64 {
    let floor = 5 * concurrency as u64;
    match rate {
        Some(r) if r > 0.0 => ((r * secs) as u64).max(floor),
        _ => 20 * concurrency as u64,
    }
}

/// What a run measured, from the tool's own output.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub requests: u64,
    pub rps: f64,
    pub p50_ms: f64,
    /// NaN when the tool printed no usable figure.
    pub p99_ms: f64,
    /// Socket errors plus responses other than 2xx/3xx.
    pub errors: u64,
    /// Why the figures are missing or odd; empty normally.
    pub note: String,
}

/// Where h2load writes its per-request log for a run whose report goes to
/// `out_file`.
pub fn h2load_log(out_file: &Path) -> std::path::PathBuf {
    out_file.with_extension("requests.log")
}

/// The command line for `spec`; `out_file` is where its report goes.
pub fn command(spec: &Spec<'_>, out_file: &Path) -> io::Result<Vec<String>> {
    let scheme = if spec.mode.is_tls() { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{}{}", spec.port, spec.path);
    let secs = spec.duration.as_secs_f64().ceil().max(1.0) as u64;
    let mut cmd = vec![
        "taskset".to_owned(),
        "-c".to_owned(),
        procs::cpu_list(spec.client_cpus),
    ];
    let header = |name: &str, value: &str| format!("{name}: {value}");
    match spec.tool {
        Tool::Wrk => {
            let threads = spec.client_cpus.len().clamp(1, spec.concurrency.max(1));
            cmd.extend([
                "wrk".into(),
                format!("-t{threads}"),
                format!("-c{}", spec.concurrency),
                format!("-d{secs}s"),
                "--timeout".into(),
                "10s".into(),
                "--latency".into(),
            ]);
            match spec.mode {
                Mode::KeepAlive | Mode::TlsKeepAlive => {}
                Mode::Close | Mode::TlsClose => {
                    cmd.extend(["-H".into(), header("Connection", "close")])
                }
                Mode::Pipeline => cmd.extend([
                    "-s".into(),
                    script(spec.work, "pipeline.lua", PIPELINE_LUA)?,
                ]),
                Mode::Ims => {
                    let lm = spec
                        .last_modified
                        .ok_or_else(|| io::Error::other("no Last-Modified to send back"))?;
                    cmd.extend(["-H".into(), header("If-Modified-Since", lm)]);
                }
                Mode::Head => {
                    // wrk 4 waits for a body after a HEAD response's
                    // Content-Length and counts nothing: HEAD runs on ab.
                    return Err(io::Error::other("wrk cannot measure HEAD; use ab"));
                }
                Mode::H2 | Mode::H2c | Mode::H3 => {
                    return Err(io::Error::other(
                        "wrk speaks HTTP/1.1 only; use h2load or h3load",
                    ));
                }
            }
            cmd.push(url);
        }
        Tool::Ab => {
            // -t before -n: -t resets the request count, -n raises it again
            // so the time limit is what ends the run.
            cmd.extend([
                "ab".into(),
                "-q".into(),
                "-r".into(),
                "-s".into(),
                "10".into(),
                "-t".into(),
                secs.to_string(),
                "-n".into(),
                "100000000".into(),
                "-c".into(),
                spec.concurrency.to_string(),
            ]);
            match spec.mode {
                Mode::KeepAlive => cmd.push("-k".into()),
                Mode::Close => {}
                Mode::Head => cmd.extend(["-k".into(), "-i".into()]),
                other => {
                    return Err(io::Error::other(format!(
                        "ab runs only keep-alive, close and HEAD, not {}",
                        other.name()
                    )))
                }
            }
            cmd.push(url);
        }
        Tool::H2load | Tool::H3load => {
            let fits = match spec.tool {
                Tool::H2load => spec.mode.is_h2(),
                _ => spec.mode == Mode::H3,
            };
            if !fits {
                return Err(io::Error::other(format!(
                    "{} does not run the {} rows",
                    spec.tool.name(),
                    spec.mode.name()
                )));
            }
            let threads = spec.client_cpus.len().clamp(1, spec.concurrency.max(1));
            // An http:// URL is h2c with prior knowledge; https:// is h2 by
            // ALPN (h2load offers only h2), or h3 for h3load.
            if spec.tool == Tool::H3load {
                cmd.extend([
                    std::env::current_exe()?.display().to_string(),
                    "h3load".into(),
                ]);
            } else {
                cmd.push("h2load".into());
            }
            cmd.extend([
                format!("-t{threads}"),
                format!("-c{}", spec.concurrency),
                format!("-m{}", spec.streams.max(1)),
                match spec.requests {
                    Some(n) => format!("-n{n}"),
                    None => format!("-D{secs}"),
                },
                // Give up on a connection whose request shows no activity
                // for 10 s (counted as errored).
                "-N10".into(),
                format!("--log-file={}", h2load_log(out_file).display()),
                url,
            ]);
        }
    }
    Ok(cmd)
}

const PIPELINE_LUA: &str = "-- 16 GETs per write on each connection.\n\
init = function(args)\n  local r = {}\n  for i = 1, 16 do r[i] = wrk.format(nil) end\n  req = table.concat(r)\nend\n\
request = function()\n  return req\nend\n";

fn script(work: &Path, name: &str, text: &str) -> io::Result<String> {
    let path = work.join(name);
    if !path.exists() {
        fs::write(&path, text)?;
    }
    Ok(path.display().to_string())
}

/// Run `cmd`, its output into `out_file`; parse it. `None` when interrupted.
pub fn run(
    tool: Tool,
    cmd: &[String],
    duration: Duration,
    out_file: &Path,
) -> io::Result<Option<Outcome>> {
    let out = fs::File::create(out_file)?;
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    let mut g = Group::spawn(tool.name(), &mut c)?;
    // wrk's connect storm at c=10000 and its 10 s timeout can run past the
    // duration; beyond a minute more something is wrong.
    let Some(status) = g.wait(duration + Duration::from_secs(60)) else {
        if procs::interrupted() {
            return Ok(None);
        }
        return Ok(Some(Outcome {
            p99_ms: f64::NAN,
            note: format!("{} killed: a minute past its duration", tool.name()),
            ..Outcome::default()
        }));
    };
    let text = fs::read_to_string(out_file)?;
    let parsed = match tool {
        Tool::Wrk => parse_wrk(&text),
        Tool::Ab => parse_ab(&text),
        Tool::H2load | Tool::H3load => parse_h2load(&text).map(|mut o| {
            let log = fs::read_to_string(h2load_log(out_file)).unwrap_or_default();
            (o.p50_ms, o.p99_ms) = h2load_percentiles(&log);
            // The log is per request: large, and its figures are in the row.
            let _ = fs::remove_file(h2load_log(out_file));
            o
        }),
    };
    // A run the tool could not report on is a row with a note, not the end
    // of the study.
    Ok(Some(parsed.unwrap_or_else(|| Outcome {
        p99_ms: f64::NAN,
        note: format!(
            "{} exited {status} without a report: {}",
            tool.name(),
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
        ),
        ..Outcome::default()
    })))
}

/// `71.40us`, `1.29ms`, `2.00s`, `3m` → milliseconds.
fn duration_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => v / 1000.0,
        "ms" => v,
        "s" => v * 1000.0,
        "m" => v * 60_000.0,
        "h" => v * 3_600_000.0,
        _ => return None,
    })
}

/// wrk 4's report (with `--latency`).
pub fn parse_wrk(text: &str) -> Option<Outcome> {
    let mut o = Outcome::default();
    let mut have_rps = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            o.rps = v.trim().parse().ok()?;
            have_rps = true;
        } else if t.contains(" requests in ") {
            o.requests = t.split_whitespace().next()?.parse().ok()?;
        } else if let Some(v) = t.strip_prefix("50%") {
            o.p50_ms = duration_ms(v)?;
        } else if let Some(v) = t.strip_prefix("99%") {
            o.p99_ms = duration_ms(v)?;
        } else if let Some(v) = t.strip_prefix("Socket errors:") {
            o.errors += v
                .split(',')
                .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            o.errors += v.trim().parse::<u64>().ok()?;
        }
    }
    // wrk's histogram loses its top percentiles under pipelining and prints
    // 0 for them: not a measurement.
    if o.p99_ms < o.p50_ms {
        o.p99_ms = f64::NAN;
    }
    have_rps.then_some(o)
}

/// h2load's report (nghttp2 1.4x–1.5x; `h3load` prints the same lines):
/// `finished in 2.00s, 123.45 req/s`,
/// `requests: N total, N started, N done, N succeeded, F failed, E errored,
/// T timeout` and `status codes: a 2xx, b 3xx, c 4xx, d 5xx`. Latency comes
/// from its per-request log ([`h2load_percentiles`]).
pub fn parse_h2load(text: &str) -> Option<Outcome> {
    fn count(s: &str, word: &str) -> Option<u64> {
        let words: Vec<&str> = s.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        words
            .windows(2)
            .find(|w| w[1] == word)
            .and_then(|w| w[0].parse().ok())
    }
    let mut o = Outcome {
        p99_ms: f64::NAN,
        ..Outcome::default()
    };
    let mut have_rps = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("finished in ") {
            let rps = rest.split(", ").nth(1)?.strip_suffix(" req/s")?;
            o.rps = rps.trim().parse().ok()?;
            have_rps = true;
        } else if let Some(rest) = t.strip_prefix("requests:") {
            o.requests = count(rest, "succeeded")?;
            o.errors += count(rest, "failed")? + count(rest, "errored")?;
            o.errors += count(rest, "timeout").unwrap_or(0);
        } else if let Some(rest) = t.strip_prefix("status codes:") {
            o.errors += count(rest, "4xx")? + count(rest, "5xx")?;
        } else if let Some(p) = t.strip_prefix("Application protocol:") {
            if !matches!(p.trim(), "h2" | "h2c" | "h3") {
                o.note = format!("h2load spoke {}, not HTTP/2", p.trim());
            }
        }
    }
    have_rps.then_some(o)
}

/// p50 and p99 in milliseconds from h2load's `--log-file` (one line per
/// request: start time, status, duration in microseconds); NaN when empty.
pub fn h2load_percentiles(log: &str) -> (f64, f64) {
    let mut us: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    if us.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    us.sort_unstable();
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    (at(0.50), at(0.99))
}

/// ab 2.3's report.
pub fn parse_ab(text: &str) -> Option<Outcome> {
    let mut o = Outcome::default();
    let mut have_rps = false;
    let field = |t: &str, name: &str| -> Option<String> {
        t.strip_prefix(name)
            .map(|v| v.split_whitespace().next().unwrap_or("").to_owned())
    };
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = field(t, "Requests per second:") {
            o.rps = v.parse().ok()?;
            have_rps = true;
        } else if let Some(v) = field(t, "Complete requests:") {
            o.requests = v.parse().ok()?;
        } else if let Some(v) = field(t, "Failed requests:") {
            o.errors += v.parse::<u64>().ok()?;
        } else if let Some(v) = field(t, "Non-2xx responses:") {
            o.errors += v.parse::<u64>().ok()?;
        } else if let Some(v) = field(t, "50%") {
            o.p50_ms = v.parse().ok()?;
        } else if let Some(v) = field(t, "99%") {
            o.p99_ms = v.parse().ok()?;
        }
    }
    have_rps.then_some(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 1s test @ http://127.0.0.1:8080/100.html
  1 threads and 10 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    71.40us   30.01us   1.29ms   93.35%
    Req/Sec   136.17k     6.22k  141.33k    90.00%
  Latency Distribution
     50%   65.00us
     75%   72.00us
     90%   87.00us
     99%    1.20ms
  136232 requests in 1.00s, 28.84MB read
  Socket errors: connect 2, read 3, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec: 134893.15
Transfer/sec:     28.56MB
";

    #[test]
    fn wrk_report() {
        let o = parse_wrk(WRK).expect("parsed");
        assert_eq!(o.requests, 136_232);
        assert!((o.rps - 134_893.15).abs() < 1e-6);
        assert!((o.p50_ms - 0.065).abs() < 1e-9);
        assert!((o.p99_ms - 1.2).abs() < 1e-9);
        assert_eq!(o.errors, 11);
        let pipelined = WRK.replace("99%    1.20ms", "99%    0.00us");
        assert!(parse_wrk(&pipelined).expect("parsed").p99_ms.is_nan());
        assert!(parse_wrk("unable to connect to 127.0.0.1:1 Connection refused").is_none());
    }

    const AB: &str = "Concurrency Level:      10
Time taken for tests:   1.000 seconds
Complete requests:      12345
Failed requests:        2
Non-2xx responses:      3
Requests per second:    12345.67 [#/sec] (mean)
Percentage of the requests served within a certain time (ms)
  50%      1
  66%      1
  99%      4
 100%      9 (longest request)
";

    const H2LOAD: &str = "starting benchmark...
spawning thread #0: 100 total client(s). Timing-based test with 0s of warm-up time and 2s of main duration for measurements.
Application protocol: h2

finished in 2.00s, 61234.50 req/s, 14.26MB/s
requests: 122469 total, 122569 started, 122469 done, 122400 succeeded, 60 failed, 9 errored, 2 timeout
status codes: 122400 2xx, 0 3xx, 3 4xx, 4 5xx
traffic: 28.52MB (29904210) total, 2.14MB (2244590) headers (space savings 95.18%), 23.35MB (24480000) data
";

    #[test]
    fn h2load_report_and_log() {
        let o = parse_h2load(H2LOAD).expect("parsed");
        assert_eq!(o.requests, 122_400);
        assert!((o.rps - 61_234.5).abs() < 1e-6);
        assert_eq!(o.errors, 60 + 9 + 2 + 3 + 4);
        assert!(parse_h2load("no protocol negotiated").is_none());
        assert!(o.note.is_empty(), "{}", o.note);
        let h1 = H2LOAD.replace("Application protocol: h2", "Application protocol: http/1.1");
        assert_eq!(
            parse_h2load(&h1).expect("parsed").note,
            "h2load spoke http/1.1, not HTTP/2"
        );
        let log: String = (1..=100)
            .map(|i| format!("1700000000.{i:06}\t200\t{}\n", i * 10))
            .collect();
        let (p50, p99) = h2load_percentiles(&log);
        assert!((p50 - 0.51).abs() < 1e-9, "{p50}");
        assert!((p99 - 0.99).abs() < 1e-9, "{p99}");
        assert!(h2load_percentiles("").0.is_nan());
    }

    #[test]
    fn h2load_command() {
        let spec = Spec {
            tool: Tool::H2load,
            mode: Mode::H2,
            port: 8443,
            path: "/100.html",
            concurrency: 100,
            streams: 10,
            duration: Duration::from_secs(2),
            client_cpus: &[0],
            last_modified: None,
            work: Path::new("/tmp"),
            requests: None,
        };
        let cmd = command(&spec, Path::new("/tmp/cell.txt")).unwrap();
        assert_eq!(
            cmd[3..],
            [
                "h2load",
                "-t1",
                "-c100",
                "-m10",
                "-D2",
                "-N10",
                "--log-file=/tmp/cell.requests.log",
                "https://127.0.0.1:8443/100.html"
            ]
        );
        let h2c = Spec {
            mode: Mode::H2c,
            ..spec
        };
        let cmd = command(&h2c, Path::new("/tmp/cell.txt")).unwrap();
        assert_eq!(cmd.last().unwrap(), "http://127.0.0.1:8443/100.html");
        // c=1000: a request count, so that late handshakes cannot hang it.
        let many = Spec {
            concurrency: 1000,
            requests: Some(60_000),
            ..h2c
        };
        let cmd = command(&many, Path::new("/tmp/cell.txt")).unwrap();
        assert!(cmd.contains(&"-n60000".to_owned()), "{cmd:?}");
        assert!(!cmd.iter().any(|a| a.starts_with("-D")), "{cmd:?}");
    }

    #[test]
    fn h2load_request_counts() {
        assert_eq!(h2load_requests(1000, Some(30_000.0), 3.0), 90_000);
        assert_eq!(h2load_requests(1000, Some(100.0), 3.0), 5_000, "5 each");
        assert_eq!(h2load_requests(1000, None, 3.0), 20_000);
    }

    #[test]
    fn ab_report() {
        let o = parse_ab(AB).expect("parsed");
        assert_eq!(o.requests, 12_345);
        assert_eq!(o.errors, 5);
        assert!((o.p99_ms - 4.0).abs() < 1e-9);
        assert!((o.rps - 12_345.67).abs() < 1e-6);
    }
}
