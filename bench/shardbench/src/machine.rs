//! The machine and the binaries the study runs on it: how its CPUs are
//! split between the load generators and the servers, the description
//! written to machine.md, and what a shardhttpd binary offers (its flags).

use std::fs;
use std::io;
use std::path::Path;

use crate::measure::Ctx;
use crate::study::Args;
use crate::{procs, servers};

/// Client and server CPUs from the flags, or split from the affinity mask.
pub fn split_cpus(args: &Args) -> io::Result<(Vec<usize>, Vec<usize>)> {
    let allowed = procs::allowed_cpus();
    let client = match &args.client_cpus {
        Some(l) => procs::parse_cpu_list(l),
        None => allowed[..(allowed.len() / 3).max(1).min(allowed.len())].to_vec(),
    };
    let server = match &args.server_cpus {
        Some(l) => procs::parse_cpu_list(l),
        None => allowed
            .iter()
            .copied()
            .filter(|c| !client.contains(c))
            .collect(),
    };
    if client.is_empty() {
        return Err(io::Error::other("no client CPU"));
    }
    if server.is_empty() {
        // One CPU: share it, and say that the figures then mean little.
        eprintln!("WARNING: one CPU only: client and server share it");
        return Ok((client.clone(), client));
    }
    Ok((client, server))
}

/// The machine description (Markdown).
pub fn machine(ctx: &Ctx, bin: &Path, nofile: u64, cap: usize) -> String {
    let read = |p: &str| fs::read_to_string(p).unwrap_or_default().trim().to_owned();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let online = read("/sys/devices/system/cpu/online");
    let siblings = read("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list");
    let nodes = fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("node") && n[4..].parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0);
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(servers::workspace_root())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let mut m = String::new();
    let mut line = |k: &str, v: String| m.push_str(&format!("- {k}: {v}\n"));
    line("date", date);
    line("CPU", model);
    line(
        "CPUs online",
        format!("{online} (CPU 0's SMT siblings: {siblings}; NUMA nodes: {nodes})"),
    );
    line("client CPUs", procs::cpu_list(&ctx.client));
    line("server CPUs", procs::cpu_list(&ctx.server));
    line("kernel", read("/proc/sys/kernel/osrelease"));
    line("load average at the end", read("/proc/loadavg"));
    line(
        "RLIMIT_NOFILE",
        format!("{nofile} (concurrency capped at {cap})"),
    );
    line(
        "shardhttpd",
        format!(
            "{} ({}, commit {git})",
            servers::version(&bin.display().to_string(), "--version"),
            bin.display()
        ),
    );
    line("wrk", servers::version("wrk", "-v"));
    line("ab", servers::version("ab", "-V"));
    line("h2load", servers::version("h2load", "--version"));
    line("nginx", servers::version("nginx", "-v"));
    line("h2o", servers::version("h2o", "--version"));
    line("lighttpd", servers::version("lighttpd", "-v"));
    line("caddy", servers::version("caddy", "version"));
    m
}

/// Whether this shardhttpd binary has TLS listeners.
pub fn has_tls(bin: &Path) -> io::Result<bool> {
    has_flag(bin, "--tls-listen")
}

/// Whether this shardhttpd binary's `--help` lists `flag` (as itself, not
/// as the start of a longer flag).
pub fn has_flag(bin: &Path, flag: &str) -> io::Result<bool> {
    let help = std::process::Command::new(bin).arg("--help").output()?;
    Ok(help_lists(&String::from_utf8_lossy(&help.stdout), flag))
}

pub fn help_lists(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(at, _)| {
        let before = help[..at].chars().next_back();
        let after = help[at + flag.len()..].chars().next();
        !matches!(before, Some(c) if c.is_alphanumeric() || c == '-')
            && !matches!(after, Some(c) if c.is_alphanumeric() || c == '-')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_found_as_itself() {
        let help = "  --io <IO>  the backend\n  --io-depth <N>\n  --tls-listen <ADDR>\n";
        assert!(help_lists(help, "--io"));
        assert!(help_lists(help, "--tls-listen"));
        assert!(!help_lists("  --io-depth <N>\n  --radio <X>\n", "--io"));
        assert!(!help_lists("", "--io"));
    }
}
