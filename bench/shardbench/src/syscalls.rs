//! Syscalls per request (`--syscalls`): after a server's timed cell, the
//! same load again for a short traced pass with `strace -c -f` attached to
//! every process of the server's tree (every thread of each: `-f -p`), and
//! strace's summary table divided by the requests the load tool counted.
//! The timed figures are not slowed by it: tracing starts after the cell's
//! measurement and ends (strace detaches) before the next cell.
//!
//! Under ptrace each syscall costs tens of microseconds, so a traced
//! server runs slower and may batch differently (an event loop that falls
//! behind finds more ready per wait): the counts are of a server at its
//! traced pace. perf's `raw_syscalls:sys_enter` would not slow it, but its
//! counts were inconsistent on the study's VM.

use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::load::{self, Spec};
use crate::procs;
use crate::servers;

/// How many syscalls by name a result keeps (the most frequent).
pub const TOP: usize = 3;

/// A traced pass's syscalls, per request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Syscalls {
    /// Requests the load tool counted during the pass.
    pub requests: u64,
    /// Every syscall of the server's threads over the pass, per request.
    pub per_req: f64,
    /// The [`TOP`] most frequent, by name, per request.
    pub top: Vec<(String, f64)>,
}

impl Syscalls {
    /// `2.02 (read 1.00, write 1.00, epoll_wait 0.02)`: the markdown cell.
    pub fn text(&self) -> String {
        let top: Vec<String> = self
            .top
            .iter()
            .map(|(n, v)| format!("{n} {}", per_req(*v)))
            .collect();
        format!("{} ({})", per_req(self.per_req), top.join(", "))
    }

