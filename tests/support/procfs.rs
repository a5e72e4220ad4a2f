//! The server process seen through `/proc`: per-thread scheduling fields and
//! syscall counts, and the flags of every open descriptor. These check
//! invariants that are invisible on the socket (close-on-exec, builder
//! priority, one write per batch) without strace.

use std::fs;
use std::time::Duration;

use super::{poll_until, threads, Server};

/// The tid of the server's `shard-0` thread, once it exists.
pub fn shard0(server: &Server) -> u32 {
    let mut tid = None;
    poll_until(Duration::from_secs(5), || {
        tid = threads(server.pid()).get("shard-0").copied();
        tid.is_some()
    });
    tid.unwrap_or_else(|| panic!("no shard-0 thread: {:?}", threads(server.pid())))
}

/// Fields of `/proc/<pid>/task/<tid>/stat`, numbered as in proc(5) (1-based:
/// 1 is the tid, 2 the comm); `None` once the thread is gone.
pub fn task_stat(pid: u32, tid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The comm may contain spaces and parentheses: split around the last ')'.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let mut fields = vec![
        stat[..open].trim().to_string(),
        stat[open + 1..close].to_string(),
    ];
    fields.extend(stat[close + 1..].split_whitespace().map(str::to_string));
    Some(fields)
}

/// The nice value (field 19) of a thread.
pub fn task_nice(pid: u32, tid: u32) -> Option<i64> {
    task_stat(pid, tid).and_then(|f| f.get(18)?.parse().ok())
}

/// How long a thread has run on a CPU, in ns (the first field of
/// `/proc/<pid>/task/<tid>/schedstat`); `None` once the thread is gone.
pub fn task_runtime_ns(pid: u32, tid: u32) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Every thread of `pid`: (tid, comm, nice).
pub fn tasks(pid: u32) -> Vec<(u32, String, i64)> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_string_lossy().parse().ok()?;
            let f = task_stat(pid, tid)?;
            Some((tid, f[1].clone(), f.get(18)?.parse().ok()?))
        })
        .collect()
}

/// A counter of `/proc/<pid>/task/<tid>/io` (`syscr`, `syscw`, ...): the
/// kernel counts read(2)/readv(2) and write(2)/writev(2)/sendfile(2) calls
/// per thread.
pub fn task_io(pid: u32, tid: u32, key: &str) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/io"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/task/{tid}/io: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/task/{tid}/io"))
}

/// One open descriptor: its number, what it points at, and its `flags`
/// from fdinfo (octal, as the kernel prints them).
#[derive(Debug)]
pub struct Fd {
    pub fd: u32,
    pub target: String,
    pub flags: u32,
}

/// `O_CLOEXEC` in fdinfo's `flags` (octal 02000000 on every Linux arch that
/// matters here).
pub const O_CLOEXEC: u32 = 0o2_000_000;
/// `O_NONBLOCK` (octal 04000).
pub const O_NONBLOCK: u32 = 0o4_000;

/// Every descriptor of `pid`, from `/proc/<pid>/fd` and `fdinfo`. Descriptors
/// that close while being read are skipped.
pub fn fds(pid: u32) -> Vec<Fd> {
    let mut out = Vec::new();
    let dir = fs::read_dir(format!("/proc/{pid}/fd")).expect("read /proc/PID/fd");
    for e in dir.flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(target) = fs::read_link(e.path()) else {
            continue;
        };
        let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .unwrap_or_else(|| panic!("no flags in fdinfo of fd {fd}: {info}"));
        out.push(Fd {
            fd,
            target: target.to_string_lossy().into_owned(),
            flags,
        });
    }
    out.sort_by_key(|f| f.fd);
    out
}
