//! What the host allows, read at start: the CPUs in this process's
//! affinity mask (`cores`), the cgroup's memory limit (the default
//! `cache_max_bytes`) and `RLIMIT_NOFILE` (the default
//! `max_connections_per_core`).

use super::*;

/// Default `cache_max_bytes`: [`DEFAULT_CACHE_MAX_BYTES`], or two fifths
/// of the cgroup's memory limit when that is lower, so that a rebuild (two
/// generations briefly side by side, their variants included) and the
/// connections' buffers fit under a container's limit instead of being
/// OOM-killed: 204 MiB under Kubernetes' 512 Mi.
pub fn default_cache_max_bytes(cgroup_limit: Option<u64>) -> u64 {
    match cgroup_limit {
        Some(limit) => DEFAULT_CACHE_MAX_BYTES.min(limit / 5 * 2),
        None => DEFAULT_CACHE_MAX_BYTES,
    }
}

/// The memory limit of this process's cgroup (v2 `memory.max`, or v1
/// `memory.limit_in_bytes`), if one is set. Read at start; a container sees
/// its own cgroup at the root of its cgroup namespace.
pub fn cgroup_memory_max() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    memory_max_of(&cgroups, |file| std::fs::read_to_string(file).ok())
}

/// [`cgroup_memory_max`] for a `/proc/self/cgroup` text, reading the
/// limit files through `read`.
fn memory_max_of(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (hierarchy, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_end_matches('/');
        let file = if hierarchy == "0" && controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            continue;
        };
        // "max" (v2), or a huge page-rounded number (v1): no limit.
        if let Some(n) = read(&file)
            .and_then(|text| text.trim().parse::<u64>().ok())
            .filter(|&n| n < 1 << 60)
        {
            return Some(n);
        }
    }
    None
}

/// Fds kept back from connections: the listeners, epoll and eventfds,
/// the admin listener, the access log, the watcher, build-time opens.
pub const RESERVED_FDS: u64 = 64;
/// The floor of the default `max_connections_per_core`.
pub const MIN_CONNECTIONS_PER_CORE: usize = 64;

/// Default `max_connections_per_core`: the fds RLIMIT_NOFILE leaves after
/// [`RESERVED_FDS`] and the large-file cache (`max_open_files`, at most a
/// quarter of the limit), shared by the shards; at least
/// [`MIN_CONNECTIONS_PER_CORE`]. With the limit at 65 536, 1 024 open files
/// and 4 shards: 16 112. So accept stops at the cap instead of at EMFILE.
pub fn default_max_connections(nofile: Option<u64>, open_files: usize, shards: usize) -> usize {
    let Some(nofile) = nofile else {
        return 16_384;
    };
    let reserved = RESERVED_FDS + (open_files as u64).min(nofile / 4);
    let per = nofile.saturating_sub(reserved) / shards.max(1) as u64;
    (per as usize).max(MIN_CONNECTIONS_PER_CORE)
}

/// The CPUs this process may run on (respects `taskset` and cpusets).
pub fn affinity_cpus() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    ids
}

/// `"4"` → the first four allowed CPUs; `"0-3,6"` → exactly those CPUs.
pub fn parse_cores(spec: &str, allowed: &[usize]) -> anyhow::Result<Vec<usize>> {
    let spec = spec.trim();
    if !spec.contains(['-', ',']) {
        let n: usize = spec
            .parse()
            .with_context(|| format!("`{spec}` is neither a count nor a CPU list"))?;
        if n == 0 || n > allowed.len() {
            bail!(
                "count {n} must be between 1 and {} (CPUs in the affinity mask)",
                allowed.len()
            );
        }
        return Ok(allowed[..n].to_vec());
    }
    let mut cpus = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: usize = lo
            .parse()
            .with_context(|| format!("bad CPU number in `{part}`"))?;
        let hi: usize = hi
            .parse()
            .with_context(|| format!("bad CPU number in `{part}`"))?;
        if lo > hi {
            bail!("range `{part}` is backwards");
        }
        for cpu in lo..=hi {
            if !allowed.contains(&cpu) {
                bail!("CPU {cpu} is not in this process's affinity mask {allowed:?}");
            }
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    Ok(cpus)
}

#[cfg(test)]
mod cgroup_tests {
    use super::*;

    #[test]
    fn cache_cap_is_two_fifths_of_a_lower_cgroup_limit() {
        assert_eq!(default_cache_max_bytes(None), DEFAULT_CACHE_MAX_BYTES);
        let mi = 1024 * 1024;
        assert_eq!(default_cache_max_bytes(Some(512 * mi)), 512 * mi / 5 * 2);
        assert_eq!(
            default_cache_max_bytes(Some(64 * 1024 * mi)),
            DEFAULT_CACHE_MAX_BYTES
        );
    }

    #[test]
    fn cgroup_limit_is_read_from_v2_or_v1_and_max_is_none() {
        let files = |file: &str| match file {
            "/sys/fs/cgroup/kubepods/pod1/memory.max" => Some("536870912\n".to_owned()),
            "/sys/fs/cgroup/memory.max" => Some("max\n".to_owned()),
            "/sys/fs/cgroup/memory/docker/x/memory.limit_in_bytes" => {
                Some("268435456\n".to_owned())
            }
            "/sys/fs/cgroup/memory/memory.limit_in_bytes" => {
                Some("9223372036854771712\n".to_owned())
            }
            _ => None,
        };
        assert_eq!(
            memory_max_of("0::/kubepods/pod1\n", files),
            Some(536_870_912)
        );
        assert_eq!(memory_max_of("0::/\n", files), None);
        assert_eq!(
            memory_max_of("4:memory:/docker/x\n1:cpu:/\n", files),
            Some(268_435_456)
        );
        assert_eq!(memory_max_of("4:cpuacct,memory:/\n", files), None);
        assert_eq!(memory_max_of("", files), None);
    }
}
