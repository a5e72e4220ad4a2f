#!/usr/bin/env bash
# Snapshot benchmark for live content (issue 3): on a synthetic root of
# $FILES files, the initial build time, the snapshot's memory, and the time
# from changing one file to the new bytes being served over HTTP.
#
#   bench/snapshot.sh                 # 10 000 mixed files, default compression
#   FILES=2000 EXTRA="--compress false" bench/snapshot.sh
#   EXTRA="--compress false" bench/snapshot.sh --files 200000 --file-size 1024   # issue 8's table
#
# With --files N --file-size B the root is N files of B bytes in
# directories of 100 (issue 8's shape), and the report is issue 8's table:
# start to serving, one-file change to served (median and max of $CHANGES),
# the server CPU each change cost (utime+stime delta, /proc) and each
# incremental rebuild's own time (its log line), RSS at rest
# against the body bytes (ratio and overhead per file), RSS while changes
# keep coming, and what the last rebuild examined and copied
# (/status.json).
#
# Memory is reported two ways: the snapshot's own body bytes (identity and
# variants, from the build log) and the server's RSS minus the RSS of the same
# server on a one-file root.
set -euo pipefail

FILES=${FILES:-10000}
FILE_SIZE=
while [[ $# -gt 0 ]]; do
    case $1 in
    --files) FILES=$2; shift 2 ;;
    --file-size) FILE_SIZE=$2; shift 2 ;;
    *) echo "usage: $0 [--files N] [--file-size BYTES]" >&2; exit 2 ;;
    esac