    /// `read=1.00;write=1.00;epoll_wait=0.02`: the CSV field.
    pub fn top_field(&self) -> String {
        self.top
            .iter()
            .map(|(n, v)| format!("{n}={}", per_req(*v)))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// Two decimals, three below 0.1 (a syscall every few hundred requests
/// still shows).
pub fn per_req(v: f64) -> String {
    if v > 0.0 && v < 0.001 {
        "<0.001".into()
    } else if v > 0.0 && v < 0.1 {
        format!("{v:.3}")
    } else {
        format!("{v:.2}")
    }
}

/// Calls by name from `strace -c`'s summary table, most frequent first
/// (ties by name), without the `total` line; `None` when `text` has no
/// table. Rows are `% time, seconds, usecs/call, calls, [errors], name`:
/// the errors column is blank where a syscall never failed.
pub fn parse_summary(text: &str) -> Option<Vec<(String, u64)>> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("% time"));
    lines.next()?;
    let mut rule = false;
    let mut calls: Vec<(String, u64)> = Vec::new();
    for line in lines {
        if line.starts_with("------") {
            if rule {
                break;
            }
            rule = true;
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some((name, numbers)) = f.split_last() else {
            continue;
        };
        if *name == "total" || !(4..=5).contains(&numbers.len()) {
            continue;
        }
        let Ok(n) = numbers[3].parse::<u64>() else {
            continue;
        };
        match calls.iter_mut().find(|(c, _)| c == name) {
            Some((_, sum)) => *sum += n,
            None => calls.push(((*name).to_owned(), n)),
        }
    }
    if !rule {
        return None;
    }
    calls.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Some(calls)
}

/// `calls` over `requests`.
pub fn per_request(calls: &[(String, u64)], requests: u64) -> Syscalls {
    let r = requests.max(1) as f64;
    Syscalls {
        requests,
        per_req: calls.iter().map(|(_, n)| *n as f64).sum::<f64>() / r,
        top: calls
            .iter()
            .take(TOP)
            .map(|(name, n)| (name.clone(), *n as f64 / r))
            .collect(),
    }
}

/// Whether strace can be used (it is installed).
pub fn available() -> bool {
    servers::installed("strace").is_some()
}

/// The traced pass: `spec` (its duration and request count as for the
/// timed cell) with strace attached to the tree of `server_pid`, the
/// tool's report in `raw`. `Some(Err(why))` when strace could not count
/// (not permitted to attach, no table, no responses); `None` when
/// interrupted.
pub fn trace(
    commands: &mut Vec<String>,
    server_pid: u32,
    spec: &Spec<'_>,
    label: &str,
) -> io::Result<Option<Result<Syscalls, String>>> {
    let name = label.replace(
        |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '=',
        "_",
    );
    let raw = spec.work.join(format!("{name}.syscalls.txt"));
    let summary = spec.work.join(format!("{name}.strace.txt"));
    // A cell by request count runs a quarter of it traced (each syscall
    // is slower under ptrace); at least 5 a connection.
    let spec = Spec {
        requests: spec
            .requests
            .map(|n| (n / 4).max(5 * spec.concurrency as u64)),
        ..*spec
    };
    let (spec, raw) = (&spec, raw.as_path());
    let _ = std::fs::remove_file(&summary);
    let pids = procs::tree(server_pid);
    let mut strace = Command::new("strace");
    strace.args(["-c", "-f", "-o"]).arg(&summary);
    for p in &pids {
        strace.arg("-p").arg(p.to_string());
    }
    let traced = format!(
        "strace -c -f -o {} {}",
        summary.display(),
        pids.iter()
            .map(|p| format!("-p {p}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut child = strace
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("starting strace: {e}")))?;
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // strace says `Process N attached` as it attaches (one line for a
    // process, or one per thread: versions differ), all at its start:
    // counting begins once the lines stop for 200 ms.
    let mut said: Vec<String> = Vec::new();
    let mut attached = 0;
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let wait = if attached > 0 { 200 } else { 100 };
        match rx.recv_timeout(Duration::from_millis(wait)) {
            Ok(line) if line.contains(" attached") => attached += 1,
            Ok(line) => said.push(line),
            Err(mpsc::RecvTimeoutError::Timeout) if attached > 0 => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if child.try_wait()?.is_some() {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if attached == 0 {
        stop(&mut child);
        said.extend(rx.try_iter());
        return Ok(Some(Err(format!(
            "strace attached to nothing: {}",
            said.join(" ").trim()
        ))));
    }
    let cmd = load::command(spec, raw)?;
    commands.push(format!("# syscalls, traced: {traced}\n{}", cmd.join(" ")));
    let outcome = load::run(spec.tool, &cmd, spec.duration, raw);
    // Detach (strace writes the table on SIGINT) whatever the load did.
    stop(&mut child);
    let Some(outcome) = outcome? else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    let Some(calls) = parse_summary(&text) else {
        return Ok(Some(Err(format!(
            "no strace summary in {}",
            summary.display()
        ))));
    };
    if outcome.requests == 0 {
        return Ok(Some(Err("no responses while traced".into())));
    }
    Ok(Some(Ok(per_request(&calls, outcome.requests))))
}

/// `note` with `syscalls: why` added.
pub fn noted(note: &str, why: &str) -> String {
    if note.is_empty() {
        format!("syscalls: {why}")
    } else {
        format!("{note}; syscalls: {why}")
    }
}

/// SIGINT strace (it detaches and writes its table) and reap it; SIGKILL
/// after 10 s.
fn stop(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: plain syscall to our own unreaped child (its pid cannot
        // have been reused).
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
    }
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strace 6.1's `-c -f` table: a blank errors column, a failing
    /// syscall, and the total line (left out: the rows are summed).
    const TABLE: &str = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 48.31    0.012345           6      2000           write
 40.02    0.010226           5      2000       120 read
 11.60    0.002964          74        40           epoll_wait
  0.07    0.000018           9         2         2 accept4
------ ----------- ----------- --------- --------- ----------------
100.00    0.025553           6      4042       122 total
";

    #[test]
    fn summary_table_rows_by_calls() {
        let calls = parse_summary(TABLE).unwrap();
        assert_eq!(
            calls,
            vec![
                ("read".to_owned(), 2000),
                ("write".to_owned(), 2000),
                ("epoll_wait".to_owned(), 40),
                ("accept4".to_owned(), 2),
            ]
        );
        let s = per_request(&calls, 1000);
        assert_eq!(s.per_req, 4.042);
        assert_eq!(s.requests, 1000);
        assert_eq!(
            s.top,
            vec![
                ("read".to_owned(), 2.0),
                ("write".to_owned(), 2.0),
                ("epoll_wait".to_owned(), 0.04)
            ]
        );
        assert_eq!(s.text(), "4.04 (read 2.00, write 2.00, epoll_wait 0.040)");
        assert_eq!(s.top_field(), "read=2.00;write=2.00;epoll_wait=0.040");
        assert_eq!(per_req(0.0004), "<0.001");
        assert_eq!(per_req(0.0), "0.00");
    }

    /// What strace prints around the table (attach lines when stderr and
    /// the table share a file, a total line without usecs/call) is not a row.
    #[test]
    fn summary_table_among_other_lines() {
        let text = "\
strace: Process 42 attached
strace: Process 43 attached
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
100.00    0.000300         150         2           io_uring_enter
------ ----------- ----------- --------- --------- ----------------
100.00    0.000300                     2           total
strace: Process 42 detached
";
        assert_eq!(
            parse_summary(text),
            Some(vec![("io_uring_enter".to_owned(), 2)])
        );
    }

    /// An empty table (nothing called: an idle server) is zero calls; no
    /// table at all (strace failed) is `None`.
    #[test]
    fn empty_and_missing_tables() {
        let empty = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
------ ----------- ----------- --------- --------- ----------------
100.00    0.000000           0         0           total
";
        assert_eq!(parse_summary(empty), Some(Vec::new()));
        assert_eq!(parse_summary(""), None);
        assert_eq!(
            parse_summary("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"),
            None
        );
        assert_eq!(per_request(&[], 10).per_req, 0.0);
    }

    /// Attached to a real process: the table parses and counts its calls.
    #[test]
    fn strace_counts_a_live_process() {
        if !available() {
            crate::skip_test("SKIP strace_counts_a_live_process: strace not installed");
            return;
        }
        // A shell that reads its clock in a loop: syscalls to count.
        let mut sh = Command::new("sh")
            .args(["-c", "while :; do date >/dev/null; done"])
            .spawn()
            .expect("sh");
        let out = std::env::temp_dir().join(format!("shardbench-strace-{}", std::process::id()));
        let mut strace = Command::new("strace")
            .args(["-c", "-f", "-o"])
            .arg(&out)
            .args(["-p", &sh.id().to_string()])
            .stderr(Stdio::null())
            .spawn()
            .expect("strace");
        std::thread::sleep(Duration::from_millis(500));
        stop(&mut strace);
        let _ = sh.kill();
        let _ = sh.wait();
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        if text.contains("Operation not permitted") || text.is_empty() {
            crate::skip_test("SKIP strace_counts_a_live_process: ptrace not permitted here");
            return;
        }
        let calls = parse_summary(&text).unwrap_or_else(|| panic!("no table: {text}"));
        assert!(
            calls.iter().any(|(n, c)| n.starts_with("wait") && *c > 0)
                || calls.iter().any(|(n, _)| n == "clone" || n == "clone3"),
            "the shell forks and waits: {calls:?}\n{text}"
        );
    }
}
