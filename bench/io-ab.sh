#!/usr/bin/env bash
# Server CPU per request of shardhttpd's event sources (issue 26), and of
# two binaries (A/B a change for regressions): interleaved rounds, medians.
#
#   bench/io-ab.sh [ROUNDS] NAME=BINARY:IO ...   (IO empty: no --io flag)
#   bench/io-ab.sh 5 old=/tmp/old: new=target/release/shardhttpd:epoll \
#                    uring=target/release/shardhttpd:uring
#
# Server on CPU 1 (`taskset -c 1`, one shard), wrk on CPU 0, 100-byte file;
# CPU is user+sys ticks of the server from /proc/PID/stat around each wrk
# run, divided by the requests wrk reports (PERFORMANCE.md, "Measuring").
# Workloads: keep-alive c=100, Connection: close c=100, pipelined x16 c=100
# (wrk counts each pipelined response as a request), TLS keep-alive c=100
# (a self-signed P-256 certificate made here), keep-alive c=10 000
# (`keepalive10k`, not in the default set; run DUR=5 or more, as the
# 10 000 connects count too); LOADS="keepalive tls" picks.
set -euo pipefail
# keepalive10k: wrk's 10 000 sockets (the server raises its own limit).
ulimit -n 65536 2>/dev/null || true
ROUNDS=3
if [[ ${1:-} =~ ^[0-9]+$ ]]; then ROUNDS=$1; shift; fi
DUR=${DUR:-4}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/www"
head -c 100 /dev/zero | tr '\0' 'x' > "$WORK/www/a.txt"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=localhost -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
cat > "$WORK/pipe.lua" <<'LUA'
init = function(args)
  local r = {}
  for i = 1, 16 do r[i] = wrk.format(nil, "/a.txt") end
  req = table.concat(r)
end
request = function() return req end
LUA
TCK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run NAME BIN IO WORKLOAD -> prints "NAME WORKLOAD us_per_req rps"
run() {
  local name=$1 bin=$2 io=$3 load=$4 port url tls=()
  # Below the ephemeral range, where the 10 000 connects leave TIME_WAITs.
  port=$((10000 + RANDOM % 20000))
  url="http://127.0.0.1:$port/a.txt"
  if [ "$load" = tls ]; then
    tls=(--tls-listen "127.0.0.1:$((port + 1))" --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem")
    url="https://127.0.0.1:$((port + 1))/a.txt"
  fi
  taskset -c 1 "$bin" --root "$WORK/www" --listen "127.0.0.1:$port" --admin 127.0.0.1:0 \
    --cores 1 ${io:+--io "$io"} --compress false --metrics false "${tls[@]}" 2>"$WORK/log" &
  local pid=$!
  for _ in $(seq 100); do curl -sfk "$url" >/dev/null 2>&1 && break; sleep 0.05; done
  local args=(-t1 -c100 -d"${DUR}s")
  case $load in
    close) args+=(-H 'Connection: close') ;;
    keepalive10k) args=(-t1 -c10000 -d"${DUR}s") ;;
    pipelined) args+=(-s "$WORK/pipe.lua") ;;
  esac
  taskset -c 0 wrk -t1 -c100 -d1s "$url" >/dev/null 2>&1 || true
  local t0 t1 out reqs
  t0=$(ticks $pid)
  out=$(taskset -c 0 wrk "${args[@]}" "$url" 2>&1)
  t1=$(ticks $pid)
  kill $pid; wait $pid 2>/dev/null || true
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  awk -v n="$name" -v l="$load" -v t=$((t1 - t0)) -v hz="$TCK" -v r="$reqs" -v d="$DUR" \
    'BEGIN { printf "%s %s %.2f %.0f\n", n, l, t / hz * 1e6 / r, r / d }'
}

for round in $(seq "$ROUNDS"); do
  for load in ${LOADS:-keepalive close pipelined tls}; do
    for spec in "$@"; do
      name=${spec%%=*}; rest=${spec#*=}; bin=${rest%:*}; io=${rest##*:}
      run "$name" "$bin" "$io" "$load"
    done
  done
done | tee "$WORK/raw" >&2
echo "# medians over $ROUNDS rounds: server CPU us/request, requests/s"
sort "$WORK/raw" | awk '{k=$1" "$2; v[k]=v[k]" "$3; r[k]=r[k]" "$4} END {for (k in v) print k, v[k], "|", r[k]}' |
  while read -r name load rest; do
    us=$(echo "${rest%%|*}" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    rps=$(echo "${rest#*|}" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "$load $name $us $rps"
  done | sort
