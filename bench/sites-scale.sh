#!/usr/bin/env bash
# Many sites in one server (issue 38), measured: start to ready, memory
# against the bodies, the cost of a one-file change in one site, and the
# server's CPU per request with one site and with SITES sites.
#
#   bench/sites-scale.sh NEW_BINARY [OLD_BINARY]
#   SITES=1000 FILES=100 ROUNDS=5 DUR=4 bench/sites-scale.sh \
#       target/release/shardhttpd /tmp/old/shardhttpd
#
# SITES sites of FILES files each (100 B to 2 KiB), each site claiming ten
# names: five exact (`sI.test`, `wwwK.sI.test`) and five wildcards
# (`*.sI.test`, `*.zoneK.sI.test`): 10 000 names at SITES=1000. The one-site
# server serves every file of every site from one root (same files, same
# bytes). Each site's watcher is an inotify instance: raise
# fs.inotify.max_user_instances above SITES first (as root:
# `sysctl fs.inotify.max_user_instances=4096`), or the sites past the limit
# fall back to rescans, which cost CPU and skew the per-request figures.
#
# CPU per request: server on CPU 1 (one shard), wrk on CPU 0, HTTP/1.1
# keep-alive, c=100, a 100-byte file, rounds interleaved, medians; user+sys
# ticks of the server from /proc/PID/stat over wrk's requests
# (PERFORMANCE.md, "Measuring"). Rows: OLD_BINARY and NEW_BINARY serving
# one site's root alone (100 files: today's single-site figure), NEW_BINARY
# with SITES sites asked by an exact name and by a name a wildcard covers;
# then each row's median ratio to OLD_BINARY (or NEW_BINARY alone) over the
# rounds, which the VM's drift between rounds cancels out of.
set -euo pipefail
NEW=${1:?usage: bench/sites-scale.sh NEW_BINARY [OLD_BINARY]}
OLD=${2:-}
SITES=${SITES:-1000}
FILES=${FILES:-100}
ROUNDS=${ROUNDS:-5}
DUR=${DUR:-4}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
TCK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

echo "# making $SITES sites x $FILES files" >&2
python3 - "$WORK" "$SITES" "$FILES" <<'PY'
import os, random, sys
work, sites, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(38)
conf = [f'root = "{work}/default"', 'unknown_host = "default"']
os.makedirs(f"{work}/default", exist_ok=True)
os.makedirs(f"{work}/one", exist_ok=True)
total = 0
for i in range(sites):
    root = f"{work}/sites/s{i}"
    os.makedirs(root, exist_ok=True)
    for f in range(files):
        size = 100 if f == 0 else rnd.randint(100, 2048)
        body = rnd.randbytes(size) if f % 2 else b"x" * size
        for r in (root, f"{work}/one/s{i}"):
            os.makedirs(r, exist_ok=True)
            with open(f"{r}/f{f}.bin" if f else f"{r}/a.txt", "wb") as fh:
                fh.write(body)
        total += size
    names = [f"s{i}.test"] + [f"www{k}.s{i}.test" for k in range(4)]
    names += [f"*.s{i}.test"] + [f"*.zone{k}.s{i}.test" for k in range(4)]
    conf += ["[[sites]]", "names = [" + ", ".join(f'"{n}"' for n in names) + "]",
             f'root = "{root}"']
with open(f"{work}/sites.toml", "w") as fh:
    fh.write("\n".join(conf) + "\n")
with open(f"{work}/bodies", "w") as fh:
    fh.write(str(total))
PY
BODIES=$(cat "$WORK/bodies")
INSTANCES=$(cat /proc/sys/fs/inotify/max_user_instances)
if [ "$INSTANCES" -le "$SITES" ]; then
  echo "# WARNING: fs.inotify.max_user_instances=$INSTANCES <= $SITES sites: some fall back to rescans" >&2
fi

# start NAME BIN ARGS... -> sets PID, PORT, ADMIN and READY_MS
start() {
  local bin=$1
  shift
  PORT=$((20000 + RANDOM % 20000))
  ADMIN=$((PORT + 1))
  local t0 t1
  t0=$(date +%s%N)
  taskset -c 1 "$bin" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" --cores 1 \
    --compress false --io epoll "$@" 2>>"$WORK/log" &
  PID=$!
  PIDS+=("$PID")
  until curl -sf "http://127.0.0.1:$ADMIN/readyz" >/dev/null 2>&1; do sleep 0.01; done
  t1=$(date +%s%N)
  READY_MS=$(((t1 - t0) / 1000000))
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; }