done
CHANGES=${CHANGES:-20}
CORES=${CORES:-2}
EXTRA=${EXTRA:-}
cd "$(dirname "$0")/.."
# The binary cargo reports (CARGO_TARGET_DIR is honoured); BIN overrides it.
if [[ -z ${BIN:-} ]]; then
    BIN=$(cargo build --release --quiet -p shardhttpd --bin shardhttpd --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
[[ -x $BIN ]] || { echo "no shardhttpd binary at '$BIN'" >&2; exit 1; }

WORK=$(mktemp -d /tmp/shardhttpd-snapbench.XXXXXX)
# Servers are started in $(start …) subshells, so `jobs` never sees them:
# each one's PID is remembered here for the exit trap.
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

if [[ -n $FILE_SIZE ]]; then
python3 - "$WORK/www" "$FILES" "$FILE_SIZE" <<'PY'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = os.path.join(root, "d%04d" % (i // 100))
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    head = b"<!-- %d -->\n" % i
    with open(os.path.join(d, "f%07d.html" % i), "wb") as f:
        f.write(head + b"x" * max(0, size - len(head)))
PY
else
python3 - "$WORK/www" "$FILES" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(42)
words = "static server snapshot shard epoll kernel socket buffer arena brotli gzip zstd cache header".split()
kinds = [("html", 0.4), ("css", 0.15), ("js", 0.2), ("json", 0.1), ("png", 0.15)]
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    r, acc = rng.random(), 0.0
    for ext, p in kinds:
        acc += p
        if r <= acc:
            break
    size = rng.randint(1024, 12 * 1024)
    if ext == "png":
        data = bytes(rng.getrandbits(8) for _ in range(size))
    else:
        text = " ".join(rng.choice(words) for _ in range(size // 6))
        data = ("<!-- %d -->\n" % i + text).encode()
    with open(os.path.join(d, "f%05d.%s" % (i, ext)), "wb") as f:
        f.write(data)
PY
fi
mkdir -p "$WORK/tiny" && echo hi > "$WORK/tiny/index.html"
du -sh --apparent-size "$WORK/www" | awk '{print "root: '"$FILES"' files, " $1 " on disk"}'
# The start is measured on a root that is clean and in the page cache, as a
# served root is: written long before, and read before. Just written, it is
# still dirty, and the start would share the cores with the kernel writing
# it back; and where idle pages are reclaimed after a minute (DAMON's
# pageout scheme on the VMs this was measured on), the files written first
# are read from disk again. At a million files, one afternoon, the start
# took 16.5 s the first way and 24 s the second, against 8.4-9.8 s clean
# and cached. The read below cannot help where memory is short of the root:
# its line shows how long it took (seconds per hundred thousand files when
# the root comes from disk).
S0=$(date +%s.%N)
sync
(cd "$WORK/www" && find . -type f -print0 | xargs -0 -n 4000 -P 2 cat >/dev/null)
echo "root written back (sync) and read once: $(echo "$(date +%s.%N) - $S0" | bc) s"

start() { # root logfile -> pid
    # shellcheck disable=SC2086
    "$BIN" --root "$1" --listen 127.0.0.1:0 --admin 127.0.0.1:0 --cores "$CORES" $EXTRA >/dev/null 2>"$2" &
    local pid=$!
    for _ in $(seq 1 6000); do
        grep -q "listening addr=" "$2" && break
        sleep 0.05
    done
    echo "$pid"
}
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

TINY=$(start "$WORK/tiny" "$WORK/tiny.log")
PIDS+=("$TINY")
BASE_RSS=$(rss_kib "$TINY")
kill "$TINY"

T0=$(date +%s.%N)
PID=$(start "$WORK/www" "$WORK/server.log")
T1=$(date +%s.%N)
PIDS+=("$PID")
PORT=$(grep -o 'listening addr=127.0.0.1:[0-9]*' "$WORK/server.log" | head -1 | cut -d: -f2)
BUILT=$(grep "snapshot built" "$WORK/server.log" | head -1)
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$BUILT"; }
echo "initial build: $(field elapsed_ms) ms (process start to listening: $(echo "$T1 - $T0" | bc) s)"
# What the start cost the server, to tell a slow machine from a slow disk:
# its CPU (utime+stime, all threads) and the bytes it made the kernel fetch
# from storage (/proc/PID/io; 0 when the whole root came from the page cache).
START_CPU=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$PID/stat")
START_READ=$(awk '/^read_bytes/ {printf "%.1f", $2 / 1048576}' "/proc/$PID/io")
echo "start CPU (user+sys, all threads): $START_CPU s; read from storage: $START_READ MiB"
# A root past preload_max_files starts serving from disk and loads its
# files into memory in the background; a large root starts with identity
# bodies and builds its compressed variants in the background. Memory and
# change latency are measured once both are in.
if grep -q "serving files from disk; loading them" "$WORK/server.log"; then
    until grep -q "files loaded into memory" "$WORK/server.log"; do sleep 0.2; done
    T2=$(date +%s.%N)
    BUILT=$(grep "snapshot built" "$WORK/server.log" | tail -1)
    echo "served from disk at first; files in memory $(echo "$T2 - $T0" | bc) s after process start ($(field elapsed_ms) ms build)"
fi
if grep -q "building compressed variants" "$WORK/server.log"; then
    until grep -q "compressed variants ready" "$WORK/server.log"; do sleep 0.2; done
    T2=$(date +%s.%N)
    BUILT=$(grep "snapshot built" "$WORK/server.log" | tail -1)
    echo "compressed variants ready: $(field elapsed_ms) ms build, $(echo "$T2 - $T0" | bc) s after process start"
fi
# At rest: a full build frees its per-file scratch and trims the heap on a
# thread of its own after the server starts listening (well under a second
# at a million files), so wait until two samples 0.5 s apart agree.
RSS=$(rss_kib "$PID")
for _ in $(seq 1 20); do
    sleep 0.5
    NOW=$(rss_kib "$PID")
    ((NOW - RSS < 1024 && RSS - NOW < 1024)) && break
    RSS=$NOW
done
RSS=$NOW
echo "snapshot bodies: identity $(field mem_bytes) B in memory, $(field file_bytes) B from fds, variants $(field encoded_bytes) B"
echo "RSS: $((RSS / 1024)) MiB, minus a one-file server: $(((RSS - BASE_RSS) / 1024)) MiB"
BODIES=$(($(field mem_bytes) + $(field encoded_bytes)))
if ((BODIES > 0)); then
    echo "RSS at rest / body bytes: $(echo "scale=2; $RSS * 1024 / $BODIES" | bc)x; overhead beyond the bodies: $(( (RSS * 1024 - BODIES) / FILES )) B per file"
fi

ADMIN=$(grep -o 'admin endpoint addr=127.0.0.1:[0-9]*' "$WORK/server.log" | head -1 | cut -d: -f2)
python3 - "$WORK/www" "$PORT" "$CHANGES" "$PID" "$ADMIN" <<'PY'
import http.client, json, os, statistics, sys, time
root, port, n, pid, admin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tick = os.sysconf("SC_CLK_TCK")
def cpu_ms():
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 / tick
def rss_mib():
    for l in open("/proc/%d/status" % pid):
        if l.startswith("VmRSS:"):
            return int(l.split()[1]) / 1024
def status():
    c = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
    c.request("GET", "/status.json")
    return json.loads(c.getresponse().read())["snapshot"]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
target = [os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs if f.endswith(".html")][0]
url = target[len(root):]
lat, cpu, peak = [], [], 0.0
for i in range(n):
    c0 = cpu_ms()
    marker = b"<!-- change %d -->" % i
    body = open(target, "rb").read().split(b"\n", 1)[-1]
    t0 = time.monotonic()
    with open(target + ".tmp", "wb") as f:
        f.write(marker + b"\n" + body)
    os.rename(target + ".tmp", target)
    while True:
        conn.request("GET", url)
        r = conn.getresponse()
        data = r.read()
        if data.startswith(marker):
            break
        time.sleep(0.001)
    lat.append((time.monotonic() - t0) * 1000)
    peak = max(peak, rss_mib())
    time.sleep(0.2)
    cpu.append(cpu_ms() - c0)
lat.sort()
print("change to served (one file, %d changes): median %.0f ms, min %.0f ms, max %.0f ms"
      % (n, statistics.median(lat), lat[0], lat[-1]))
print("server CPU per change (rebuild + the polling GETs): median %.0f ms, max %.0f ms (clock tick %d ms)"
      % (statistics.median(cpu), max(cpu), 1000 // tick))
s = status()
print("last rebuild: %s paths examined, %s body bytes copied, %s segments"
      % (s.get("paths_examined"), s.get("bytes_copied"), s.get("segments")))
print("RSS while changes kept coming: peak %.0f MiB" % peak)
PY
# Each incremental rebuild logs its own wall time: finer than the CPU
# figure above, which counts in clock ticks and includes the polling GETs.
grep "snapshot patched" "$WORK/server.log" | sed -n 's/.*elapsed_ms=\([0-9]*\).*/\1/p' | sort -n |
    awk '{a[NR] = $1} END {if (NR) print "incremental rebuild time (log): median " a[int((NR + 1) / 2)] " ms, max " a[NR] " ms over " NR " rebuilds"}'
grep "snapshot patched" "$WORK/server.log" | tail -1 | sed 's/.*snapshot patched/last incremental rebuild:/'
grep "snapshot built" "$WORK/server.log" | tail -1 | sed 's/.*snapshot built/last full build:/'
