//! Processes the study starts and what /proc says about them: every child
//! runs in its own process group and is killed (group and all) on drop, on
//! Ctrl-C and if the tool itself dies; CPU time of a process tree and of
//! whole CPUs; the fd limit.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by SIGINT/SIGTERM; the run stops at the next check and cleans up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Route SIGINT and SIGTERM to [`interrupted`] instead of killing the tool,
/// so it can stop its children and keep the cells it finished.
pub fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C"` function that only stores to
        // an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sleep up to `d`, waking early on an interrupt.
pub fn sleep(d: Duration) {
    let end = Instant::now() + d;
    while !interrupted() {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// A child in its own process group: dropping it kills the whole group
/// (nginx's workers, h2o's helpers) and reaps the leader.
pub struct Group {
    child: Option<Child>,
}

impl Group {
    /// Spawn `cmd` as the leader of a new process group, killed by the
    /// kernel if this tool dies first (`PR_SET_PDEATHSIG`).
    pub fn spawn(name: &str, cmd: &mut Command) -> io::Result<Group> {
        cmd.process_group(0);
        // SAFETY: the closure runs in the forked child before exec and only
        // calls prctl, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("starting {name}: {e}")))?;
        Ok(Group { child: Some(child) })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Wait for the leader to exit, polling for interrupts; `None` when
    /// interrupted (the group is killed) or past `limit`.
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if interrupted() || Instant::now() >= end {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL the whole group and reap the leader.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: plain syscall on the group this tool created (the
                // leader is unreaped, so its pid cannot have been reused).
                unsafe {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Raise the soft fd limit to the hard one (children inherit it) and
/// return it.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit; raising soft to hard needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        // SAFETY: as above.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    }
    lim.rlim_cur
}

/// Clock ticks per second for /proc times.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// `(ppid, utime + stime)` of a process from /proc/PID/stat.
fn stat_of(pid: u32) -> Option<(u32, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// Processes of the tree under `root` (itself included), alive now.
pub fn tree(root: u32) -> Vec<u32> {
    let mut parent: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok()) {
                if let Some(st) = stat_of(pid) {
                    parent.insert(pid, st);
                }
            }
        }
    }
    let mut out = Vec::new();
    for &pid in parent.keys() {
        let mut p = pid;
        // Walk up at most 16 levels looking for `root`.
        for _ in 0..16 {
            if p == root {
                out.push(pid);
                break;
            }
            match parent.get(&p) {
                Some(&(pp, _)) if pp != 0 && pp != p => p = pp,
                _ => break,
            }
        }
    }
    out
}

/// CPU time (user + system) of `root` and every descendant, in
/// nanoseconds: the sum of each thread's run time from
/// /proc/PID/task/TID/schedstat, which is exact where /proc/PID/stat counts
/// 10 ms ticks (a light 1 s cell may use less than one). Falls back to the
/// ticks of /proc/PID/stat where schedstat is missing.
pub fn tree_cpu_ns(root: u32) -> u64 {
    let tick_ns = 1_000_000_000 / ticks_per_second();
    let mut total = 0;
    for pid in tree(root) {
        let mut from_tasks = None;
        if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                let path = t.path().join("schedstat");
                if let Some(ns) = fs::read_to_string(path)
                    .ok()
                    .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                {
                    *from_tasks.get_or_insert(0) += ns;
                }
            }
        }
        total += match from_tasks {
            Some(ns) => ns,
            None => stat_of(pid).map_or(0, |(_, ticks)| ticks * tick_ns),
        };
    }
    total
}

/// `(busy, total)` ticks summed over `cpus` from /proc/stat; busy is all
/// but idle and iowait (softirq counts: loopback TCP work runs there).
pub fn cpu_ticks(cpus: &[usize]) -> (u64, u64) {
    let text = fs::read_to_string("/proc/stat").unwrap_or_default();
    let (mut busy, mut total) = (0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(name) = f.next() else { continue };
        let Some(id) = name
            .strip_prefix("cpu")
            .and_then(|s| s.parse::<usize>().ok())
        else {
            continue;
        };
        if !cpus.contains(&id) {
            continue;
        }
        let v: Vec<u64> = f.take(8).filter_map(|x| x.parse().ok()).collect();
        let sum: u64 = v.iter().sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        busy += sum - idle;
        total += sum;
    }
    (busy, total)
}

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    let text = fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|s| parse_cpu_list(s.trim()))
        .unwrap_or_default()
}

/// `0-3,6` → [0, 1, 2, 3, 6].
pub fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// [0, 1, 2, 6] → `0,1,2,6` (the form taskset and `--cores` both take).
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(parse_cpu_list("0-3,6"), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("1"), vec![1]);
        assert_eq!(cpu_list(&[0, 2]), "0,2");
    }

    #[test]
    fn own_ticks_are_readable() {
        let me = std::process::id();
        assert!(stat_of(me).is_some());
        let (busy, total) = cpu_ticks(&allowed_cpus());
        assert!(total >= busy && total > 0);
        assert!(tree_cpu_ns(me) > 0, "this test process has run");
    }
}