# cpu NAME HOST PATH -> "NAME us_per_request requests_per_second"
cpu() {
  local name=$1 host=$2 path=$3 t0 t1 out reqs
  taskset -c 0 wrk -t1 -c100 -d1s -H "Host: $host" "http://127.0.0.1:$PORT$path" >/dev/null 2>&1 || true
  t0=$(ticks "$PID")
  out=$(taskset -c 0 wrk -t1 -c100 -d"${DUR}s" -H "Host: $host" "http://127.0.0.1:$PORT$path" 2>&1)
  t1=$(ticks "$PID")
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  awk -v n="$name" -v t=$((t1 - t0)) -v hz="$TCK" -v r="$reqs" -v d="$DUR" \
    'BEGIN { printf "%s %.3f %.0f\n", n, t / hz * 1e6 / r, r / d }'
}

# change HOST PATH FILE -> milliseconds from the write to the new body served
change() {
  local host=$1 path=$2 file=$3 t0 t1 want
  want="changed $RANDOM$RANDOM"
  t0=$(date +%s%N)
  printf '%s' "$want" >"$file.tmp" && mv "$file.tmp" "$file"
  until [ "$(curl -s -H "Host: $host" "http://127.0.0.1:$PORT$path" | head -c 64 | tr -d '\0')" = "$want" ]; do sleep 0.002; done
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

MID=$((SITES / 2))
echo "## start, memory, one-file change (NEW_BINARY)"
start "$NEW" --root "$WORK/one"
echo "one site:   ready ${READY_MS} ms, RSS $(rss_kib "$PID") KiB, bodies $((BODIES / 1024)) KiB"
echo "one site:   one-file change served after $(change x "/s$MID/f3.bin" "$WORK/one/s$MID/f3.bin") ms"
stop
start "$NEW" --config "$WORK/sites.toml"
echo "$SITES sites: ready ${READY_MS} ms, RSS $(rss_kib "$PID") KiB, bodies $((BODIES / 1024)) KiB, threads $(ls "/proc/$PID/task" | wc -l)"
echo "$SITES sites: one-file change served after $(change "s$MID.test" /f3.bin "$WORK/sites/s$MID/f3.bin") ms"
gens=$(curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '/^shardhttpd_site_snapshot_generation/ {print $2}' | sort | uniq -c | tr '\n' ' ')
echo "$SITES sites: snapshot generations (count generation): $gens"
stop

echo "## server CPU per request, HTTP/1.1 keep-alive 100 B, $ROUNDS interleaved rounds"
for round in $(seq "$ROUNDS"); do
  if [ -n "$OLD" ]; then
    start "$OLD" --root "$WORK/sites/s$MID"
    cpu old-1site x /a.txt
    stop
  fi
  start "$NEW" --root "$WORK/sites/s$MID"
  cpu new-1site x /a.txt
  stop
  start "$NEW" --config "$WORK/sites.toml"
  cpu "new-${SITES}sites-exact" "www2.s$MID.test" /a.txt
  cpu "new-${SITES}sites-wildcard" "img.zone3.s$MID.test" /a.txt
  stop
  echo "round $round"
done | tee "$WORK/raw" >&2
echo "# medians: server CPU us/request, requests/s"
grep -v '^round' "$WORK/raw" | sort | awk '{v[$1]=v[$1]" "$2; r[$1]=r[$1]" "$3}
  END {for (k in v) print k, v[k], "|", r[k]}' |
  python3 -c '
import sys, statistics
for line in sys.stdin:
    name, rest = line.split(None, 1)
    us, rps = rest.split("|")
    us = [float(x) for x in us.split()]
    rps = [float(x) for x in rps.split()]
    print(f"{name:28} {statistics.median(us):7.3f} us/req  {statistics.median(rps):9.0f} req/s  (rounds: {us})")
'
echo "# per-round ratio to the baseline, median"
python3 - "$WORK/raw" <<'PY'
import statistics, sys
rounds, cur = [], {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "round":
        rounds.append(cur)
        cur = {}
    else:
        cur[f[0]] = float(f[1])
base = "old-1site" if "old-1site" in rounds[0] else "new-1site"
for name in sorted(rounds[0]):
    r = [x[name] / x[base] for x in rounds]
    print(f"{name:28} x{statistics.median(r):.3f} of {base}  (rounds: {[round(v, 3) for v in r]})")
PY
